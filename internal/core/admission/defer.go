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
	// (0 means 0.8) or the predicted wait of the classes above is at least
	// BusyWait (0 means 2 s). Both count only the work deferral makes room
	// for — the higher classes' — where the load says whose it is: a batch
	// that fills an otherwise idle fleet is not a reason to defer the rest
	// of that batch, which would then sit out a trough that is already
	// there.
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
	util, others := p.othersLoad(class, wait, l)
	if util < busyU && others < busyW {
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
	return until, true, fmt.Sprintf("fleet busy with higher classes (utilisation %.0f%%, their wait %s): deferred %s to %s, %s slack",
		util*100, others.Round(time.Millisecond), until.Sub(now).Round(time.Second), until.UTC().Format(time.RFC3339), slack.Round(time.Second))
}

// othersLoad is the utilisation and the queue wait of the classes above
// class. The utilisation is their share of the KV blocks in use when the
// heartbeats split it by class (Load.UtilizationByClass), the fleet's mean
// utilisation otherwise. The wait is the predicted wait of the next higher
// class, which counts the pending work of every class above and none of
// class's own; for the highest class it is class's own wait.
func (p DeferPolicy) othersLoad(class string, wait time.Duration, l Load) (float64, time.Duration) {
	rank := schemas.PriorityRank(class)
	util := l.Utilization
	if l.UtilizationByClass != nil && rank >= 0 {
		util = 0
		for _, c := range schemas.Priorities[:rank] {
			util += l.UtilizationByClass[c]
		}
	}
	if rank <= 0 {
		return util, wait
	}
	above, _ := Shedder{}.Wait(schemas.Priorities[rank-1], l)
	return util, above
}
