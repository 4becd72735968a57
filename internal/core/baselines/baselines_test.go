package baselines

import (
	"testing"
	"time"

	"github.com/switchyard-ai/switchyard/internal/core/fleet"
	"github.com/switchyard-ai/switchyard/internal/core/placement"
	"github.com/switchyard-ai/switchyard/schemas"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// testFleet has three fresh workers; w1 holds the first 8 blocks of
// hashes 1..16, w2 the first 2.
func testFleet(waiting [3]int) *fleet.Fleet {
	f := fleet.New(fleet.Options{})
	for i, id := range []string{"w0", "w1", "w2"} {
		f.ApplyHeartbeat(&schemas.Heartbeat{WorkerID: id, GPU: "h100", TP: 1, KVBlocksTotal: 1000, KVBlocksFree: 1000, Waiting: waiting[i], Models: []schemas.ModelState{{Name: "llama-3.1-8b", State: schemas.WeightHot}}}, t0)
	}
	hs := make([]uint64, 16)
	for i := range hs {
		hs[i] = uint64(i + 1)
	}
	f.ApplyKV(&schemas.KVEvent{WorkerID: "w1", Seq: 1, Kind: schemas.KVStored, Hashes: hs[:8]}, t0)
	f.ApplyKV(&schemas.KVEvent{WorkerID: "w2", Seq: 1, Kind: schemas.KVStored, Hashes: hs[:2]}, t0)
	return f
}

func req(id string) *placement.Request {
	hs := make([]uint64, 16)
	for i := range hs {
		hs[i] = uint64(i + 1)
	}
	return &placement.Request{ID: id, Model: "llama-3.1-8b", PromptTokens: 256, OutputTokens: 10, BlockHashes: hs}
}

func TestBaselines(t *testing.T) {
	cases := []struct {
		name    string
		policy  placement.Policy
		waiting [3]int
		want    []string // successive picks
	}{
		{"round-robin cycles", NewRoundRobin(), [3]int{}, []string{"w0", "w1", "w2", "w0"}},
		{"least-loaded spreads", NewLeastLoaded(), [3]int{}, nil},
		{"llm-d follows the prefix", NewLLMD(LLMDDefaults), [3]int{}, []string{"w1", "w1"}},
		{"llm-d-load avoids long queues", NewLLMD(LLMDLoadOnly), [3]int{0, 50, 50}, []string{"w0"}},
		{"dynamo follows the overlap", NewDynamo(DynamoDefaults), [3]int{}, []string{"w1"}},
		{"sglang goes to the smallest tree first", NewSGLang(SGLangDefaults), [3]int{}, []string{"w0", "w0"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			f := testFleet(c.waiting)
			seen := map[string]bool{}
			n := max(len(c.want), 3)
			for i := 0; i < n; i++ {
				d := c.policy.Place(f, req(string(rune('a'+i))), t0)
				if !d.OK() {
					t.Fatalf("pick %d: no worker", i)
				}
				seen[d.Worker.ID] = true
				if i < len(c.want) && d.Worker.ID != c.want[i] {
					t.Errorf("pick %d: got %s, want %s", i, d.Worker.ID, c.want[i])
				}
			}
			if c.want == nil && len(seen) != 3 {
				t.Errorf("3 picks with no completions should use 3 workers, used %v", seen)
			}
		})
	}
}

func TestSGLangRebalancesWhenImbalanced(t *testing.T) {
	p := NewSGLang(SGLangConfig{CacheThreshold: 0.3, BalanceAbsThreshold: 2, BalanceRelThreshold: 1.5, MaxTreeBlocks: 1 << 20})
	f := testFleet([3]int{})
	// Sticky on cache: all go to w0 (first smallest tree, then the match).
	for i := 0; i < 4; i++ {
		p.Place(f, req(string(rune('a'+i))), t0)
	}
	if p.outstanding["w0"] < 3 {
		t.Fatalf("cache affinity should pile onto w0: %v", p.outstanding)
	}
	d := p.Place(f, req("z"), t0)
	if d.Worker.ID == "w0" {
		t.Errorf("imbalanced (%v): should route to the least loaded", p.outstanding)
	}
	p.Done("a", "w0")
	if _, ok := p.where["a"]; ok {
		t.Error("Done did not forget the request")
	}
}

func TestDynamoDoneReleases(t *testing.T) {
	p := NewDynamo(DynamoDefaults)
	f := testFleet([3]int{})
	d := p.Place(f, req("a"), t0)
	a := p.active[d.Worker.ID]
	if a == nil || len(a.blocks) == 0 || a.out == 0 {
		t.Fatalf("placement booked nothing: %+v", a)
	}
	p.Done("a", d.Worker.ID)
	if len(a.blocks) != 0 || a.out != 0 || a.prefill != 0 {
		t.Errorf("Done left %+v", a)
	}
}

func TestNew(t *testing.T) {
	for _, n := range Names() {
		p, err := New(n, nil)
		if err != nil || p.Name() != n {
			t.Errorf("New(%q) = %v, %v", n, p, err)
		}
	}
	if _, err := New("nope", nil); err == nil {
		t.Error("unknown name accepted")
	}
}
