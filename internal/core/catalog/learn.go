package catalog

import (
	"fmt"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/switchyard-ai/switchyard/schemas"
)

// learnedModels are the models a catalog has learned from the fleet.
type learnedModels struct {
	mu     sync.RWMutex
	models map[string]Model
	// gen counts the models learned, so a cache of "unknown" answers
	// (perf.Predictor) knows when to look again.
	gen atomic.Uint64
}

func (l *learnedModels) get(key string) (Model, bool) {
	l.mu.RLock()
	defer l.mu.RUnlock()
	m, ok := l.models[key]
	return m, ok
}

func (l *learnedModels) all() []Model {
	l.mu.RLock()
	defer l.mu.RUnlock()
	out := make([]Model, 0, len(l.models))
	for _, m := range l.models {
		out = append(out, m)
	}
	return out
}

// Learning returns a copy of c that can also learn models from the fleet
// (Learn). The shared default catalog never learns: what one service
// learned must not leak into another's view through a package variable.
func (c *Catalog) Learning() *Catalog {
	n := c.clone()
	n.learned = &learnedModels{models: map[string]Model{}}
	if c.learned != nil {
		for _, m := range c.learned.all() {
			n.learned.models[m.Name] = m
		}
	}
	return n
}

// CanLearn reports whether Learn can add models to c.
func (c *Catalog) CanLearn() bool { return c.learned != nil }

// Generation changes whenever the catalog learns a model; it is 0 for a
// catalog that cannot learn.
func (c *Catalog) Generation() uint64 {
	if c.learned == nil {
		return 0
	}
	return c.learned.gen.Load()
}

// Learn adds a model described by a worker. A name the catalog already
// knows, configured or learned, is left as it is (the first description
// wins, and configuration always beats a heartbeat); added reports whether
// the model is new. A description that does not validate is an error.
func (c *Catalog) Learn(name string, spec schemas.ModelSpec) (added bool, err error) {
	if c.learned == nil {
		return false, fmt.Errorf("catalog: this catalog cannot learn models (make one with Learning)")
	}
	key := strings.ToLower(strings.TrimSpace(name))
	if key == "" {
		return false, fmt.Errorf("catalog: learn: empty model name")
	}
	if _, ok := c.Model(key); ok {
		return false, nil
	}
	m := ModelFromSpec(key, spec)
	if err := m.validate(); err != nil {
		return false, fmt.Errorf("catalog: learn model %q: %w", name, err)
	}
	c.learned.mu.Lock()
	defer c.learned.mu.Unlock()
	if _, ok := c.learned.models[key]; ok {
		return false, nil
	}
	c.learned.models[key] = m
	c.learned.gen.Add(1)
	return true, nil
}

// ModelFromSpec is the catalog model a worker's description stands for.
// Its tier is -1: `model: auto` never moves a request onto a model nobody
// configured.
func ModelFromSpec(name string, s schemas.ModelSpec) Model {
	src := s.Source
	if src == "" {
		src = "described by a worker's heartbeat"
	}
	return Model{
		Name: strings.ToLower(name), Family: s.Family, Tier: -1, Params: s.Params,
		Layers: s.Layers, Hidden: s.Hidden, Heads: s.Heads, KVHeads: s.KVHeads, HeadDim: s.HeadDim,
		Intermediate: s.Intermediate, Vocab: s.Vocab, MaxContext: s.MaxContext,
		Source: src, FromFleet: true,
	}
}

// Spec is the wire description of m, for a worker's heartbeat.
func (m Model) Spec() schemas.ModelSpec {
	return schemas.ModelSpec{Family: m.Family, Params: m.Params, Layers: m.Layers, Hidden: m.Hidden, Heads: m.Heads,
		KVHeads: m.KVHeads, HeadDim: m.HeadDim, Intermediate: m.Intermediate, Vocab: m.Vocab, MaxContext: m.MaxContext, Source: m.Source}
}

// LearnFrom learns every model a heartbeat describes (ModelState.Spec),
// returning the names that were new. Descriptions that do not validate are
// returned as errors and skipped; the rest of the heartbeat still counts.
func (c *Catalog) LearnFrom(hb schemas.Heartbeat) (added []string, errs []error) {
	for _, ms := range hb.Models {
		if ms.Spec == nil {
			continue
		}
		ok, err := c.Learn(ms.Name, *ms.Spec)
		if err != nil {
			errs = append(errs, fmt.Errorf("worker %s: %w", hb.WorkerID, err))
			continue
		}
		if ok {
			added = append(added, strings.ToLower(ms.Name))
		}
	}
	return added, errs
}
