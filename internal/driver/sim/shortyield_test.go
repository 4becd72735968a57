package sim

import (
	"testing"

	"github.com/switchyard-ai/switchyard/internal/core/routing"
	"github.com/switchyard-ai/switchyard/schemas"
)

// TestShortPromptsPastTheQueueCeiling: on the Mooncake conversation slice
// at twice its rate on two H100s, where every worker's prefill queue is
// over the lower classes' ceiling most of the time, the
// switchyard-short-yield policy places the short prompts the default
// holds in the router until they miss (interactive, standard and batch,
// each while no higher class waits there), so standard and batch and the
// whole meet more, and critical loses nothing.
func TestShortPromptsPastTheQueueCeiling(t *testing.T) {
	lowerClassesMeetMore(t, routing.PolicyShortYield)
}

// TestSharedPrefillQueue: on the same slice, switchyard-shared-queue,
// which prices the standard and batch queue as the engine's shared prefill
// steps serve it rather than first come, first served, places the lower
// classes' prompts the default holds in the router until they miss, so
// standard, batch and the whole meet more, and critical loses nothing
// (the engine prefills the higher classes first).
func TestSharedPrefillQueue(t *testing.T) {
	lowerClassesMeetMore(t, routing.PolicySharedQueue)
}

// lowerClassesMeetMore runs the Mooncake slice at twice its rate on two
// H100s under the default and under policy, and wants policy's standard,
// batch and overall attainment above the default's, critical no lower.
func lowerClassesMeetMore(t *testing.T, policy string) {
	t.Helper()
	tr := mooncakeSlice(t, 400).Scale(2)
	cfg := Config{GPUs: []GPUSpec{{GPU: "h100", Count: 2}}, Model: "llama-3.1-8b"}
	base := run(t, cfg, tr, "switchyard")
	got := run(t, cfg, tr, policy)
	at := func(r *Result, class string) float64 { return r.ByPriority[class].SLOAttainment }
	for _, class := range []string{schemas.PriorityStandard, schemas.PriorityBatch} {
		if at(got, class) <= at(base, class) {
			t.Errorf("%s: %.3f with %s, %.3f with the default", class, at(got, class), policy, at(base, class))
		}
	}
	if got.SLOAttainment <= base.SLOAttainment || at(got, schemas.PriorityCritical) < at(base, schemas.PriorityCritical) {
		t.Errorf("overall %.3f against %.3f, critical %.3f against %.3f", got.SLOAttainment, base.SLOAttainment,
			at(got, schemas.PriorityCritical), at(base, schemas.PriorityCritical))
	}
	t.Logf("default: overall %.3f, critical %.3f, standard %.3f, batch %.3f; %s: %.3f, %.3f, %.3f, %.3f",
		base.SLOAttainment, at(base, schemas.PriorityCritical), at(base, schemas.PriorityStandard), at(base, schemas.PriorityBatch), policy,
		got.SLOAttainment, at(got, schemas.PriorityCritical), at(got, schemas.PriorityStandard), at(got, schemas.PriorityBatch))
}
