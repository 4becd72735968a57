package worker

import (
	"context"
	"errors"
	"net"
	"strings"
	"syscall"
	"time"

	"github.com/switchyard-ai/switchyard/internal/adapter/backend/openai"
	"github.com/switchyard-ai/switchyard/internal/core/catalog"
	"github.com/switchyard-ai/switchyard/internal/core/perf"
	"github.com/switchyard-ai/switchyard/schemas"
)

// engineState is what a real engine's native API reports beyond the OpenAI
// API: for Ollama, the models it has on disk (/api/tags), those loaded in
// memory (/api/ps), and how long real loads took (load_duration). It is
// how a worker's heartbeat tells the warmth axis the truth: hot when the
// engine has the weights in memory, cold when only on disk, with the load
// time this engine measured instead of the catalog's estimate.
type engineState struct {
	probed bool // the engine was asked whether it is Ollama
	ollama bool
	// loaded are the engine's names of the models in memory.
	loaded []string
	// available are the engine's names of the models it can load.
	available []string
	// loadSeconds is the last real load time per engine model name.
	loadSeconds map[string]float64
	// sizes are the bytes of each model on the engine's disk (/api/tags),
	// by modelKey: what a cold load reads (loadguess.go).
	sizes map[string]int64
	// guessLogged marks the models whose cold-load guess was logged.
	guessLogged map[string]bool
	// specs describe the engine's other models (not the worker's own), and
	// estimatedLoad is the guessed load time for each until a real load
	// is measured (loadguess.go): a cold model with no load time is
	// offered nowhere.
	specs         map[string]*schemas.ModelSpec
	estimatedLoad map[string]float64
	// loading marks models a dispatch is loading now.
	loading map[string]bool
	// down is set while the engine refuses connections (killed, restarting):
	// the heartbeat then says draining, so routers place nothing here
	// until it answers again.
	down bool
	// tiers are where each model's weights sit and the measured loads
	// from each tier (tiers.go).
	tiers weightTiers
	// served is the engine's name for the worker's model once a switch
	// changed it (switch_engine.go); the client's served name until then.
	served string
}

// servedName is the engine's name for the model the worker serves: the
// client's served name, or the model a switch moved it to. Callers hold
// w.mu.
func (w *Worker) servedName() string {
	if s := w.remote.engine.served; s != "" {
		return s
	}
	return w.remote.client.Model
}

// unreachable reports whether err means nothing is listening at the
// engine's address (as opposed to the engine answering with an error).
func unreachable(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) || errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ECONNRESET)
}

// noteReachability records whether the engine answered. Callers hold w.mu.
func (w *Worker) noteReachability(err error) {
	e := &w.remote.engine
	switch {
	case err == nil:
		if e.down {
			w.sh.Log.Info("engine answers again", "server", w.remote.client.BaseURL)
		}
		e.down = false
	case unreachable(err):
		if !e.down {
			w.sh.Log.Warn("engine unreachable: draining until it answers", "server", w.remote.client.BaseURL, "err", err)
		}
		e.down = true
	}
}

func newEngineState() engineState {
	return engineState{loadSeconds: map[string]float64{}, specs: map[string]*schemas.ModelSpec{}, estimatedLoad: map[string]float64{},
		loading: map[string]bool{}, sizes: map[string]int64{}, guessLogged: map[string]bool{}}
}

// keepAlive is how long Ollama keeps a model loaded after its last use
// when the worker loads it: Ollama's own default.
const keepAlive = 5 * time.Minute

// modelKey is the one spelling of an engine model name the maps use:
// Ollama answers "tiny:latest" for a model requested as "tiny".
func modelKey(model string) string {
	k := strings.ToLower(model)
	if !strings.Contains(k, ":") {
		k += ":latest"
	}
	return k
}

func (e *engineState) isLoaded(model string) bool {
	for _, m := range e.loaded {
		if openai.SameModel(m, model) {
			return true
		}
	}
	return false
}

// scrapeEngine refreshes an Ollama engine's model state, reporting whether
// the engine is Ollama (then there are no Prometheus metrics to scrape).
func (w *Worker) scrapeEngine(ctx context.Context) bool {
	r := w.remote
	w.mu.Lock()
	probed, isOllama := r.engine.probed, r.engine.ollama
	w.mu.Unlock()
	if !probed {
		_, err := r.client.OllamaVersion(ctx)
		if err != nil && !errors.Is(err, openai.ErrNotOllama) {
			w.mu.Lock()
			w.noteReachability(err)
			w.mu.Unlock()
			return false // unreachable for now: ask again next time
		}
		isOllama = err == nil
		w.mu.Lock()
		r.engine.probed, r.engine.ollama = true, isOllama
		w.mu.Unlock()
		if isOllama {
			w.sh.Log.Info("engine is Ollama: weight warmth from /api/ps, load times from real loads", "server", r.client.BaseURL)
		}
	}
	if !isOllama {
		return false
	}
	loaded, err := r.client.Running(ctx)
	w.mu.Lock()
	w.noteReachability(err)
	if err != nil && r.engine.down {
		// A restarted engine has nothing loaded.
		r.engine.loaded = nil
	}
	w.mu.Unlock()
	if err != nil {
		w.sh.Log.Debug("ollama /api/ps", "err", err)
		return true
	}
	tags, err := r.client.Tags(ctx)
	if err != nil {
		w.sh.Log.Debug("ollama /api/tags", "err", err)
		return true
	}
	avail := make([]string, 0, len(tags))
	for _, t := range tags {
		avail = append(avail, t.Name)
	}
	names := make([]string, 0, len(loaded))
	for _, l := range loaded {
		names = append(names, l.Name)
	}
	// Describe the engine's other models once each, so the fleet can place
	// them here (the worker's own model is described by its catalog entry).
	var undescribed []string
	w.mu.Lock()
	for _, a := range avail {
		if _, ok := r.engine.specs[a]; !ok && !openai.SameModel(a, w.servedName()) {
			undescribed = append(undescribed, a)
		}
	}
	w.mu.Unlock()
	described := map[string]*schemas.ModelSpec{}
	estimated := map[string]float64{}
	for _, a := range undescribed {
		spec, err := r.client.Describe(ctx, a)
		if err != nil {
			w.sh.Log.Warn("cannot describe an engine model; it will not be advertised", "model", a, "err", err)
			described[a] = nil
			continue
		}
		described[a] = &spec
		estimated[a] = w.estimateLoad(a, spec)
	}
	w.mu.Lock()
	r.engine.loaded, r.engine.available = names, avail
	for _, n := range names {
		r.engine.tiers.noteResident(n)
	}
	for _, t := range tags {
		if t.Size > 0 {
			r.engine.sizes[modelKey(t.Name)] = t.Size
		}
	}
	for a, s := range described {
		r.engine.specs[a] = s
		r.engine.estimatedLoad[a] = estimated[a]
	}
	r.scraped = true
	w.mu.Unlock()
	return true
}

// remoteModels is the heartbeat's model list for the openai backend.
// Callers hold w.mu.
func (w *Worker) remoteModels() []schemas.ModelState {
	r := w.remote
	own := schemas.ModelState{Name: w.replica.Model.Name, Dtype: w.cfg.Dtype, State: schemas.WeightHot}
	if w.replica.Model.FromFleet {
		spec := w.replica.Model.Spec()
		own.Spec = &spec
		own.ContextLength = w.replica.Model.MaxContext
	}
	if w.isVLLM() {
		w.vllmTiers(&own)
		return []schemas.ModelState{own}
	}
	if !r.engine.ollama || !r.scraped {
		return []schemas.ModelState{own}
	}
	served := w.servedName()
	own.State = w.engineWeightState(served)
	w.ollamaTiers(&own, served, w.loadSeconds(served, w.coldGuess(served, w.replica.LoadSeconds(schemas.WeightCold))))
	out := []schemas.ModelState{own}
	for _, a := range r.engine.available {
		spec := r.engine.specs[a]
		if openai.SameModel(a, served) || spec == nil {
			continue
		}
		m := schemas.ModelState{Name: strings.TrimSuffix(a, ":latest"), Dtype: w.cfg.Dtype,
			State: w.engineWeightState(a), Spec: spec, ContextLength: spec.MaxContext}
		w.ollamaTiers(&m, a, w.loadSeconds(a, w.coldGuess(a, r.engine.estimatedLoad[a])))
		out = append(out, m)
	}
	return out
}

// engineWeightState maps the engine's view of one model onto the warmth
// axis. Callers hold w.mu.
func (w *Worker) engineWeightState(model string) string {
	e := &w.remote.engine
	switch {
	case e.loading[modelKey(model)]:
		return schemas.WeightLoading
	case e.isLoaded(model):
		return schemas.WeightHot
	}
	return schemas.WeightCold // on the engine's disk; it loads on demand
}

// coldGuess is the guessed cold load of an engine model from its size on
// the engine's disk and this host's read speed (loadguess.go), logged the
// first time it is used; roofline when the engine gave no size. Callers
// hold w.mu.
func (w *Worker) coldGuess(model string, roofline float64) float64 {
	e := &w.remote.engine
	key := modelKey(model)
	size, ok := e.sizes[key]
	if !ok {
		return roofline
	}
	rs := hostReadSpeed()
	guess := coldLoadGuess(size, rs)
	if !e.guessLogged[key] {
		e.guessLogged[key] = true
		w.sh.Log.Info("cold load guessed until the engine loads the model once", "model", model, "load_s", guess,
			"size_bytes", size, "read_mb_per_s", rs.BytesPerSec/1e6, "read_direct", rs.Direct, "read_source", rs.Source,
			"runner_start_s", runnerStartSeconds, "roofline_load_s", roofline)
	}
	return guess
}

// loadSeconds is the measured load time for model, else fallback. Callers
// hold w.mu.
func (w *Worker) loadSeconds(model string, fallback float64) float64 {
	if s, ok := w.remote.engine.loadSeconds[modelKey(model)]; ok {
		return s
	}
	return fallback
}

// engineModel is the engine's name for a dispatched model: the served
// name for the worker's own model ("" names it too), else the model's own
// name (an engine serving several models). It takes w.mu: a switch
// (switch_engine.go) changes the worker's model and served name.
func (w *Worker) engineModel(model string) string {
	w.mu.Lock()
	defer w.mu.Unlock()
	if model == "" || strings.EqualFold(model, w.replica.Model.Name) {
		return w.servedName()
	}
	return model
}

// ensureLoaded loads a model Ollama does not hold in memory before the
// request is forwarded, so the load is measured by the engine itself
// (load_duration) and reported for the tier it was loaded from
// (tiers.go), instead of hiding inside one request's time to first token.
// A vLLM engine asleep is woken (wakeForDispatch). Other engines serve
// what they were started with.
func (w *Worker) ensureLoaded(ctx context.Context, model string) {
	if w.wakeForDispatch(ctx, model) {
		return
	}
	w.loadOnEngine(ctx, model, "loaded on the engine for a dispatch")
}

// loadOnEngine loads model on Ollama unless the engine holds it or a
// load of it is under way (then loaded is false), timed by the engine's
// load_duration and recorded for the tier it came from, with a weights
// event giving reason. A dispatch (ensureLoaded) and a switch of the
// worker's model (switch_engine.go) load through it.
func (w *Worker) loadOnEngine(ctx context.Context, model, reason string) (from string, d time.Duration, loaded bool, err error) {
	r := w.remote
	w.mu.Lock()
	key := modelKey(model)
	need := r.engine.ollama && !r.engine.isLoaded(model) && !r.engine.loading[key]
	from = r.engine.tiers.offTier(model)
	if need {
		r.engine.loading[key] = true
	}
	w.mu.Unlock()
	if !need {
		return schemas.TierHBM, 0, false, nil
	}
	d, err = r.client.Load(ctx, model, keepAlive)
	w.mu.Lock()
	delete(r.engine.loading, key)
	if err == nil {
		w.noteOllamaLoad(model, from, d)
	}
	w.mu.Unlock()
	if err != nil {
		w.sh.Log.Warn("load model on the engine", "model", model, "err", err)
		return from, 0, false, err
	}
	w.sh.Emit(schemas.Event{Kind: "weights", WorkerID: w.cfg.ID, Reason: reason,
		Fields: map[string]any{"model": model, "state": schemas.WeightHot, "load_s": d.Seconds(), "from_tier": from}})
	return from, d, true, nil
}

// noteOllamaLoad records a real load of model from tier on Ollama: its
// time (the model's load_s until the next) and the model resident.
// Callers hold w.mu.
func (w *Worker) noteOllamaLoad(model, tier string, d time.Duration) {
	e := &w.remote.engine
	if d > 0 {
		e.loadSeconds[modelKey(model)] = d.Seconds()
	}
	e.tiers.noteLoad(model, tier, d)
	if !e.isLoaded(model) {
		e.loaded = append(e.loaded, model)
	}
}

// remoteWarmth carries out the controller's warmth decision on the engine
// (tiers.go). On Ollama hot loads the model (and keeps it loaded),
// sleeping and cold unload it — Ollama has no host-memory tier, so both
// free the memory and leave the file in the page cache, and the next
// heartbeat says cold in tier page_cache, as /api/ps then does. On vLLM
// they map to its sleep mode (vllmWarmth). Other engines cannot take it.
// It reports whether the backend handled the decision.
func (w *Worker) remoteWarmth(model, state, reason string) bool {
	r := w.remote
	if r == nil {
		return false
	}
	w.mu.Lock()
	isOllama, isVLLM := r.engine.ollama, w.isVLLM()
	if model == "" {
		model = w.replica.Model.Name
	}
	w.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if isVLLM {
		fields, err := w.vllmWarmth(ctx, state)
		if err != nil {
			w.sh.Log.Warn("warmth change on the engine not made", "engine", "vllm", "model", model, "state", state, "err", err)
			return true
		}
		w.scrape(ctx)
		w.heartbeat()
		fields["model"], fields["state"] = model, state
		w.sh.Emit(schemas.Event{Kind: "weights", WorkerID: w.cfg.ID, Reason: reason, Fields: fields})
		return true
	}
	if !isOllama {
		w.sh.Log.Info("warmth change not supported by this engine", "state", state, "server", r.client.BaseURL)
		return true
	}
	em := w.engineModel(model)
	fields := map[string]any{"model": model, "state": state, "engine": "ollama"}
	var err error
	switch state {
	case schemas.WeightHot:
		w.mu.Lock()
		from, resident := r.engine.tiers.offTier(em), r.engine.isLoaded(em)
		w.mu.Unlock()
		var d time.Duration
		if d, err = r.client.Load(ctx, em, -1); err == nil && !resident {
			w.mu.Lock()
			w.noteOllamaLoad(em, from, d)
			w.mu.Unlock()
			fields["load_s"], fields["from_tier"] = d.Seconds(), from
		}
	case schemas.WeightSleeping, schemas.WeightCold:
		// Ollama has no host-memory tier: a sleep is an unload.
		if err = r.client.Unload(ctx, em); err == nil {
			fields["tier"] = schemas.TierPageCache
		}
	default:
		w.sh.Log.Warn("unknown warmth state", "state", state)
		return true
	}
	if err != nil {
		w.sh.Log.Warn("warmth change on the engine failed", "model", em, "state", state, "err", err)
		return true
	}
	w.scrape(ctx)
	w.heartbeat()
	w.sh.Emit(schemas.Event{Kind: "weights", WorkerID: w.cfg.ID, Reason: reason, Fields: fields})
	return true
}

// estimateLoad is the roofline's cold-load time for an engine model on this
// worker's GPU, from its description; 0 when the description does not fit.
// It stands only when the engine gave no size for the model (coldGuess).
func (w *Worker) estimateLoad(name string, spec schemas.ModelSpec) float64 {
	cat := catalog.Default().Learning()
	if _, err := cat.Learn(name, spec); err != nil {
		return 0
	}
	rep, err := perf.NewReplica(cat, w.cfg.GPU, name, w.cfg.Dtype, w.cfg.TP)
	if err != nil {
		return 0
	}
	return rep.LoadSeconds(schemas.WeightCold)
}
