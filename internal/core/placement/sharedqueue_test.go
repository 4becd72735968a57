package placement

import (
	"math"
	"testing"

	"github.com/switchyard-ai/switchyard/internal/core/fleet"
	"github.com/switchyard-ai/switchyard/schemas"
)

// TestQueueSharedOnAStepSharingEngine: with SharedPrefill naming standard
// and batch, on a worker whose engine shares its prefill steps (heartbeat
// step_cap), a standard or batch request waits for each of the prompts
// there to compute as many tokens as its own, not for the whole queue: 2
// prefilling × 500 tokens, not 6,000. A class not named, a worker that
// runs its prefills one after another, and the default (no class) all
// keep the whole queue.
func TestQueueSharedOnAStepSharingEngine(t *testing.T) {
	const queued, prompt = 6000, 500
	lower := func(o *Options) {
		o.SharedPrefill = map[string]bool{schemas.PriorityStandard: true, schemas.PriorityBatch: true}
	}
	cases := []struct {
		name    string
		class   string
		stepCap bool
		opts    func(*Options)
		want    int // queued tokens priced
	}{
		{"standard on a sharing engine", schemas.PriorityStandard, true, lower, 2 * prompt},
		{"batch on a sharing engine", schemas.PriorityBatch, true, lower, 2 * prompt},
		{"interactive not named keeps the whole queue", schemas.PriorityInteractive, true, lower, queued},
		{"an engine that does not share", schemas.PriorityStandard, false, lower, queued},
		{"the default shares for no class", schemas.PriorityStandard, true, nil, queued},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			f := fleet.New(fleet.Options{})
			f.ApplyHeartbeat(&schemas.Heartbeat{
				WorkerID: "A", GPU: "h100", TP: 1, HBMTotalBytes: 80 << 30, HBMFreeBytes: 40 << 30,
				KVBlocksTotal: 1000, KVBlocksFree: 800, BlockSize: 16,
				Models:  []schemas.ModelState{{Name: "m", Dtype: "bf16", State: schemas.WeightHot}},
				Running: 2, Prefilling: 2, QueuedTokens: queued, MaxBatch: 64, StepCap: c.stepCap,
			}, now)
			var o Options
			if c.opts != nil {
				c.opts(&o)
			}
			r := req(c.class)
			r.PromptTokens = prompt
			d := New(BenchCost(), o).Place(f, r, now)
			if d.Worker == nil {
				t.Fatalf("not placed: %+v", d.Candidates)
			}
			want := float64(c.want) / 20000 // the linear model's H100 prefill rate
			if got := d.Terms.QueueSeconds; math.Abs(got-want) > 1e-3*want {
				t.Fatalf("queue_s %.4f, want %.4f (%d tokens)", got, want, c.want)
			}
		})
	}
}
