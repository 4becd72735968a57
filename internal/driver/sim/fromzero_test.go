package sim

import (
	"fmt"
	"testing"
	"time"

	"github.com/switchyard-ai/switchyard/loadgen/traces"
	"github.com/switchyard-ai/switchyard/schemas"
)

// TestScaleFromZeroInSimulation runs the live path's scale from zero in
// virtual time: a pool at zero replicas (Min 0, no worker at all), a burst
// of requests whose deadlines allow the cold start, and a second burst
// whose deadlines do not. The router core holds the first burst while the
// controller orders the pool's replicas — once — and the simulated scaler
// cold-starts them; every held request is served. The second burst, sent
// once the pool is warm, is served too; a request whose deadline is
// shorter than the cold start left, sent while the pool warms, is
// answered unplaceable at once.
func TestScaleFromZeroInSimulation(t *testing.T) {
	tr := &traces.Trace{Name: "from-zero"}
	add := func(id string, at, deadline time.Duration) {
		tr.Requests = append(tr.Requests, traces.Request{ID: id, Arrival: at, PromptTokens: 256, OutputTokens: 64,
			Tenant: "t", Priority: schemas.PriorityInteractive, Deadline: deadline})
	}
	for i := 0; i < 20; i++ {
		add(fmt.Sprintf("burst-%02d", i), time.Second+time.Duration(i)*20*time.Millisecond, 90*time.Second)
	}
	// After the controller's first decision (at 3 s): the pool is known, warming.
	add("too-tight", 3500*time.Millisecond, 5*time.Second)
	for i := 0; i < 5; i++ {
		add(fmt.Sprintf("warm-%d", i), 80*time.Second+time.Duration(i)*time.Second, 20*time.Second)
	}
	cfg := Config{GPUs: []GPUSpec{{GPU: "h100", Count: 0, TP: 1}}, Model: "llama-3.1-8b", Seed: 1,
		Autoscale: &Autoscale{Min: 0, Max: 4}}
	var failed []string
	cfg.OnResolve = func(o Outcome) {
		switch {
		case o.Request.ID == "too-tight":
			if o.Status != "failed" || o.Code != schemas.CodeUnplaceable || o.Done.Sub(o.Submitted) > time.Second {
				t.Errorf("too-tight: %s %s after %v, want unplaceable at once", o.Status, o.Code, o.Done.Sub(o.Submitted))
			}
		case o.Status != "ok":
			failed = append(failed, fmt.Sprintf("%s: %s %s", o.Request.ID, o.Status, o.Code))
		}
	}
	res := run(t, cfg, tr, "switchyard")
	if len(failed) > 0 {
		t.Fatalf("requests not served after the cold start: %v", failed)
	}
	as := res.Autoscale
	if as == nil || as.Started < 1 {
		t.Fatalf("no replica started from zero: %+v", as)
	}
	if as.ScaleUps != 1 {
		t.Fatalf("%d scale-ups for one held burst, want 1: %+v", as.ScaleUps, as.Timeline)
	}
	t.Logf("started %d, scale-ups %d, finished %d of %d, timeline %+v", as.Started, as.ScaleUps, res.Finished, res.Requests, as.Timeline)
}
