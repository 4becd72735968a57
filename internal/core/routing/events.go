package routing

import "github.com/switchyard-ai/switchyard/schemas"

// EventFor is the event an action records, as the live router publishes
// it on sy.event.router.<kind> and replay reads it back: one mapping, so
// a replayed window explains itself in the words the live router used.
// ok is false for actions that record nothing (snapshot requests and
// duplicate deliveries).
func EventFor(in Input, a Action) (ev schemas.Event, ok bool) {
	switch a.Kind {
	case ActDispatch:
		h := a.Held
		return schemas.Event{Kind: "placed", At: in.At, RequestID: a.ID, Tenant: h.Adm.Tenant, WorkerID: a.Worker, Reason: a.Policy,
			Fields: map[string]any{"terms": a.Terms, "candidates": a.Candidates, "rejected": a.Rejected, "considered": a.Considered,
				"skipped": a.Skipped, "class": h.Adm.Priority, "gpu": a.GPU, "queue_ms": in.At.Sub(h.Adm.SubmittedAt).Milliseconds()}}, true
	case ActFail:
		return schemas.Event{Kind: a.Err.Code, At: in.At, RequestID: a.ID, Tenant: a.Held.Adm.Tenant, Reason: a.Err.Message,
			Fields: map[string]any{"class": a.Held.Adm.Priority}}, true
	case ActDelayed:
		return schemas.Event{Kind: "delayed", At: in.At, RequestID: a.ID, Tenant: a.Held.Adm.Tenant, Reason: a.Reason}, true
	case ActEvent:
		if a.Event != nil {
			return *a.Event, true
		}
	}
	return schemas.Event{}, false
}
