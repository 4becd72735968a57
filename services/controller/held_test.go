package controller

import (
	"testing"
	"time"

	"github.com/switchyard-ai/switchyard/internal/core/routing"
	"github.com/switchyard-ai/switchyard/schemas"
)

// TestHeldBook sums the routers' held demand per pool: held requests count
// while a router repeats them, its cumulative refused count until it is
// forgotten, and a router's zero figure clears it.
func TestHeldBook(t *testing.T) {
	t0 := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	const pool = "h100:llama-3_1-8b"
	demand := func(requests, refused int) routing.HeldDemand {
		return routing.HeldDemand{Pool: pool, Requests: requests, Tokens: 100 * requests, Refused: refused,
			ByClass: map[string]int{schemas.PriorityCritical: requests}, Since: t0}
	}
	tests := []struct {
		name              string
		notes             map[string]routing.HeldDemand // by router, all at t0
		at                time.Duration
		requests, refused int
		critical          int
	}{
		{name: "two routers add up", notes: map[string]routing.HeldDemand{"r1": demand(3, 1), "r2": demand(4, 2)}, requests: 7, refused: 3, critical: 7},
		{name: "unrepeated held requests lapse, refusals stay", notes: map[string]routing.HeldDemand{"r1": demand(3, 1)}, at: heldStaleAfter + time.Second, refused: 1},
		{name: "everything forgotten in the end", notes: map[string]routing.HeldDemand{"r1": demand(3, 1)}, at: heldForgetAfter + time.Second},
		{name: "a zero figure clears", notes: map[string]routing.HeldDemand{"r1": demand(0, 0)}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var b heldBook
			for r, d := range tc.notes {
				b.note(r, demand(5, 0), t0) // an earlier figure, replaced
				b.note(r, d, t0)
			}
			pools, byClass := b.demand(t0.Add(tc.at))
			h := pools[pool]
			if h.Requests != tc.requests || h.Refused != tc.refused || byClass[schemas.PriorityCritical] != tc.critical {
				t.Fatalf("held %+v, by class %v; want %d requests, %d refused, %d critical", h, byClass, tc.requests, tc.refused, tc.critical)
			}
		})
	}
}
