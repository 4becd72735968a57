package baselines

import (
	"testing"

	"github.com/switchyard-ai/switchyard/internal/core/fleet"
	"github.com/switchyard-ai/switchyard/internal/core/placement"
	"github.com/switchyard-ai/switchyard/schemas"
)

// pdWorker is one worker of a disaggregation test fleet.
type pdWorker struct {
	id, role, link string
	cached         int // leading prompt blocks it holds
}

func pdFleet(ws []pdWorker) *fleet.Fleet {
	f := fleet.New(fleet.Options{})
	for i, w := range ws {
		f.ApplyHeartbeat(&schemas.Heartbeat{WorkerID: w.id, GPU: "h100", TP: 1, Role: w.role, Link: w.link, KVBlocksTotal: 100000, KVBlocksFree: 100000, Models: []schemas.ModelState{{Name: "llama-3.1-8b", State: schemas.WeightHot}}}, t0)
		if w.cached > 0 {
			f.ApplyKV(&schemas.KVEvent{WorkerID: w.id, Seq: uint64(i + 1), Kind: schemas.KVStored, Hashes: hashes(w.cached)}, t0)
		}
	}
	return f
}

func hashes(n int) []uint64 {
	hs := make([]uint64, n)
	for i := range hs {
		hs[i] = uint64(i + 1)
	}
	return hs
}

// pdReq is a prompt of n tokens (n/16 blocks).
func pdReq(id string, n int) *placement.Request {
	return &placement.Request{ID: id, Model: "llama-3.1-8b", PromptTokens: n, OutputTokens: 64, BlockHashes: hashes(n / 16)}
}

// Fleets: strict roles (sglang's split), decode workers of role both
// (Dynamo's and llm-d's, whose decode workers prefill locally), and role
// both without links (no split possible).
var (
	strictPD = []pdWorker{{"p0", schemas.RolePrefill, "ib", 0}, {"p1", schemas.RolePrefill, "ib", 0}, {"d0", schemas.RoleDecode, "ib", 0}, {"d1", schemas.RoleDecode, "ib", 0}}
	localPD  = []pdWorker{{"p0", schemas.RolePrefill, "ib", 0}, {"p1", schemas.RolePrefill, "ib", 0}, {"d0", "", "ib", 0}, {"d1", schemas.RoleBoth, "ib", 0}}
	noLinks  = []pdWorker{{"w0", "", "", 0}, {"w1", schemas.RoleBoth, "", 0}, {"w2", schemas.RoleBoth, "", 0}}
)

func disaggPolicies() map[string]func() placement.Policy {
	return map[string]func() placement.Policy{
		"dynamo-disagg": func() placement.Policy { return NewDynamoDisagg(DynamoDisaggDefaults, nil) },
		"llm-d-pd":      func() placement.Policy { return NewLLMDPD(LLMDPDDefaults, nil) },
		"sglang-pd":     func() placement.Policy { return NewSGLangPD(SGLangPDDefaults, nil) },
	}
}

func role(f *fleet.Fleet, id string) string { return f.Get(id).Role }

// checkLegs fails when a decision puts a leg where its role forbids.
func checkLegs(t *testing.T, f *fleet.Fleet, d *placement.Decision) {
	t.Helper()
	if !d.OK() {
		t.Fatal("no worker")
	}
	if d.Split() {
		if !schemas.RoleTakes(d.Prefill.Role, schemas.PhasePrefill) || !schemas.RoleTakes(d.Worker.Role, schemas.PhaseDecode) || d.Prefill == d.Worker {
			t.Fatalf("split %s → %s breaks the roles", d.Prefill.ID, d.Worker.ID)
		}
		return
	}
	if !schemas.RoleTakes(d.Worker.Role, schemas.PhaseBoth) {
		t.Fatalf("aggregated request on %s (role %s)", d.Worker.ID, role(f, d.Worker.ID))
	}
}

func TestDisaggSplitsLongUncached(t *testing.T) {
	for name, mk := range disaggPolicies() {
		for fname, ws := range map[string][]pdWorker{"strict": strictPD, "local": localPD} {
			t.Run(name+"/"+fname, func(t *testing.T) {
				p, f := mk(), pdFleet(ws)
				for i := range 4 {
					d := p.Place(f, pdReq(string(rune('a'+i)), 8192), t0)
					checkLegs(t, f, d)
					if !d.Split() {
						t.Fatalf("pick %d: 8192 uncached tokens not split (on %s)", i, d.Worker.ID)
					}
					if d.PrefillTerms.CachedTokens != 0 || d.PrefillTerms.Blocks != 512 {
						t.Errorf("prefill terms %+v", d.PrefillTerms)
					}
				}
			})
		}
	}
}

func TestDisaggKeepsShortOrCachedLocal(t *testing.T) {
	cases := []struct {
		name   string
		prompt int
		cached int // blocks both decode workers hold
	}{
		{"short", 256, 0},
		{"mostly cached", 8192, 500}, // 192 uncached
		// uncached 4096 ≥ 2048 but only half the prompt: isl_bounding
		// keeps it local; llm-d's decider (4096 ≥ 512) splits it.
		{"half cached", 8192, 256},
	}
	for name, mk := range disaggPolicies() {
		if name == "sglang-pd" {
			continue // SGLang's PD mode splits everything
		}
		for _, c := range cases {
			t.Run(name+"/"+c.name, func(t *testing.T) {
				ws := append([]pdWorker(nil), localPD...)
				ws[2].cached, ws[3].cached = c.cached, c.cached
				p, f := mk(), pdFleet(ws)
				d := p.Place(f, pdReq("a", c.prompt), t0)
				checkLegs(t, f, d)
				want := name == "llm-d-pd" && c.name == "half cached"
				if d.Split() != want {
					t.Errorf("split = %v, want %v (worker %s)", d.Split(), want, d.Worker.ID)
				}
			})
		}
	}
}

func TestDynamoDisaggRules(t *testing.T) {
	cases := []struct {
		name           string
		rule           DynamoDisaggRule
		prompt, cached int // cached: blocks on the decode workers
		waiting        int // per prefill worker
		want           bool
	}{
		{"isl long", DynamoISLBounding, 4096, 0, 0, true},
		{"isl just under", DynamoISLBounding, 2032, 0, 0, false},
		{"legacy 1008 > 1000", DynamoMaxLocalPrefill, 1008, 0, 0, true},
		{"legacy 992", DynamoMaxLocalPrefill, 992, 0, 0, false},
		{"legacy half cached", DynamoMaxLocalPrefill, 8192, 256, 0, true},
		{"queue full", DynamoISLBounding, 8192, 0, 1, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cfg := DynamoDisaggDefaults
			cfg.Rule = c.rule
			ws := append([]pdWorker(nil), localPD...)
			ws[2].cached, ws[3].cached = c.cached, c.cached
			f := pdFleet(ws)
			for _, id := range []string{"p0", "p1"} {
				f.ApplyHeartbeat(&schemas.Heartbeat{WorkerID: id, GPU: "h100", TP: 1, Role: schemas.RolePrefill, Link: "ib", Waiting: c.waiting, KVBlocksTotal: 100000, KVBlocksFree: 100000, Models: []schemas.ModelState{{Name: "llama-3.1-8b", State: schemas.WeightHot}}}, t0)
			}
			d := NewDynamoDisagg(cfg, nil).Place(f, pdReq("a", c.prompt), t0)
			checkLegs(t, f, d)
			if d.Split() != c.want {
				t.Errorf("split = %v, want %v", d.Split(), c.want)
			}
		})
	}
}

func TestDisaggFallsBackToAggregated(t *testing.T) {
	aggregated := map[string]func() placement.Policy{
		"dynamo-disagg": func() placement.Policy { return NewDynamo(DynamoDefaults) },
		"llm-d-pd":      func() placement.Policy { return NewLLMD(LLMDDefaults) },
		"sglang-pd":     func() placement.Policy { return NewSGLang(SGLangDefaults) },
	}
	for name, mk := range disaggPolicies() {
		t.Run(name, func(t *testing.T) {
			p, agg := mk(), aggregated[name]()
			f, g := pdFleet(noLinks), pdFleet(noLinks)
			for i := range 6 {
				r := pdReq(string(rune('a'+i)), 8192)
				d := p.Place(f, r, t0)
				checkLegs(t, f, d)
				if d.Split() {
					t.Fatal("split without links")
				}
				if a := agg.Place(g, r, t0); a.Worker.ID != d.Worker.ID {
					t.Errorf("pick %d: %s, aggregated counterpart %s", i, d.Worker.ID, a.Worker.ID)
				}
			}
		})
	}
}

func TestDisaggNeverAggregatesOnRoleOnly(t *testing.T) {
	// One linked prefill worker and decode-only workers, plus role-both
	// workers without links: whatever each policy decides, no whole
	// request lands on a role-only worker.
	ws := []pdWorker{{"p0", schemas.RolePrefill, "ib", 0}, {"d0", schemas.RoleDecode, "ib", 4}, {"w0", "", "", 0}, {"w1", schemas.RoleBoth, "", 0}}
	for name, mk := range disaggPolicies() {
		t.Run(name, func(t *testing.T) {
			p, f := mk(), pdFleet(ws)
			for i, n := range []int{64, 256, 1024, 8192, 64} {
				d := p.Place(f, pdReq(string(rune('a'+i)), n), t0)
				checkLegs(t, f, d)
			}
		})
	}
	// The aggregated baselines too, on a fleet with role-only workers.
	for _, n := range []string{"round-robin", "least-loaded", "dynamo", "llm-d", "sglang", "random"} {
		p, _ := New(n, nil)
		f := pdFleet(ws)
		for i := range 6 {
			d := p.Place(f, pdReq(string(rune('a'+i)), 256), t0)
			checkLegs(t, f, d)
		}
	}
}

func TestSGLangPDDeterministic(t *testing.T) {
	ws := []pdWorker{{"p0", schemas.RolePrefill, "ib", 0}, {"p1", schemas.RolePrefill, "ib", 0}, {"d0", schemas.RoleDecode, "ib", 0}, {"d1", schemas.RoleDecode, "ib", 0}, {"d2", schemas.RoleDecode, "ib", 0}, {"d3", schemas.RoleDecode, "ib", 0}}
	run := func(seed uint64) []string {
		cfg := SGLangPDDefaults
		cfg.Seed = seed
		p, f := NewSGLangPD(cfg, nil), pdFleet(ws)
		var out []string
		for i := range 32 {
			d := p.Place(f, pdReq(string(rune('A'+i)), 1024), t0)
			checkLegs(t, f, d)
			if !d.Split() {
				t.Fatal("sglang-pd did not split")
			}
			out = append(out, d.Prefill.ID+">"+d.Worker.ID)
			if i%3 == 0 {
				p.Done(d.RequestID, d.Worker.ID)
			}
		}
		return out
	}
	a, b, c := run(7), run(7), run(8)
	same := true
	for i := range a {
		if a[i] != b[i] {
			t.Fatalf("seed 7 not reproducible at %d: %s vs %s", i, a[i], b[i])
		}
		same = same && a[i] == c[i]
	}
	if same {
		t.Error("seeds 7 and 8 drew the same 32 decode workers")
	}
}

// stubTransfer is a cost model with KVTransferSeconds.
type stubTransfer struct{ *placement.LinearCost }

func (stubTransfer) KVTransferSeconds(_, _, _ string, _, tokens int, _ float64, from, to string) float64 {
	if from == "" || to == "" {
		return -1
	}
	return float64(tokens) * 1e-6
}

func TestDisaggTransferSeconds(t *testing.T) {
	for _, cost := range []placement.CostModel{stubTransfer{&placement.LinearCost{}}, &placement.LinearCost{}} {
		_, has := cost.(KVTransferer)
		p, f := NewLLMDPD(LLMDPDDefaults, cost), pdFleet(strictPD)
		d := p.Place(f, pdReq("a", 8192), t0)
		if !d.Split() {
			t.Fatal("not split")
		}
		if want := map[bool]float64{true: 8192e-6, false: 0}[has]; d.TransferSeconds != want {
			t.Errorf("transfer (interface %v) = %v, want %v", has, d.TransferSeconds, want)
		}
	}
}

func TestSplitDoneReleasesBothLegs(t *testing.T) {
	p, f := NewSGLangPD(SGLangPDDefaults, nil), pdFleet(strictPD)
	d := p.Place(f, pdReq("a", 4096), t0)
	pre, dec := d.Prefill.ID, d.Worker.ID
	if p.outstanding[pre] != 1 || p.outstanding[dec] != 1 {
		t.Fatalf("outstanding %v", p.outstanding)
	}
	p.Done("a", pre)
	if p.outstanding[pre] != 0 || p.outstanding[dec] != 1 {
		t.Fatalf("after the prefill leg: %v", p.outstanding)
	}
	p.Done("a", dec)
	if p.outstanding[dec] != 0 {
		t.Fatalf("after the decode leg: %v", p.outstanding)
	}
	// Only the end reported: both legs released.
	q := NewDynamoDisagg(DynamoDisaggDefaults, nil)
	d = q.Place(f, pdReq("b", 8192), t0)
	q.Done("b", d.Worker.ID)
	if q.outstanding[d.Prefill.ID] != 0 || q.outstanding[d.Worker.ID] != 0 || len(q.active[d.Worker.ID].blocks) != 0 {
		t.Errorf("leaked: %v %+v", q.outstanding, q.active[d.Worker.ID])
	}
}
