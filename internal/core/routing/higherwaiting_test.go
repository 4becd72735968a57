package routing

import (
	"testing"
	"time"

	"github.com/switchyard-ai/switchyard/internal/core/fleet"
	"github.com/switchyard-ai/switchyard/internal/core/placement"
	"github.com/switchyard-ai/switchyard/schemas"
)

// holdingPolicy places nothing and records, per request, the
// HigherWaiting the core asked it with.
type holdingPolicy struct{ seen map[string]int }

func (p *holdingPolicy) Name() string { return "holding" }

func (p *holdingPolicy) Place(_ *fleet.Fleet, r *placement.Request, _ time.Time) *placement.Decision {
	p.seen[r.ID] = r.HigherWaiting
	return &placement.Decision{}
}

// TestPlacementSeesTheHigherClassesWaiting: each request is offered to the
// policy with the count of higher-class requests waiting in the router,
// whether still queued or already offered and left blocked in the same
// pass, so a short lower-class prompt does not yield past its queue
// ceiling ahead of them (placement.Request.HigherWaiting).
func TestPlacementSeesTheHigherClassesWaiting(t *testing.T) {
	pol := &holdingPolicy{seen: map[string]int{}}
	s := newSim(t, Config{Policy: pol})
	s.advance(time.Second, "w1")
	want := map[string]int{}
	for i, class := range []string{schemas.PriorityBatch, schemas.PriorityCritical, schemas.PriorityStandard, schemas.PriorityInteractive, schemas.PriorityCritical} {
		a := admitted(class+string(rune('0'+i)), "t", time.Minute, 100, 10, s.now)
		a.Priority, a.Request.Priority = class, class
		s.admit(a)
		want[a.Request.ID] = 0
	}
	// Above batch: 2 critical, 1 interactive, 1 standard; above standard: 3.
	want["batch0"], want["standard2"], want["interactive3"] = 4, 3, 2
	s.advance(time.Second, "w1")
	for id, n := range want {
		if got, ok := pol.seen[id]; !ok || got != n {
			t.Errorf("%s offered with HigherWaiting %d (offered %v), want %d", id, got, ok, n)
		}
	}
}
