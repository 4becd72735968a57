package controller

import (
	"fmt"
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
// rate — so the figure is the routers' mix scaled to that backlog
// (control.QueuedByModelFrom, the estimate itself).

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
// (poolModel), scaled to backlog, the router consumers' backlog over every
// class (-1: unknown), by control.QueuedByModelFrom. It is nil when no
// router is heard from.
func (b *queuedBook) byModel(now time.Time, backlog int, poolModel func(string) string) map[string]int {
	b.mu.Lock()
	defer b.mu.Unlock()
	var held map[string]int
	for router, s := range b.seen {
		if now.Sub(s.at) > queuedStaleAfter {
			delete(b.seen, router)
			continue
		}
		if held == nil {
			held = map[string]int{}
		}
		for m, n := range s.byModel {
			if n > 0 {
				held[poolModel(m)] += n
			}
		}
	}
	return control.QueuedByModelFrom(held, backlog)
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
