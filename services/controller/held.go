package controller

import (
	"encoding/json"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/switchyard-ai/switchyard/internal/core/control"
	"github.com/switchyard-ai/switchyard/internal/core/routing"
	"github.com/switchyard-ai/switchyard/services/svc"
	"github.com/switchyard-ai/switchyard/subjects"
)

// Held demand reaches the controller as the routers' held_demand events
// (sy.event.router.held_demand): each router says, per pool, how many
// requests it holds for that pool's cold start, when the figure changes
// and every routing.HeldDemandRefresh while it is not zero. The controller
// keeps each router's latest word per pool; its held requests count only
// while repeated within heldStaleAfter (a router that died holds nothing
// any more: its requests went back to the stream for another router to
// hold), its cumulative refused count until heldForgetAfter.

// heldStaleAfter is how long a router's held requests count without being
// repeated: a few of its refreshes.
const heldStaleAfter = 3 * routing.HeldDemandRefresh

// heldForgetAfter drops a router's figures for a pool altogether (its
// refused count is only re-sent when it changes).
const heldForgetAfter = 10 * time.Minute

type heldKey struct{ router, pool string }

type heldSeen struct {
	d  routing.HeldDemand
	at time.Time
}

// heldBook gathers the routers' held demand.
type heldBook struct {
	mu   sync.Mutex
	seen map[heldKey]heldSeen
}

// follow subscribes to the routers' held_demand events; the returned
// function unsubscribes.
func (b *heldBook) follow(nc *nats.Conn, now func() time.Time) (func(), error) {
	sub, err := nc.Subscribe(subjects.Event("router", routing.EventHeldDemand), func(m *nats.Msg) {
		evs, _ := svc.DecodeEvents(m.Header, m.Data)
		for i := range evs {
			ev := &evs[i]
			router, _ := ev.Fields["instance"].(string)
			// The fields are routing.HeldDemand's, by its JSON names.
			raw, err := json.Marshal(ev.Fields)
			if err != nil {
				continue
			}
			var d routing.HeldDemand
			if json.Unmarshal(raw, &d) != nil || d.Pool == "" {
				continue
			}
			b.note(router, d, now())
		}
	})
	if err != nil {
		return nil, fmt.Errorf("controller held demand: %w", err)
	}
	return func() { _ = sub.Unsubscribe() }, nil
}

func (b *heldBook) note(router string, d routing.HeldDemand, at time.Time) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.seen == nil {
		b.seen = map[heldKey]heldSeen{}
	}
	k := heldKey{router: router, pool: d.Pool}
	if d.Requests <= 0 && d.Refused <= 0 {
		delete(b.seen, k)
		return
	}
	b.seen[k] = heldSeen{d: d, at: at}
}

// demand sums the held demand per pool over the routers still heard from,
// and per class, for taking out of the router backlog.
func (b *heldBook) demand(now time.Time) (map[string]control.HeldDemand, map[string]int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	pools, byClass := map[string]control.HeldDemand{}, map[string]int{}
	for k, s := range b.seen {
		if now.Sub(s.at) > heldForgetAfter {
			delete(b.seen, k)
			continue
		}
		h := pools[k.pool]
		h.Refused += s.d.Refused
		if h.ByClass == nil {
			h.ByClass = map[string]int{}
		}
		if now.Sub(s.at) <= heldStaleAfter {
			h.Requests += s.d.Requests
			h.Tokens += s.d.Tokens
			for c, n := range s.d.ByClass {
				h.ByClass[c] += n
				byClass[c] += n
			}
			if s.d.Requests > 0 && !s.d.Since.IsZero() && (h.Since.IsZero() || s.d.Since.Before(h.Since)) {
				h.Since = s.d.Since
			}
		}
		pools[k.pool] = h
	}
	return pools, byClass
}
