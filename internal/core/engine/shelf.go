package engine

// A GPU that changes model (issue 30) holds one model in HBM, serving, and
// keeps the others it may switch to parked beside it: asleep in host memory
// where they served there before, else files in the page cache, on disk or
// remote. Shelf is that set and the one definition of a switch — the
// simulator (internal/driver/sim, shift.go) and the live simulated worker
// (services/worker, switch.go) both carry out switches through it and keep
// only their shell: when to switch (virtual time and events, or goroutines
// and a lock), how long to drain, and where the KV-cleared event and the
// heartbeat go.

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/switchyard-ai/switchyard/internal/core/perf"
	"github.com/switchyard-ai/switchyard/schemas"
)

// Errors a change of model returns, for a shell to tell a retry (the old
// engine still runs sequences) from a switch that cannot be made.
var (
	ErrNotParked = errors.New("not parked here")
	ErrRunning   = errors.New("sequences still running")
)

// Shelf is the models a worker holds besides the one it serves: each
// model's replica, the tier its weights sit in and, once it has served on
// this worker, its engine (asleep). The serving engine is the caller's and
// is passed to Change, so a shell keeps one reference to what it serves. A
// Shelf is not safe for concurrent use: the live worker guards it with its
// lock.
type Shelf struct {
	// tmpl is the Config of an engine the shelf makes for a model on its
	// first switch here; its Replica and InitialWeights are the model's.
	// Each shell sizes its own engines (the simulator its run's batch,
	// budget, KV and seed; the worker its MaxBatch).
	tmpl   Config
	parked map[string]*shelved // by catalog model name
}

// shelved is one parked model: its engine nil until it first served here.
type shelved struct {
	rep  perf.Replica
	eng  *Engine
	tier string
}

// NewShelf returns an empty shelf whose new engines are made from tmpl.
func NewShelf(tmpl Config) *Shelf {
	return &Shelf{tmpl: tmpl, parked: map[string]*shelved{}}
}

// Park stages rep's model on the shelf at tier (host: asleep in host
// memory; page_cache, disk or remote: files only), replacing what was
// parked for it. The model is not the serving one: the caller knows what it
// serves and refuses that.
func (s *Shelf) Park(rep perf.Replica, tier string) error {
	if schemas.TierState(tier) == "" || tier == schemas.TierHBM {
		return fmt.Errorf("engine: park %s: tier %q: want host, page_cache, disk or remote", rep.Model.Name, tier)
	}
	s.parked[rep.Model.Name] = &shelved{rep: rep, tier: tier}
	return nil
}

// Parked reports whether model is on the shelf (names compare as the
// worker's commands do, case-insensitively). A nil shelf holds nothing.
func (s *Shelf) Parked(model string) bool {
	_, ok := s.find(model)
	return ok
}

// Len is how many models are parked; 0 for a nil shelf.
func (s *Shelf) Len() int {
	if s == nil {
		return 0
	}
	return len(s.parked)
}

// find is model's key on the shelf: its exact name, else the first name in
// order equal under case folding (deterministic when, against the catalog,
// two could be).
func (s *Shelf) find(model string) (string, bool) {
	if s == nil {
		return "", false
	}
	if _, ok := s.parked[model]; ok {
		return model, true
	}
	for _, name := range slices.Sorted(maps.Keys(s.parked)) {
		if strings.EqualFold(name, model) {
			return name, true
		}
	}
	return "", false
}

// ModelChange is what Change did: the engine and replica that serve now,
// the tier the new model's weights are coming from and the load's
// simulated seconds from it.
type ModelChange struct {
	Engine      *Engine
	Replica     perf.Replica
	From        string
	LoadSeconds float64
}

// Change makes model, parked here, the serving one at now, as a worker
// with vLLM's sleep mode changes model: serving — the engine holding the
// GPU — is put to sleep in host memory (its KV cache dropped, as sleep
// level 1 drops it) and parked; model's engine, made from the template on
// its first switch here, takes over serving's batch and token budgets and
// speculation (the controller set them on the worker, not the model) and
// starts bringing its weights into HBM from their tier. The caller serves
// the returned engine from now on and clears the routers' index of its KV.
//
// It fails, changing nothing, when model is not parked (ErrNotParked) and
// when serving still runs sequences (ErrRunning: a drain not yet done).
func (s *Shelf) Change(model string, serving *Engine, now time.Time) (ModelChange, error) {
	if serving == nil {
		return ModelChange{}, fmt.Errorf("engine: change to %s: no serving engine", model)
	}
	old := serving.rep.Model.Name
	if strings.EqualFold(model, old) {
		return ModelChange{}, fmt.Errorf("engine: change to %s: it is the serving model", model)
	}
	key, ok := s.find(model)
	if !ok {
		return ModelChange{}, fmt.Errorf("engine: change to %s: %w", model, ErrNotParked)
	}
	if n := len(serving.running); n > 0 {
		return ModelChange{}, fmt.Errorf("engine: change to %s: %s has %d %w", model, old, n, ErrRunning)
	}
	p := s.parked[key]
	eng := p.eng
	if eng == nil {
		cfg := s.tmpl
		cfg.Replica, cfg.InitialWeights = p.rep, schemas.TierState(p.tier)
		var err error
		if eng, err = New(cfg); err != nil {
			return ModelChange{}, fmt.Errorf("engine: change to %s: %w", model, err)
		}
		// InitialWeights names a state; the tier says which cold one
		// (page cache, disk or remote), which the load time depends on.
		if err := eng.SetWeightTier(p.tier); err != nil {
			return ModelChange{}, fmt.Errorf("engine: change to %s: %w", model, err)
		}
	}
	if err := serving.SetWeightTier(schemas.TierHost); err != nil {
		return ModelChange{}, fmt.Errorf("engine: change to %s: sleep %s: %w", model, old, err)
	}
	st := serving.State()
	eng.SetBudgets(st.MaxBatch, st.TokenBudget)
	eng.SetSpecDecode(st.SpecDecode)
	from := eng.Tier()
	eng.Wake(now)
	delete(s.parked, key)
	s.parked[old] = &shelved{rep: serving.rep, eng: serving, tier: schemas.TierHost}
	return ModelChange{Engine: eng, Replica: p.rep, From: from, LoadSeconds: p.rep.TierSeconds(from)}, nil
}

// Annotate lists every parked model in hb after the serving one (which the
// caller's FillHeartbeat wrote), by name, each with its tier and the load
// from it, and caps hb's free HBM at what the serving engine's reservation
// leaves (AddParked). This is what the controller prices the next switch
// by. A nil or empty shelf adds nothing.
func (s *Shelf) Annotate(hb *schemas.Heartbeat) {
	if s.Len() == 0 {
		return
	}
	for _, name := range slices.Sorted(maps.Keys(s.parked)) {
		p := s.parked[name]
		tier := p.tier
		if p.eng != nil {
			tier = p.eng.Tier()
		}
		AddParked(hb, p.rep, tier)
	}
}
