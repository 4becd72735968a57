package svc

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/switchyard-ai/switchyard/schemas"
)

// A router's queue depth per model reaches the controller on the same
// channel as its held demand for cold starts: an event on
// sy.event.router.queued_by_model, which the controller follows as it
// follows sy.event.router.held_demand. The controller's per-class backlog
// (RouterBacklog) cannot say which model the queue waits for — the
// admitted subjects carry class and tenant, not model — and GPUs that
// change model (control.Config.ShiftModels) move a GPU to the model the
// queue waits for (control.Inputs.QueuedByModel).

// EventQueuedByModel is the kind of a router's queue-depth event.
const EventQueuedByModel = "queued_by_model"

// QueuedByModelRefresh is how often a router repeats its figure while it
// holds anything, so a controller that (re)starts learns it without
// waiting for a change and one that stops hearing it can tell the router
// is gone (it drops a figure unrepeated for three refreshes).
const QueuedByModelRefresh = 2 * time.Second

// QueuedByModel is what one router holds unplaced: requests pulled from
// ADMITTED and neither dispatched nor answered — waiting in its queue or
// held for a pool's cold start — by the model they ask for.
type QueuedByModel struct {
	ByModel  map[string]int `json:"by_model,omitempty"`
	Requests int            `json:"requests"`
}

// Event is the figure as the event a router emits (Shell.Emit adds the
// router's instance).
func (q QueuedByModel) Event(at time.Time) schemas.Event {
	parts := make([]string, 0, len(q.ByModel))
	for _, m := range slices.Sorted(maps.Keys(q.ByModel)) {
		parts = append(parts, fmt.Sprintf("%s %d", m, q.ByModel[m]))
	}
	reason := fmt.Sprintf("%d requests held unplaced", q.Requests)
	if len(parts) > 0 {
		reason += ": " + strings.Join(parts, ", ")
	}
	byModel := make(map[string]any, len(q.ByModel))
	for m, n := range q.ByModel {
		byModel[m] = n
	}
	return schemas.Event{Kind: EventQueuedByModel, At: at, Reason: reason,
		Fields: map[string]any{"by_model": byModel, "requests": q.Requests}}
}

// ParseQueuedByModel reads a queued_by_model event: the router that sent
// it (its instance) and its figure.
func ParseQueuedByModel(ev *schemas.Event) (router string, q QueuedByModel, err error) {
	if ev.Kind != EventQueuedByModel {
		return "", q, fmt.Errorf("event kind %q, want %q", ev.Kind, EventQueuedByModel)
	}
	router, _ = ev.Fields["instance"].(string)
	if router == "" {
		return "", q, fmt.Errorf("%s event without the router's instance", EventQueuedByModel)
	}
	// The fields come back from msgpack as generic maps and whatever
	// integer width fit each count: read them by their JSON names.
	raw, err := json.Marshal(ev.Fields)
	if err != nil {
		return "", q, fmt.Errorf("%s event fields: %w", EventQueuedByModel, err)
	}
	if err := json.Unmarshal(raw, &q); err != nil {
		return "", q, fmt.Errorf("%s event fields: %w", EventQueuedByModel, err)
	}
	return router, q, nil
}
