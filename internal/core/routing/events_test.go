package routing

import (
	"testing"
	"time"

	"github.com/switchyard-ai/switchyard/schemas"
)

func TestEventFor(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	h := &Held{Adm: schemas.Admitted{Tenant: "acme", Priority: schemas.PriorityInteractive, SubmittedAt: t0}}
	in := Input{At: t0.Add(1500 * time.Millisecond)}
	for _, tc := range []struct {
		a    Action
		kind string
		ok   bool
	}{
		{Action{Kind: ActDispatch, ID: "r1", Held: h, Worker: "w1", GPU: "h100", Policy: "switchyard"}, "placed", true},
		{Action{Kind: ActFail, ID: "r1", Held: h, Err: schemas.Errf(schemas.CodeDeadlineExceeded, "", "late")}, schemas.CodeDeadlineExceeded, true},
		{Action{Kind: ActDelayed, ID: "r1", Held: h, Reason: "4 busy"}, "delayed", true},
		{Action{Kind: ActEvent, Event: &schemas.Event{Kind: "breaker_open"}}, "breaker_open", true},
		{Action{Kind: ActSnapshot, Worker: "w1"}, "", false},
		{Action{Kind: ActDuplicate, ID: "r1", Held: h}, "", false},
	} {
		ev, ok := EventFor(in, tc.a)
		if ok != tc.ok || ev.Kind != tc.kind {
			t.Errorf("%s: event %q ok=%v, want %q ok=%v", tc.a.Kind, ev.Kind, ok, tc.kind, tc.ok)
		}
		if tc.a.Kind == ActDispatch && (ev.Tenant != "acme" || ev.WorkerID != "w1" || ev.Fields["queue_ms"] != int64(1500)) {
			t.Errorf("placed event: %+v", ev)
		}
	}
}
