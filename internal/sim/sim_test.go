package sim

import (
	"os"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	"github.com/switchyard-ai/switchyard/internal/perf"
	"github.com/switchyard-ai/switchyard/loadgen/traces"
)

func mooncakeSlice(t testing.TB, n int) *traces.Trace {
	t.Helper()
	p := filepath.Join("../../../shared/traces", "mooncake_fast25_conversation_t0000-2400s.jsonl")
	if _, err := os.Stat(p); err != nil {
		t.Skipf("trace not present: %v", err)
	}
	tr, err := traces.ReadMooncakeFile(p, traces.ReadOptions{Limit: n, Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	return tr
}

func run(t testing.TB, cfg Config, tr *traces.Trace, name string) *Result {
	t.Helper()
	pol, err := NewPolicy(name, perf.NewPredictor(nil))
	if err != nil {
		t.Fatal(err)
	}
	res, err := Run(cfg, tr, pol)
	if err != nil {
		t.Fatal(err)
	}
	return res
}

func TestSmoke(t *testing.T) {
	tr := mooncakeSlice(t, 400)
	cfg := Config{GPUs: []GPUSpec{{GPU: "h100", Count: 4}}, Model: "llama-3.1-8b"}
	for _, name := range PolicyNames() {
		res := run(t, cfg, tr, name)
		t.Logf("%-24s ok %4d/%4d slo %.3f ttft p50 %.0f p99 %.0f ms hit %.3f steps %d wall %.2fs", name, res.Succeeded, res.Requests, res.SLOAttainment, res.TTFTP50ms, res.TTFTP99ms, res.PrefixHitRate, res.Steps, res.WallSeconds)
	}
	_ = reflect.DeepEqual
	_ = time.Second
}
