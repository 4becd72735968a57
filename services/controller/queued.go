package controller

import (
	"fmt"
	"math"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/switchyard-ai/switchyard/internal/core/catalog"
	"github.com/switchyard-ai/switchyard/internal/core/control"
	"github.com/switchyard-ai/switchyard/services/svc"
	"github.com/switchyard-ai/switchyard/subjects"
)

// The routers' queue depth per model (control.Inputs.QueuedByModel), as
// their queued_by_model events say it (svc.QueuedByModel): each router's
// latest figure counts while repeated within queuedStaleAfter, and the
// live routers' figures are summed. They give the queue's mix of models;
// its size is the router consumers' backlog, which the controller reads
// fresh at each decision (svc.RouterBacklog) and which also counts what no
// router has pulled yet — past a router's window, or paced by its pull
// rate — so the figure is the routers' mix scaled to that backlog. That
// also bounds the double count of a router that died: its requests, back
// in the stream after AckWait, are reported by the router that pulls them
// while its own last figure has not lapsed yet.

// queuedStaleAfter is how long a router's figure counts without being
// repeated: a few of its refreshes.
const queuedStaleAfter = 3 * svc.QueuedByModelRefresh

type queuedSeen struct {
	byModel map[string]int
	at      time.Time
}

// queuedBook gathers the routers' queue depth per model.
type queuedBook struct {
	mu   sync.Mutex
	seen map[string]queuedSeen // by router instance
}

// follow subscribes to the routers' queued_by_model events; the returned
// function unsubscribes.
func (b *queuedBook) follow(nc *nats.Conn, now func() time.Time) (func(), error) {
	sub, err := nc.Subscribe(subjects.Event("router", svc.EventQueuedByModel), func(m *nats.Msg) {
		evs, _ := svc.DecodeEvents(m.Header, m.Data)
		for i := range evs {
			router, q, err := svc.ParseQueuedByModel(&evs[i])
			if err != nil {
				continue
			}
			b.note(router, q.ByModel, now())
		}
	})
	if err != nil {
		return nil, fmt.Errorf("controller queue depth by model: %w", err)
	}
	return func() { _ = sub.Unsubscribe() }, nil
}

// note keeps a router's latest figure; an empty one is kept too (the
// router holds nothing: a known zero).
func (b *queuedBook) note(router string, byModel map[string]int, at time.Time) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.seen == nil {
		b.seen = map[string]queuedSeen{}
	}
	b.seen[router] = queuedSeen{byModel: byModel, at: at}
}

// byModel is the queue depth per model for one decision: the live
// routers' figures summed, each model named as the pools name it
// (poolModel), and scaled to backlog, the router consumers' backlog over
// every class, when that is known (backlog >= 0). It is nil — the queue's
// models unknown, so the core splits it over the pools by capacity as
// before — when no router is heard from, or when the routers hold nothing
// while the backlog is not empty (no mix to scale).
func (b *queuedBook) byModel(now time.Time, backlog int, poolModel func(string) string) map[string]int {
	b.mu.Lock()
	defer b.mu.Unlock()
	var out map[string]int
	held := 0
	for router, s := range b.seen {
		if now.Sub(s.at) > queuedStaleAfter {
			delete(b.seen, router)
			continue
		}
		if out == nil {
			out = map[string]int{}
		}
		for m, n := range s.byModel {
			if n > 0 {
				out[poolModel(m)] += n
				held += n
			}
		}
	}
	if out == nil || backlog < 0 || held == backlog {
		return out
	}
	if held == 0 {
		return nil
	}
	// Largest remainder, so the models' counts add up to the backlog.
	type part struct {
		m    string
		frac float64
	}
	scale := float64(backlog) / float64(held)
	total := 0
	parts := make([]part, 0, len(out))
	for m, n := range out {
		v := float64(n) * scale
		out[m] = int(math.Floor(v))
		total += out[m]
		parts = append(parts, part{m, v - math.Floor(v)})
	}
	for left := backlog - total; left > 0; left-- {
		best := -1
		for i, p := range parts {
			if best < 0 || p.frac > parts[best].frac || (p.frac == parts[best].frac && p.m < parts[best].m) {
				best = i
			}
		}
		out[parts[best].m]++
		parts[best].frac = -1
	}
	return out
}

// poolModels names a request's model as the configured pools name it
// (control.Inputs.QueuedByModel is read by the pools' Model): the
// catalog's model of that name, matched case-insensitively, or the name
// itself when no pool serves it.
func poolModels(pools []control.Pool, cat *catalog.Catalog) func(string) string {
	if cat == nil {
		cat = catalog.Default()
	}
	canon := func(name string) string {
		if m, ok := cat.Model(name); ok {
			return m.Name
		}
		return strings.ToLower(name)
	}
	byCanon := map[string]string{}
	for _, p := range pools {
		byCanon[canon(p.Model)] = p.Model
	}
	return func(name string) string {
		if m, ok := byCanon[canon(name)]; ok {
			return m
		}
		return name
	}
}
