package worker

import (
	"bytes"
	"log/slog"
	"strings"
	"sync"
	"testing"

	"github.com/switchyard-ai/switchyard/internal/core/control"
	"github.com/switchyard-ai/switchyard/internal/testkit/bustest"
	"github.com/switchyard-ai/switchyard/schemas"
	"github.com/switchyard-ai/switchyard/services/svc"
)

type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// The controller's speculative-decoding and budget settings reach a real
// engine's worker, which cannot change them on the engine: it says so
// (once at info), instead of applying them to its unused simulated engine
// and logging "budgets set" (issue 29). A simulated worker applies them.
func TestControllerSettingsOnARealEngine(t *testing.T) {
	env := bustest.Start(t)
	for _, tc := range []struct {
		name    string
		backend string
		want    []string
		never   []string
	}{
		{"real engine", "openai", []string{"batch and token budgets not applied", "speculative decoding not applied"}, []string{"budgets set", "speculative decoding switched"}},
		{"simulated", "sim", []string{"budgets set", "speculative decoding switched"}, []string{"not applied"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var logs lockedBuffer
			sh, err := svc.New("worker", "ctl-"+tc.backend, env.NC, slog.New(slog.NewTextHandler(&logs, nil)))
			if err != nil {
				t.Fatal(err)
			}
			cfg := Config{ID: "ctl-" + tc.backend, GPU: "h100", Model: "llama-3.1-8b", Backend: tc.backend}
			if tc.backend == "openai" {
				cfg.OpenAIURL = "http://127.0.0.1:1"
			}
			w, err := New(sh, cfg)
			if err != nil {
				t.Fatal(err)
			}
			for range 2 {
				m, err := svc.Encode("x", schemas.Msgpack, control.BudgetMsg{Worker: cfg.ID, MaxBatch: 8, TokenBudget: 512, Reason: "test"}, "")
				if err != nil {
					t.Fatal(err)
				}
				w.onBudget(m)
				m, err = svc.Encode("x", schemas.Msgpack, control.SpecMsg{Worker: cfg.ID, On: true, Reason: "test"}, "")
				if err != nil {
					t.Fatal(err)
				}
				w.onSpec(m)
			}
			out := logs.String()
			for _, s := range tc.want {
				if n := strings.Count(out, s); n == 0 || (tc.backend == "openai" && n != 1) {
					t.Errorf("%q logged %d times at info, want once (real) or each time (simulated):\n%s", s, n, out)
				}
			}
			for _, s := range tc.never {
				if strings.Contains(out, s) {
					t.Errorf("logged %q:\n%s", s, out)
				}
			}
		})
	}
}
