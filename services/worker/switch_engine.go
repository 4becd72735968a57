package worker

// A switch of model on a real engine (issue 30; the file comment of
// switch.go tells the whole switch). Only Ollama changes model in place:
// one process serves any model it has pulled, loading one on a request
// and unloading it with keep_alive 0. The drain is switch.go's
// (carrySwitch); what is Ollama's is here: which model the command names
// on the engine, the unload of the old one, the load of the new one
// (loadOnEngine, the load a dispatch makes, timed by the engine) and the
// worker's model and served name after it.

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/switchyard-ai/switchyard/internal/adapter/backend/enginemetrics"
	"github.com/switchyard-ai/switchyard/internal/adapter/backend/openai"
	"github.com/switchyard-ai/switchyard/internal/core/control"
	"github.com/switchyard-ai/switchyard/internal/core/perf"
	"github.com/switchyard-ai/switchyard/schemas"
)

// engineSwitchTimeout bounds a real engine's unload and load for one
// switch, as a warmth change on the engine is bounded (remoteWarmth).
const engineSwitchTimeout = 2 * time.Minute

// engineTarget is the model a switch on a real engine moves the worker to.
type engineTarget struct {
	// name is the engine's own name for it (/api/tags), the served name
	// after the switch.
	name string
	// replica is the model on this worker's GPU: the catalog's entry, else
	// the engine's description of it (/api/show).
	replica perf.Replica
}

// notSwitchable is the refusal of a switch by an engine that does not
// change model in place (the reason the worker gave before Ollama's
// switch was built, kept as it was).
const notSwitchable = "not supported by this engine: the openai backend serves the one model it was started with"

// engineSwitchRefusal is why a worker in front of a real engine cannot
// begin the switch c ("" when it can, with the target resolved into
// w.shift.target). Callers hold w.mu.
func (w *Worker) engineSwitchRefusal(c control.SwitchMsg) string {
	r := w.remote
	switch {
	case r.engine.ollama:
	case w.isVLLM():
		return notSwitchable + " (vLLM: one model per process; another model is another engine)"
	case r.scraped && r.metrics.Engine == enginemetrics.EngineSGLang:
		return notSwitchable + " (SGLang: changing its model in place is not mapped)"
	case !r.engine.probed:
		return notSwitchable + " (the engine has not answered yet: not known to be Ollama)"
	default:
		return notSwitchable
	}
	switch {
	case r.engine.down:
		return "the engine at " + r.client.BaseURL + " is not answering"
	case r.stalled:
		return "the engine at " + r.client.BaseURL + " is stalled"
	}
	served := w.servedName()
	serving := w.replica.Model.Name
	// The worker's model by its catalog name or the engine's; any other
	// by the engine's spelling ("tiny" is "tiny:latest").
	same := func(a, b string) bool {
		return openai.SameModel(a, b) || (strings.EqualFold(b, serving) && openai.SameModel(a, served))
	}
	if why := w.switchStateRefusal(c, same); why != "" {
		return why
	}
	t, why := w.engineTargetFor(c.To)
	if why != "" {
		return why
	}
	w.shift.target = &t
	return ""
}

// engineTargetFor resolves the model to switch to on the engine: one it
// lists as available, with a replica from the catalog or the engine's own
// description. It returns why not when it cannot. Callers hold w.mu.
func (w *Worker) engineTargetFor(to string) (engineTarget, string) {
	e := &w.remote.engine
	i := slices.IndexFunc(e.available, func(a string) bool { return openai.SameModel(a, to) })
	if i < 0 {
		return engineTarget{}, fmt.Sprintf("model %q is not available on the engine at %s (it has %s)",
			to, w.remote.client.BaseURL, strings.Join(e.available, ", "))
	}
	name := e.available[i]
	model := strings.TrimSuffix(to, ":latest") // the name its heartbeat listed it by
	rep, err := perf.NewReplica(w.cfg.Catalog, w.cfg.GPU, model, w.cfg.Dtype, w.cfg.TP)
	if err != nil {
		spec := e.specs[name]
		if spec == nil {
			return engineTarget{}, fmt.Sprintf("model %q cannot run here: %v, and the engine did not describe it", to, err)
		}
		// A private learning copy: the shared catalog learns the model
		// from this worker's heartbeats (fleetlearn), as it learned the
		// worker's first model.
		cat := w.cfg.Catalog.Learning()
		if _, lerr := cat.Learn(model, *spec); lerr != nil {
			return engineTarget{}, fmt.Sprintf("model %q cannot run here: %v", to, lerr)
		}
		if rep, err = perf.NewReplica(cat, w.cfg.GPU, model, w.cfg.Dtype, w.cfg.TP); err != nil {
			return engineTarget{}, fmt.Sprintf("model %q cannot run here: %v", to, err)
		}
	}
	return engineTarget{name: name, replica: rep}, ""
}

// changeEngineModel carries out a drained switch on Ollama: it unloads
// the served model, waits until the engine no longer lists it (its memory
// is free before the next model needs it), loads the switch's model as a
// dispatch would (loadOnEngine, timed by the engine), then makes it the
// worker's model and served name, the old one listed among the engine's
// other models, cold in the page cache. It returns the tier the new
// model loaded from and the load's seconds (0 from hbm: the engine held
// it already). On an error the worker keeps its model, which the next
// dispatch for it reloads. Callers do not hold w.mu.
func (w *Worker) changeEngineModel(c control.SwitchMsg) (string, float64, error) {
	r := w.remote
	w.mu.Lock()
	t, old, oldRep := w.shift.target, w.servedName(), w.replica
	w.mu.Unlock()
	if t == nil {
		return "", 0, fmt.Errorf("the switch to %s has no target on the engine", c.To)
	}
	ctx, cancel := context.WithTimeout(context.Background(), engineSwitchTimeout)
	defer cancel()
	if err := w.unloadFromEngine(ctx, old); err != nil {
		return "", 0, fmt.Errorf("unload %s from the engine: %w", old, err)
	}
	from, d, _, err := w.loadOnEngine(ctx, t.name, "loaded on the engine for a switch of model")
	if err != nil {
		return "", 0, fmt.Errorf("load %s on the engine: %w; the worker keeps serving %s", t.name, err, c.From)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	e := &r.engine
	// The old model is one of the engine's others now: listed (with its
	// description, which the catalog had) cold, in the page cache.
	spec := oldRep.Model.Spec()
	for _, a := range e.available {
		if openai.SameModel(a, old) {
			e.specs[a] = &spec
			if _, ok := e.estimatedLoad[a]; !ok {
				e.estimatedLoad[a] = oldRep.LoadSeconds(schemas.WeightCold)
			}
		}
	}
	w.replica, e.served = t.replica, t.name
	w.shift.order, w.shift.target = nil, nil
	// The old model's KV went with its unload.
	w.clearKVIndex()
	return from, d.Seconds(), nil
}

// unloadFromEngine unloads model from Ollama (keep_alive 0) and waits
// until /api/ps no longer lists it: Ollama answers the unload before its
// runner is gone. Callers do not hold w.mu.
func (w *Worker) unloadFromEngine(ctx context.Context, model string) error {
	r := w.remote
	if err := r.client.Unload(ctx, model); err != nil {
		return err
	}
	for {
		ps, err := r.client.Running(ctx)
		if err != nil {
			return err
		}
		if !slices.ContainsFunc(ps, func(l openai.Loaded) bool { return openai.SameModel(l.Name, model) }) {
			break
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("the engine still lists it loaded: %w", ctx.Err())
		case <-time.After(switchPoll):
		}
	}
	w.mu.Lock()
	e := &r.engine
	if e.isLoaded(model) {
		e.tiers.noteResident(model) // it was in memory: its file is in the page cache
	}
	e.loaded = slices.DeleteFunc(e.loaded, func(m string) bool { return openai.SameModel(m, model) })
	w.mu.Unlock()
	return nil
}
