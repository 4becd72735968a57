package admitter

import (
	"context"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/switchyard-ai/switchyard/schemas"
	"github.com/switchyard-ai/switchyard/services/svc"
)

// onHeartbeat keeps the latest heartbeat per worker for the fleet view.
func (a *Admitter) onHeartbeat(m *nats.Msg) {
	var hb schemas.Heartbeat
	if err := svc.Decode(m.Header, m.Data, &hb); err != nil || hb.WorkerID == "" {
		return
	}
	now := a.sh.Now()
	a.mu.Lock()
	a.fleet.Observe(hb, now)
	a.mu.Unlock()
}

// pollPending reads the router consumers' backlog — messages not yet
// delivered plus those delivered but not yet placed (the router acks an
// admitted request only once it is dispatched) — every LoadInterval, in
// the background so no submission waits on a consumer-info round trip.
func (a *Admitter) pollPending(ctx context.Context) {
	t := time.NewTicker(a.cfg.LoadInterval)
	defer t.Stop()
	for {
		counts := map[string]int{}
		ok := true
		for _, class := range schemas.Priorities {
			n, err := svc.RouterBacklog(ctx, a.sh.JS, class)
			if err != nil {
				ok = false // no router yet: keep the previous figures
				break
			}
			counts[class] = n
		}
		if ok {
			a.mu.Lock()
			a.polled = counts
			a.since = map[string]int{}
			a.mu.Unlock()
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// pendingLocked is the last poll plus what this replica admitted since:
// it over-counts what the router dispatched meanwhile, which errs towards
// shedding a little early rather than queueing doomed work.
func (a *Admitter) pendingLocked() map[string]int {
	out := make(map[string]int, len(schemas.Priorities))
	for _, c := range schemas.Priorities {
		out[c] = a.polled[c] + a.since[c]
	}
	return out
}
