// Package fleetlearn owns what a service needs to serve models the catalog
// does not know: it follows the workers' heartbeats, teaches a learning
// catalog (catalog.Learning) every model a worker describes, so a router's
// cost model and weight sizes cover what the fleet actually serves, and
// remembers which live workers serve which model names, so an admitter
// accepts a name exactly while some worker serves it. It is kept out of
// package catalog so the catalog stays pure data.
package fleetlearn

import (
	"log/slog"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/switchyard-ai/switchyard/internal/core/catalog"
	"github.com/switchyard-ai/switchyard/schemas"
	"github.com/switchyard-ai/switchyard/subjects"
)

// DefaultStale is how long after its last heartbeat a worker still counts
// as serving its models: a few missed heartbeats, not a dead worker.
const DefaultStale = 10 * time.Second

// Fleet is the models the live fleet serves, as its heartbeats say. Safe
// for concurrent use.
type Fleet struct {
	cat   *catalog.Catalog // nil or not learning: only serving is tracked
	log   *slog.Logger
	now   func() time.Time
	stale time.Duration

	mu sync.Mutex
	// byModel maps a lower-case model name to its workers' last heartbeat.
	byModel map[string]map[string]time.Time
	// names and context keep, per lower-case name, the name as the last
	// heartbeat spelled it and the context window it reported (0 when
	// none did), for a listing of what the fleet serves.
	names   map[string]string
	context map[string]int
	sub     *nats.Subscription
}

// Options configure a Fleet; zero values take the defaults.
type Options struct {
	// Catalog, when it is a learning catalog, learns every model a
	// heartbeat describes (ModelState.Spec).
	Catalog *catalog.Catalog
	Log     *slog.Logger
	// Now is the clock (time.Now).
	Now func() time.Time
	// Stale is DefaultStale when 0.
	Stale time.Duration
}

// New returns a Fleet fed by Observe; Follow also subscribes it.
func New(o Options) *Fleet {
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Stale <= 0 {
		o.Stale = DefaultStale
	}
	if o.Catalog != nil && !o.Catalog.CanLearn() {
		o.Catalog = nil
	}
	return &Fleet{cat: o.Catalog, log: o.Log, now: o.Now, stale: o.Stale, byModel: map[string]map[string]time.Time{},
		names: map[string]string{}, context: map[string]int{}}
}

// Follow returns a Fleet subscribed to every heartbeat on nc. Stop ends it.
func Follow(nc *nats.Conn, o Options) (*Fleet, error) {
	f := New(o)
	sub, err := nc.Subscribe(subjects.HeartbeatAll, func(m *nats.Msg) {
		format, err := schemas.FormatFromContentType(m.Header.Get(schemas.HeaderContentType))
		if err != nil {
			return
		}
		var hb schemas.Heartbeat
		if err := schemas.Unmarshal(format, m.Data, &hb); err != nil || hb.WorkerID == "" {
			return
		}
		f.Observe(hb)
	})
	if err != nil {
		return nil, err
	}
	f.sub = sub
	return f, nil
}

// Stop unsubscribes a followed Fleet.
func (f *Fleet) Stop() {
	if f.sub != nil {
		f.sub.Unsubscribe()
	}
}

// Observe records one heartbeat: the models it serves (a draining worker
// or an absent model serves nothing) and the descriptions it carries.
func (f *Fleet) Observe(hb schemas.Heartbeat) {
	now := f.now()
	f.mu.Lock()
	for _, ms := range hb.Models {
		key := strings.ToLower(ms.Name)
		workers := f.byModel[key]
		if hb.Draining || ms.State == schemas.WeightAbsent {
			delete(workers, hb.WorkerID)
			continue
		}
		if workers == nil {
			workers = map[string]time.Time{}
			f.byModel[key] = workers
		}
		workers[hb.WorkerID] = now
		f.names[key] = ms.Name
		if ms.ContextLength > 0 {
			f.context[key] = ms.ContextLength
		}
	}
	f.mu.Unlock()
	if f.cat == nil {
		return
	}
	added, errs := f.cat.LearnFrom(hb)
	for _, name := range added {
		f.log.Info("learned a model from the fleet", "model", name, "worker", hb.WorkerID)
	}
	for _, err := range errs {
		f.log.Warn("model description refused", "err", err)
	}
}

// Serves reports whether a worker heard from within the stale bound serves
// model.
func (f *Fleet) Serves(model string) bool {
	now := f.now()
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, seen := range f.byModel[strings.ToLower(model)] {
		if now.Sub(seen) <= f.stale {
			return true
		}
	}
	return false
}

// Served is one model the live fleet serves.
type Served struct {
	// Name is the model's name as its workers' heartbeats spell it.
	Name string
	// ContextLength is the context window a worker reported, 0 if none did.
	ContextLength int
}

// Models lists the models a worker heard from within the stale bound
// serves, by name: what a model listing (the gateway's /v1/models) adds to
// the catalog's.
func (f *Fleet) Models() []Served {
	now := f.now()
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []Served
	for key, workers := range f.byModel {
		for _, seen := range workers {
			if now.Sub(seen) <= f.stale {
				out = append(out, Served{Name: f.names[key], ContextLength: f.context[key]})
				break
			}
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// KnownOrServed widens a model lookup (the catalog's) to the models live
// workers serve: the admitter's ModelKnown. A nil lookup stays nil, since
// it already accepts every name.
func (f *Fleet) KnownOrServed(known schemas.ModelLookup) schemas.ModelLookup {
	if known == nil {
		return nil
	}
	return func(model string) bool { return known(model) || f.Serves(model) }
}
