package control

import (
	"math"
	"testing"

	"github.com/switchyard-ai/switchyard/schemas"
)

func TestQueueShare(t *testing.T) {
	c := newCtl(t, Pool{GPU: "h100", Model: "llama-3.1-8b", Min: 1, Max: 8}, nil)
	mix := func(crit, inter, std, batch int) map[string]Attainment {
		return map[string]Attainment{
			schemas.PriorityCritical: {Total: crit}, schemas.PriorityInteractive: {Total: inter},
			schemas.PriorityStandard: {Total: std}, schemas.PriorityBatch: {Total: batch},
		}
	}
	for _, tc := range []struct {
		name string
		slo  map[string]Attainment
		want float64
	}{
		// Interactive gets 4/7 of what critical leaves: 4/7 (C − 0.2) = 0.3.
		{"the demo's mix, 20/30/30/20", mix(200, 300, 300, 200), 0.725},
		// Critical's weight covers it; interactive needs 4/7 (C − 0.1) = 0.1.
		{"high classes light, 10/10/40/40", mix(100, 100, 400, 400), 0.275},
		{"only high classes", mix(500, 500, 0, 0), 1},
		{"only lower classes", mix(0, 0, 500, 500), 0},
		// Critical alone at 8/8+2: it is served once C·8/10 ≥ 0.5.
		{"critical and standard halves", mix(500, 0, 500, 0), 0.625},
		{"too few results to trust", mix(2, 3, 3, 2), 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := c.queueShare(tc.slo); math.Abs(got-tc.want) > 1e-6 {
				t.Fatalf("queue share %.6f, want %.6f", got, tc.want)
			}
		})
	}
}

// The share the fleet must serve never falls below the high classes' own
// share of the traffic, and grows as the lower classes' weight does.
func TestQueueShareBounds(t *testing.T) {
	slo := map[string]Attainment{
		schemas.PriorityCritical: {Total: 200}, schemas.PriorityInteractive: {Total: 300},
		schemas.PriorityStandard: {Total: 300}, schemas.PriorityBatch: {Total: 200},
	}
	prev := 0.0
	for _, lowWeight := range []int{1, 2, 4, 8} {
		c := newCtl(t, Pool{GPU: "h100", Model: "llama-3.1-8b", Min: 1, Max: 8}, func(cfg *Config) {
			cfg.ClassWeights = map[string]int{schemas.PriorityCritical: 8, schemas.PriorityInteractive: 4,
				schemas.PriorityStandard: lowWeight, schemas.PriorityBatch: lowWeight}
		})
		got := c.queueShare(slo)
		if got < 0.5-1e-9 || got < prev-1e-9 || got > 1 {
			t.Fatalf("lower classes' weight %d: queue share %.4f (previous %.4f), want within [0.5, 1] and not falling", lowWeight, got, prev)
		}
		prev = got
	}
}
