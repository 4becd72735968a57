package router

import (
	"maps"
	"time"

	"github.com/switchyard-ai/switchyard/internal/core/routing"
	"github.com/switchyard-ai/switchyard/services/svc"
)

// The router's queue depth per model, for the controller (svc.QueuedByModel):
// what it holds unplaced — queued, or held for a pool's cold start — by
// model, as a queued_by_model event on the router's own event subjects,
// which the controller already follows for held demand. It is read on the
// decision goroutine (the core is that goroutine's alone) at most every
// queuedCheck, and emitted when it changed since the last event or
// svc.QueuedByModelRefresh after it while anything is held, and once more
// when the router holds nothing again or stops, so the controller never
// keeps a figure the router has moved past. It is the shell's report of
// the core's state, not a decision: it is not journaled, and replay
// neither needs nor reproduces it.

// queuedCheck bounds how often the figure is read: a count over what the
// router holds (at most its window per class), once a second, against a
// controller deciding every two seconds by default.
const queuedCheck = time.Second

// queuedReport is what the router last said of its queue per model.
type queuedReport struct {
	checkedAt, sentAt time.Time
	sent              map[string]int
}

// reportQueued emits the router's queue depth per model when it is due
// (see above); stopping says the router holds nothing any more.
func (r *Router) reportQueued(now time.Time, stopping bool) {
	q := &r.queued
	if !stopping && now.Sub(q.checkedAt) < queuedCheck {
		return
	}
	q.checkedAt = now
	cur := map[string]int{}
	n := 0
	if !stopping {
		r.core.Each(func(h *routing.Held) {
			if h.Adm.Model != "" {
				cur[h.Adm.Model]++
				n++
			}
		})
	}
	if maps.Equal(cur, q.sent) && (n == 0 || now.Sub(q.sentAt) < svc.QueuedByModelRefresh) {
		return
	}
	r.sh.Emit(svc.QueuedByModel{ByModel: cur, Requests: n}.Event(now))
	q.sent, q.sentAt = cur, now
}
