package worker

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/switchyard-ai/switchyard/internal/testkit/bustest"
	"github.com/switchyard-ai/switchyard/services/svc"
)

// A worker in front of vLLM or SGLang reads the engine's /metrics through
// enginemetrics' Scrape and Tracker: its heartbeat's tokens per second are
// the engine's prompt and generation counters over the last scrape
// interval on the worker's clock (a restarted engine's counters start from
// zero), and SGLang's KV capacity and use come from its token counts.
func TestHeartbeatTokensPerSecFromEngineCounters(t *testing.T) {
	env := bustest.Start(t)
	vllm := func(prompt, gen int) string {
		return vllmPage(2, 0, 0.25) + fmt.Sprintf(`# TYPE vllm:prompt_tokens_total counter
vllm:prompt_tokens_total{engine="0",model_name="m"} %d.0
# TYPE vllm:generation_tokens_total counter
vllm:generation_tokens_total{engine="0",model_name="m"} %d.0
`, prompt, gen)
	}
	sglang := `# TYPE sglang:num_running_reqs gauge
sglang:num_running_reqs{model_name="m"} 3.0
# TYPE sglang:num_queue_reqs gauge
sglang:num_queue_reqs{model_name="m"} 1.0
# TYPE sglang:max_total_num_tokens gauge
sglang:max_total_num_tokens{model_name="m"} 200000.0
# TYPE sglang:num_used_tokens gauge
sglang:num_used_tokens{model_name="m"} 50000.0
`
	type scrape struct {
		after          time.Duration // since the previous scrape
		page           string
		wantTokensPS   float64
		wantKVTotal    int
		wantKVFree     int
		wantRunWaiting [2]int
	}
	for _, tc := range []struct {
		name    string
		scrapes []scrape
	}{
		{"vLLM counters", []scrape{
			{0, vllm(1000, 500), 0, 27153, 20364, [2]int{2, 0}}, // one scrape: no interval yet
			// 2 s later: 4,000 prompt and 1,000 generated tokens.
			{2 * time.Second, vllm(5000, 1500), 2500, 27153, 20364, [2]int{2, 0}},
			// The engine restarted: 300 and 100 since, over 1 s.
			{time.Second, vllm(300, 100), 400, 27153, 20364, [2]int{2, 0}},
		}},
		{"SGLang token counts", []scrape{
			{0, sglang, 0, 12500, 9375, [2]int{3, 1}},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var mu sync.Mutex
			page := ""
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.URL.Path != "/metrics" {
					http.NotFound(w, r)
					return
				}
				mu.Lock()
				defer mu.Unlock()
				fmt.Fprint(w, page)
			}))
			t.Cleanup(srv.Close)
			sh, err := svc.New("worker", "rates", env.NC, slog.New(slog.DiscardHandler))
			if err != nil {
				t.Fatal(err)
			}
			now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
			sh.Now = func() time.Time { return now }
			w, err := New(sh, Config{ID: "rates", GPU: "h100", Model: "llama-3.1-8b", Backend: "openai", OpenAIURL: srv.URL})
			if err != nil {
				t.Fatal(err)
			}
			for i, s := range tc.scrapes {
				mu.Lock()
				page = s.page
				mu.Unlock()
				now = now.Add(s.after)
				w.scrape(context.Background())
				hb := w.Heartbeat()
				if hb.TokensPerSec != s.wantTokensPS || hb.KVBlocksTotal != s.wantKVTotal || hb.KVBlocksFree != s.wantKVFree ||
					hb.Running != s.wantRunWaiting[0] || hb.Waiting != s.wantRunWaiting[1] {
					t.Fatalf("scrape %d: tokens/s %g, KV %d total %d free, running %d waiting %d; want %g, %d, %d, %v",
						i, hb.TokensPerSec, hb.KVBlocksTotal, hb.KVBlocksFree, hb.Running, hb.Waiting,
						s.wantTokensPS, s.wantKVTotal, s.wantKVFree, s.wantRunWaiting)
				}
			}
		})
	}
}
