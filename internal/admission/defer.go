package admission

import (
	"fmt"
	"slices"
	"time"

	"github.com/switchyard-ai/switchyard/schemas"
)

// DeferPolicy decides when deadline-tolerant work waits for a trough.
type DeferPolicy struct {
	// Classes that may be deferred; nil means batch only.
	Classes []string
	// The fleet is busy when utilisation is at least BusyUtilization
	// (0 means 0.8) or the class's predicted wait is at least BusyWait
	// (0 means 2 s).
	BusyUtilization float64
	BusyWait        time.Duration
	// MinSlack is the least spare time (deadline minus twice the predicted
	// service and the current wait) a request must have to be deferred;
	// 0 means 2 minutes. MaxDefer caps one deferral; 0 means 10 minutes.
	MinSlack time.Duration
	MaxDefer time.Duration
}

// Defer decides whether to hold a request back until a trough. It defers
// by half the spare time, capped by MaxDefer, so the request still has
// half its slack (plus twice its service time) when it comes back — room
// to run even if the trough never comes. until is rounded up to a whole
// second because JetStream message schedules (Nats-Schedule: @<time>)
// have second resolution.
func (p DeferPolicy) Defer(class string, now, deadline time.Time, service, wait time.Duration, l Load) (until time.Time, ok bool, reason string) {
	classes := p.Classes
	if classes == nil {
		classes = []string{schemas.PriorityBatch}
	}
	if !slices.Contains(classes, class) {
		return time.Time{}, false, ""
	}
	busyU, busyW := p.BusyUtilization, p.BusyWait
	if busyU <= 0 {
		busyU = 0.8
	}
	if busyW <= 0 {
		busyW = 2 * time.Second
	}
	if l.Utilization < busyU && wait < busyW {
		return time.Time{}, false, ""
	}
	minSlack, maxDefer := p.MinSlack, p.MaxDefer
	if minSlack <= 0 {
		minSlack = 2 * time.Minute
	}
	if maxDefer <= 0 {
		maxDefer = 10 * time.Minute
	}
	slack := deadline.Sub(now) - 2*service - wait
	if slack < minSlack {
		return time.Time{}, false, ""
	}
	delay := min(slack/2, maxDefer)
	until = now.Add(delay).Truncate(time.Second)
	if until.Before(now.Add(delay)) {
		until = until.Add(time.Second)
	}
	return until, true, fmt.Sprintf("fleet busy (utilisation %.0f%%, wait %s): deferred %s to %s, %s slack",
		l.Utilization*100, wait.Round(time.Millisecond), until.Sub(now).Round(time.Second), until.UTC().Format(time.RFC3339), slack.Round(time.Second))
}
