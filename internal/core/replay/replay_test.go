package replay

import (
	"testing"
	"time"

	"github.com/switchyard-ai/switchyard/internal/core/routing"
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

// A journal that refers to admitted requests by stream sequence replays
// exactly like one that carried copies; a reference the stream can no
// longer answer is left out and counted, never replayed as something else.
func TestResolveJournalReferences(t *testing.T) {
	t0 := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	a := &schemas.Admitted{Request: schemas.Request{ID: "a"}, Tenant: "acme"}
	b := &schemas.Admitted{Request: schemas.Request{ID: "b"}, Tenant: "acme"}
	journal := []routing.JournalEntry{
		{Input: routing.Input{Kind: routing.InTick, At: t0}},
		{Input: routing.Input{Kind: routing.InAdmitted, At: t0}, AdmittedSeq: 10},
		{Input: routing.Input{Kind: routing.InAdmitted, At: t0, Admitted: b}},
		{Input: routing.Input{Kind: routing.InAdmitted, At: t0}, AdmittedSeq: 11},
		{Input: routing.Input{Kind: routing.InReleased, At: t0, ID: "a"}},
	}
	if got := Refs(journal); len(got) != 2 || got[0] != 10 || got[1] != 11 {
		t.Fatalf("refs %v, want [10 11]", got)
	}
	tests := []struct {
		name       string
		admitted   map[uint64]*schemas.Admitted
		wantIDs    []string // admitted ids in input order; "" for other inputs
		unresolved int
	}{
		{"all held", map[uint64]*schemas.Admitted{10: a, 11: b}, []string{"", "a", "b", "b", ""}, 0},
		{"one aged out", map[uint64]*schemas.Admitted{10: a}, []string{"", "a", "b", ""}, 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			in, unresolved := Resolve(journal, tc.admitted)
			if unresolved != tc.unresolved || len(in) != len(tc.wantIDs) {
				t.Fatalf("%d inputs, %d unresolved; want %d and %d", len(in), unresolved, len(tc.wantIDs), tc.unresolved)
			}
			for i, id := range tc.wantIDs {
				got := ""
				if in[i].Admitted != nil {
					got = in[i].Admitted.Request.ID
				}
				if got != id {
					t.Errorf("input %d (%s) admits %q, want %q", i, in[i].Kind, got, id)
				}
			}
		})
	}
}
