package controller

import (
	"log/slog"
	"strings"
	"testing"

	"github.com/switchyard-ai/switchyard/internal/core/catalog"
	"github.com/switchyard-ai/switchyard/internal/core/control"
	"github.com/switchyard-ai/switchyard/internal/testkit/bustest"
	"github.com/switchyard-ai/switchyard/services/svc"
	"github.com/switchyard-ai/switchyard/subjects"
)

// TestPlannerByName: the live controller runs the planner it is named —
// Switchyard's by default, a baseline (the ones sim --autoscale compares)
// when asked — and refuses a name it does not know.
func TestPlannerByName(t *testing.T) {
	env := bustest.StartProvisioned(t, subjects.StreamOptions{})
	pools := []control.Pool{{GPU: "h100", Model: "llama-3.1-8b", Dtype: "bf16", TP: 1, Min: 1, Max: 4}}
	for _, tc := range []struct{ name, want, err string }{
		{"", control.PlannerSwitchyard, ""},
		{"keda-hpa", "keda-hpa", ""},
		{"dynamo-throughput", "dynamo-throughput", ""},
		{"llm-d-wva", "llm-d-wva", ""},
		{"nope", "", "nope"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sh, err := svc.New("controller", "c-"+tc.want, env.NC, slog.Default())
			if err != nil {
				t.Fatal(err)
			}
			c, err := New(sh, Config{Planner: tc.name, Control: control.Config{Pools: pools, Catalog: catalog.Default()}})
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("err %v, want one naming %q", err, tc.err)
				}
				return
			}
			if err != nil || c.Planner() != tc.want {
				t.Fatalf("planner %v, err %v; want %s", c, err, tc.want)
			}
		})
	}
}
