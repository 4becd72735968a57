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
	tr := mooncakeSlice(t, 400).Scale(2)
	cfg := Config{GPUs: []GPUSpec{{GPU: "h100", Count: 2}}, Model: "llama-3.1-8b"}
	held := run(t, cfg, tr, "switchyard")
	yielded := run(t, cfg, tr, routing.PolicyShortYield)
	at := func(r *Result, class string) float64 { return r.ByPriority[class].SLOAttainment }
	for _, class := range []string{schemas.PriorityStandard, schemas.PriorityBatch} {
		if at(yielded, class) <= at(held, class) {
			t.Errorf("%s: %.3f with short prompts yielded, %.3f held", class, at(yielded, class), at(held, class))
		}
	}
	if yielded.SLOAttainment <= held.SLOAttainment || at(yielded, schemas.PriorityCritical) < at(held, schemas.PriorityCritical) {
		t.Errorf("overall %.3f against %.3f, critical %.3f against %.3f", yielded.SLOAttainment, held.SLOAttainment,
			at(yielded, schemas.PriorityCritical), at(held, schemas.PriorityCritical))
	}
	t.Logf("held: overall %.3f, critical %.3f, standard %.3f, batch %.3f; yielded: %.3f, %.3f, %.3f, %.3f",
		held.SLOAttainment, at(held, schemas.PriorityCritical), at(held, schemas.PriorityStandard), at(held, schemas.PriorityBatch),
		yielded.SLOAttainment, at(yielded, schemas.PriorityCritical), at(yielded, schemas.PriorityStandard), at(yielded, schemas.PriorityBatch))
}

// TestSharedPrefillQueue: on the same slice, switchyard-shared-queue,
// which prices the standard and batch queue as the engine's shared prefill
// steps serve it rather than first come, first served, places the lower
// classes' prompts the default holds in the router until they miss, so
// standard, batch and the whole meet more, and critical loses nothing
// (the engine prefills the higher classes first).
func TestSharedPrefillQueue(t *testing.T) {
	tr := mooncakeSlice(t, 400).Scale(2)
	cfg := Config{GPUs: []GPUSpec{{GPU: "h100", Count: 2}}, Model: "llama-3.1-8b"}
	fifo := run(t, cfg, tr, "switchyard")
	shared := run(t, cfg, tr, routing.PolicySharedQueue)
	at := func(r *Result, class string) float64 { return r.ByPriority[class].SLOAttainment }
	for _, class := range []string{schemas.PriorityStandard, schemas.PriorityBatch} {
		if at(shared, class) <= at(fifo, class) {
			t.Errorf("%s: %.3f with the queue shared, %.3f first come, first served", class, at(shared, class), at(fifo, class))
		}
	}
	if shared.SLOAttainment <= fifo.SLOAttainment || at(shared, schemas.PriorityCritical) < at(fifo, schemas.PriorityCritical) {
		t.Errorf("overall %.3f against %.3f, critical %.3f against %.3f", shared.SLOAttainment, fifo.SLOAttainment,
			at(shared, schemas.PriorityCritical), at(fifo, schemas.PriorityCritical))
	}
	t.Logf("first come, first served: overall %.3f, critical %.3f, standard %.3f, batch %.3f; shared: %.3f, %.3f, %.3f, %.3f",
		fifo.SLOAttainment, at(fifo, schemas.PriorityCritical), at(fifo, schemas.PriorityStandard), at(fifo, schemas.PriorityBatch),
		shared.SLOAttainment, at(shared, schemas.PriorityCritical), at(shared, schemas.PriorityStandard), at(shared, schemas.PriorityBatch))
}
