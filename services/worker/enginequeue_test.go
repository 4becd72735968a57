package worker

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/switchyard-ai/switchyard/internal/core/catalog"
	"github.com/switchyard-ai/switchyard/internal/core/perf"
	"github.com/switchyard-ai/switchyard/internal/core/routing"
	"github.com/switchyard-ai/switchyard/internal/testkit/bustest"
	"github.com/switchyard-ai/switchyard/schemas"
	"github.com/switchyard-ai/switchyard/services/svc"
)

// vllmPage is a vLLM V1 /metrics page (the names of
// vllm/v1/metrics/loggers.py) with the given queue and KV use, and a KV
// cache of 27,153 blocks of 16 tokens.
func vllmPage(running, waiting int, kvUsage float64) string {
	return fmt.Sprintf(`# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="meta-llama/Llama-3.1-8B-Instruct"} %d.0
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{engine="0",model_name="meta-llama/Llama-3.1-8B-Instruct"} %d.0
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{engine="0",model_name="meta-llama/Llama-3.1-8B-Instruct"} %g
# TYPE vllm:cache_config_info gauge
vllm:cache_config_info{block_size="16",cache_dtype="auto",enable_prefix_caching="True",engine="0",num_gpu_blocks="27153"} 1.0
`, running, waiting, kvUsage)
}

// vllmWorker is a worker in front of a server that answers /metrics with
// page, scraped once.
func vllmWorker(t *testing.T, env bustest.Env, id, page string) *Worker {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/metrics" {
			fmt.Fprint(w, page)
			return
		}
		http.NotFound(w, r)
	}))
	t.Cleanup(srv.Close)
	sh, err := svc.New("worker", id, env.NC, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	w, err := New(sh, Config{ID: id, GPU: "h100", Model: "llama-3.1-8b", Backend: "openai", OpenAIURL: srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	w.scrape(context.Background())
	return w
}

// The heartbeat of a worker in front of vLLM carries the engine's queue and
// KV cache: its waiting requests as queued tokens (this worker's own at
// their prompt lengths, the rest at the mean it has seen), its KV blocks
// from cache_config_info and their use from kv_cache_usage_perc (issue 29),
// and as prefilling its own requests with no byte back beyond the
// engine's waiting count.
func TestHeartbeatCarriesTheEnginesQueueAndKV(t *testing.T) {
	env := bustest.Start(t)
	for _, tc := range []struct {
		name                        string
		running, waiting            int
		own                         map[string]int // prompt tokens with no byte back yet
		sent                        []string       // those of them at the engine
		mean                        float64
		wantQueued, wantKVFree      int
		wantRunning, wantHBWaitings int
		// wantPrefilling: ours at the engine, no byte back, more than its
		// waiting count holds.
		wantPrefilling int
	}{
		{"idle", 0, 0, nil, nil, 0, 0, 27153, 0, 0, 0},
		{"others' requests waiting", 4, 10, nil, nil, 400, 10 * 400, 27153 / 2, 4, 10, 0},
		{"ours among them", 4, 10, map[string]int{"a": 500, "b": 300}, []string{"a", "b"}, 400, 800 + 8*400, 27153 / 2, 4, 10, 0},
		// c waits for a slot of this worker's, not in the engine's count.
		{"one of ours not sent yet", 4, 10, map[string]int{"a": 500, "b": 300, "c": 100}, []string{"a", "b"}, 400, 900 + 8*400, 27153 / 2, 4, 10, 0},
		{"ours prefilling, nothing waiting", 4, 0, map[string]int{"a": 500, "b": 300}, []string{"a", "b"}, 400, 800, 27153 / 2, 4, 0, 2},
		{"one of ours waiting, one prefilling", 4, 1, map[string]int{"a": 500, "b": 300}, []string{"a", "b"}, 400, 800, 27153 / 2, 4, 1, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			usage := 0.0
			if tc.running > 0 {
				usage = 0.5
			}
			w := vllmWorker(t, env, "v-"+fmt.Sprint(len(tc.name)), vllmPage(tc.running, tc.waiting, usage))
			w.mu.Lock()
			for id, n := range tc.own {
				w.remote.unprefilled[id] = n
			}
			for _, id := range tc.sent {
				w.remote.busy.start(id, time.Now())
			}
			w.remote.promptMean = tc.mean
			w.mu.Unlock()
			hb := w.Heartbeat()
			if hb.KVBlocksTotal != 27153 || hb.BlockSize != 16 {
				t.Fatalf("KV capacity %d blocks of %d, want the engine's 27153 of 16 (the catalog says %d)",
					hb.KVBlocksTotal, hb.BlockSize, w.replica.KVBlocks(16, perf.DefaultMemUtil))
			}
			if hb.Running != tc.wantRunning || hb.Waiting != tc.wantHBWaitings || hb.QueuedTokens != tc.wantQueued ||
				hb.KVBlocksFree != tc.wantKVFree || hb.QueuedTokensByClass != nil || hb.Prefilling != tc.wantPrefilling {
				t.Fatalf("running %d waiting %d prefilling %d queued %d (by class %v) kv free %d; want %d %d %d %d (no split) %d",
					hb.Running, hb.Waiting, hb.Prefilling, hb.QueuedTokens, hb.QueuedTokensByClass, hb.KVBlocksFree,
					tc.wantRunning, tc.wantHBWaitings, tc.wantPrefilling, tc.wantQueued, tc.wantKVFree)
			}
		})
	}
}

// Placement follows the engine's queue: two workers in front of vLLM
// engines with the same hardware, nothing running on either and 300 requests
// waiting at one, and the
// router's core places on the other (with the queue unreported, both read
// idle and the tie went to the first).
func TestPlacementFollowsTheEnginesQueue(t *testing.T) {
	env := bustest.Start(t)
	busy := vllmWorker(t, env, "a-busy", vllmPage(0, 300, 0))
	idle := vllmWorker(t, env, "b-idle", vllmPage(0, 0, 0))
	busy.mu.Lock()
	busy.remote.promptMean = 2000
	busy.mu.Unlock()
	core := routing.New(routing.Config{Cost: perf.NewPredictor(catalog.Default())})
	now := time.Now()
	for _, w := range []*Worker{busy, idle} {
		hb := w.Heartbeat()
		core.Apply(routing.Input{Kind: routing.InHeartbeat, Heartbeat: &hb, At: now}, nil)
	}
	adm := schemas.Admitted{Tenant: "acme", Model: "llama-3.1-8b", Priority: schemas.PriorityStandard, PromptTokens: 1000,
		SubmittedAt: now, Deadline: now.Add(30 * time.Second),
		Request: schemas.Request{ID: "r1", Model: "llama-3.1-8b", MaxTokens: 100, Priority: schemas.PriorityStandard}}
	var placed string
	for _, a := range core.Apply(routing.Input{Kind: routing.InAdmitted, Admitted: &adm, At: now}, nil) {
		if a.Kind == routing.ActDispatch {
			placed = a.Worker
			t.Logf("placed on %s: queue_s %.2f", a.Worker, a.Terms.QueueSeconds)
			for _, c := range a.Candidates {
				t.Logf("candidate %s: queue_s %.2f completion_s %.2f", c.Worker, c.Terms.QueueSeconds, c.Terms.CompletionSeconds)
			}
		}
	}
	if placed != "b-idle" {
		t.Fatalf("placed on %q, want b-idle (a-busy has 300 requests waiting at its engine)", placed)
	}
}
