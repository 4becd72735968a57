package worker

import (
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/switchyard-ai/switchyard/internal/adapter/backend/vllmkv/vllmkvtest"
	"github.com/switchyard-ai/switchyard/internal/core/fleet"
	"github.com/switchyard-ai/switchyard/internal/core/tokens"
	"github.com/switchyard-ai/switchyard/internal/testkit/bustest"
	"github.com/switchyard-ai/switchyard/internal/testkit/waitfor"
	"github.com/switchyard-ai/switchyard/schemas"
	"github.com/switchyard-ai/switchyard/services/svc"
	"github.com/switchyard-ai/switchyard/subjects"
)

// vllmMetricsPage is enough of a vLLM /metrics page for the openai
// backend's scrape.
const vllmMetricsPage = `# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="m"} 0.0
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{engine="0",model_name="m"} 0.0
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{engine="0",model_name="m"} 0.0
`

// routerView applies what a router hears from one worker — heartbeats and
// KV events, and snapshots when asked — to a fleet, as the router does.
type routerView struct {
	mu     sync.Mutex
	fl     *fleet.Fleet
	events []schemas.KVEvent
	hbSeq  uint64 // KVSeq of the latest heartbeat
}

func (v *routerView) holds(t *testing.T, id string, hashes []uint64) []bool {
	t.Helper()
	v.mu.Lock()
	defer v.mu.Unlock()
	w := v.fl.Get(id)
	if w == nil {
		return make([]bool, len(hashes))
	}
	out := make([]bool, len(hashes))
	for i, h := range hashes {
		out[i] = v.fl.Prefix().Holds(w.Idx, h)
	}
	return out
}

func all(b []bool, want bool) bool {
	for _, x := range b {
		if x != want {
			return false
		}
	}
	return true
}

func TestWorkerRelaysVLLMKVEventsToTheRoutersIndex(t *testing.T) {
	env := bustest.StartProvisioned(t, subjects.StreamOptions{})
	engine := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/metrics" {
			w.Write([]byte(vllmMetricsPage))
			return
		}
		http.NotFound(w, r)
	}))
	defer engine.Close()
	pub := vllmkvtest.Start(t, "tcp://127.0.0.1:0", "tcp://127.0.0.1:0", 10_000)
	ep, rp := pub.Endpoints()

	const id = "vllm-1"
	sh, err := svc.New("worker", id, env.NC, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	w, err := New(sh, Config{ID: id, GPU: "h100", Model: "llama-3.1-8b", Backend: "openai", OpenAIURL: engine.URL,
		HeartbeatInterval: 50 * time.Millisecond, VLLMKV: VLLMKVConfig{Endpoint: ep, Replay: rp}})
	if err != nil {
		t.Fatal(err)
	}

	// One subscription for both, so they are applied in the order the
	// worker published them (its heartbeat's KVSeq is checked against the
	// events applied).
	view := &routerView{fl: fleet.New(fleet.Options{})}
	sub, err := env.NC.Subscribe("sy.>", func(m *nats.Msg) {
		view.mu.Lock()
		defer view.mu.Unlock()
		switch m.Subject {
		case subjects.KV(id):
			var ev schemas.KVEvent
			if err := svc.Decode(m.Header, m.Data, &ev); err != nil {
				t.Errorf("undecodable KV event: %v", err)
				return
			}
			view.events = append(view.events, ev)
			view.fl.ApplyKV(&ev, time.Now())
		case subjects.Heartbeat("h100", id):
			var hb schemas.Heartbeat
			if err := svc.Decode(m.Header, m.Data, &hb); err != nil {
				t.Errorf("undecodable heartbeat: %v", err)
				return
			}
			view.fl.ApplyHeartbeat(&hb, time.Now())
			view.hbSeq = hb.KVSeq
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()

	// The engine cached a prompt before the worker started: the startup
	// replay brings it in.
	toks := make([]uint32, 48)
	for i := range toks {
		toks[i] = uint32(128000 + i*37)
	}
	want := tokens.BlockHashes(toks) // what the admitter computes for these token ids
	pub.Publish(vllmkvtest.EncodeBatch(t, vllmkvtest.ShapeMap, 1, 0, vllmkvtest.Stored(nil, 16, toks, uint64(11), uint64(12), uint64(13))), false)

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	}()
	// Empty batches until the subscriber is connected (a PUB socket drops
	// what it sends before then).
	waitfor.True(t, "the engine's blocks in the router's index", 10*time.Second, func() bool {
		pub.Publish(vllmkvtest.EncodeBatch(t, vllmkvtest.ShapeMap, 1, 0), false)
		return all(view.holds(t, id, want), true)
	})

	// The engine evicts the tail block: the router stops counting it.
	pub.Publish(vllmkvtest.EncodeBatch(t, vllmkvtest.ShapeMap, 2, 0, vllmkvtest.Removed(uint64(13))), false)
	waitfor.True(t, "the eviction", 10*time.Second, func() bool {
		h := view.holds(t, id, want)
		return h[0] && h[1] && !h[2]
	})

	// A snapshot (what the router asks for after a gap) is the relayed
	// set, at the sequence number of the last event.
	reply, err := env.NC.Request(subjects.KVSnapshotRequest(id), nil, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	var snap schemas.KVEvent
	if err := svc.Decode(reply.Header, reply.Data, &snap); err != nil {
		t.Fatal(err)
	}
	view.mu.Lock()
	lastSeq := view.events[len(view.events)-1].Seq
	view.mu.Unlock()
	if snap.Kind != schemas.KVSnapshot || snap.Seq != lastSeq || !slices.Equal(snap.Hashes, slices.Sorted(slices.Values(want[:2]))) {
		t.Fatalf("snapshot %+v, want seq %d and %x", snap, lastSeq, want[:2])
	}
	// Heartbeats carry the same sequence, so the router neither sees a
	// restart nor a gap.
	waitfor.True(t, "a heartbeat at the KV sequence", 10*time.Second, func() bool {
		view.mu.Lock()
		defer view.mu.Unlock()
		return view.hbSeq == lastSeq
	})

	// The engine restarts (its sequence starts again from 0): the worker
	// clears its entries and follows the new engine.
	pub.Restart()
	other := make([]uint32, 16)
	for i := range other {
		other[i] = uint32(7 + i)
	}
	pub.Publish(vllmkvtest.EncodeBatch(t, vllmkvtest.ShapeMap, 3, 0, vllmkvtest.Stored(nil, 16, other, uint64(21))), false)
	waitfor.True(t, "the restart followed", 10*time.Second, func() bool {
		return all(view.holds(t, id, want), false) && all(view.holds(t, id, tokens.BlockHashes(other)), true)
	})
	view.mu.Lock()
	defer view.mu.Unlock()
	kinds := []string{}
	for i, ev := range view.events {
		if ev.Seq != uint64(i+1) {
			t.Fatalf("KV event %d has seq %d: %+v", i, ev.Seq, view.events)
		}
		kinds = append(kinds, ev.Kind)
	}
	if got := strings.Join(kinds, ","); got != "stored,evicted,cleared,stored" {
		t.Fatalf("KV events %s", got)
	}
	if !view.fl.Get(id).KVInSync {
		t.Fatal("the router's view of the worker's KV is out of sync")
	}
}

func TestWorkerVLLMKVFlagsNeedTheOpenAIBackend(t *testing.T) {
	env := bustest.StartProvisioned(t, subjects.StreamOptions{})
	for _, tc := range []struct {
		name string
		cfg  Config
		want string
	}{
		{"sim backend", Config{VLLMKV: VLLMKVConfig{Endpoint: "tcp://127.0.0.1:5557"}}, "needs --backend openai"},
		{"replay alone", Config{VLLMKV: VLLMKVConfig{Replay: "tcp://127.0.0.1:5558"}}, "need --vllm-kv-endpoint"},
		{"bind address", Config{Backend: "openai", OpenAIURL: "http://127.0.0.1:1", VLLMKV: VLLMKVConfig{Endpoint: "tcp://*:5557"}}, "bind address"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sh, err := svc.New("worker", "w", env.NC, slog.New(slog.DiscardHandler))
			if err != nil {
				t.Fatal(err)
			}
			tc.cfg.ID, tc.cfg.GPU, tc.cfg.Model = "w-"+strings.ReplaceAll(tc.name, " ", "-"), "h100", "llama-3.1-8b"
			w, err := New(sh, tc.cfg)
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			if err := w.Run(ctx); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Run: %v, want it to say %q", err, tc.want)
			}
		})
	}
}
