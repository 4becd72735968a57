package replay

import (
	"testing"
	"time"

	"github.com/switchyard-ai/switchyard/schemas"
)

func TestCompareFindsDivergences(t *testing.T) {
	t0 := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	events := []schemas.Event{
		{Service: "router", Kind: "placed", RequestID: "a", WorkerID: "w1", At: t0},
		{Service: "router", Kind: "placed", RequestID: "b", WorkerID: "w1", At: t0.Add(time.Second)},
		{Service: "router", Kind: "deadline_exceeded", RequestID: "c", At: t0.Add(2 * time.Second)},
		{Service: "router", Kind: "placed", RequestID: "d", WorkerID: "w2", At: t0.Add(3 * time.Second)},
		{Service: "router", Kind: "delayed", RequestID: "a", At: t0},
		{Service: "admitter", Kind: "shed", RequestID: "e", At: t0},
		{Service: "router", Kind: "breaker_open", WorkerID: "w3", Reason: "5 consecutive failures", At: t0},
	}
	replayed := []Decision{
		{ID: "a", Kind: "placed", Worker: "w1", At: t0},
		{ID: "b", Kind: "placed", Worker: "w2", At: t0.Add(time.Second)},                  // different worker
		{ID: "c", Kind: "failed", Code: "deadline_exceeded", At: t0.Add(2 * time.Second)}, // same
		// d never decided in replay
		{ID: "x", Kind: "placed", Worker: "w1", At: t0.Add(4 * time.Second)}, // never recorded
	}
	results := []schemas.Result{
		{ID: "a", Tenant: "acme", Status: schemas.StatusOK, SLOMet: true, FinishedAt: t0},
		{ID: "b", Tenant: "acme", Status: schemas.StatusOK, SLOMet: false, FinishedAt: t0},
	}
	r := Compare(Window{}, "switchyard", "switchyard", replayed, events, results, time.Second)
	if r.Decisions != 4 || r.Divergent != 3 {
		t.Fatalf("decisions %d divergent %d, want 4 and 3: %+v", r.Decisions, r.Divergent, r.Divergences)
	}
	if r.Sheds != 1 || r.BreakerTrips != 1 || r.Requests != 2 || r.Tenants["acme"].SLOAttainment != 0.5 {
		t.Fatalf("report %+v", r)
	}
	// Outside the window nothing counts.
	w := Window{Since: t0.Add(10 * time.Second)}
	if r := Compare(w, "switchyard", "switchyard", replayed, events, results, time.Second); r.Decisions != 0 || r.Divergent != 0 {
		t.Fatalf("windowed report %+v", r)
	}
}
