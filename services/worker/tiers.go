package worker

import (
	"context"
	"errors"
	"slices"
	"time"

	"github.com/switchyard-ai/switchyard/internal/adapter/backend/enginemetrics"
	"github.com/switchyard-ai/switchyard/internal/adapter/backend/openai"
	"github.com/switchyard-ai/switchyard/internal/core/catalog"
	"github.com/switchyard-ai/switchyard/schemas"
)

// A real engine's weight tiers (issue 30): where each model's weights sit
// on this worker, and how long a load from there took when it was done
// here — measured, not the catalog's estimate.
//
// Ollama has no host-memory tier: a sleep is an unload (keep_alive 0),
// which frees the memory and leaves the model's file in the host's page
// cache, since it was just read; a reload reads it from there. So a model
// Ollama holds is in hbm, one it held since this worker started and then
// unloaded is in page_cache, and one it never held since is on disk (its
// file may be cached too — an `ollama create` or a load before this worker
// started reads it — but nothing here measured that). Each real load's
// time (Client.Load: load_duration, or the call's own time where v0.6.5
// reports none) is recorded for the tier it was loaded from, and the
// heartbeat's tier_s carries it, named in tier_measured; a tier not yet
// measured carries the size-and-read-speed guess (loadguess.go).
//
// vLLM (detected by its metric names) sleeps and wakes in place through
// its sleep mode (openai/sleep.go): the controller's sleeping is level 1
// (tier host), its cold is level 2 (tier page_cache), its hot a wake; each
// wake is timed and reported for its tier as measured, the catalog's
// figures standing in until then. Untested against a live vLLM: only
// against the documented HTTP shapes. SGLang's memory release is not
// mapped (openai/sleep.go says why).
type weightTiers struct {
	// everLoaded marks the engine models (modelKey) seen in the engine's
	// memory since the worker started.
	everLoaded map[string]bool
	// measured is the last real load or wake time per model and tier.
	measured map[string]map[string]float64
	// sleepLevel is a vLLM engine's sleep level (0: awake).
	sleepLevel int
}

func (t *weightTiers) init() {
	if t.everLoaded == nil {
		t.everLoaded, t.measured = map[string]bool{}, map[string]map[string]float64{}
	}
}

// noteResident records that the engine holds model in memory now.
func (t *weightTiers) noteResident(model string) {
	t.init()
	t.everLoaded[modelKey(model)] = true
}

// noteLoad records a real load of model from tier that took d.
func (t *weightTiers) noteLoad(model, tier string, d time.Duration) {
	t.init()
	k := modelKey(model)
	t.everLoaded[k] = true
	if d <= 0 {
		return
	}
	if t.measured[k] == nil {
		t.measured[k] = map[string]float64{}
	}
	t.measured[k][tier] = d.Seconds()
}

// offTier is the tier an Ollama model not in memory would load from.
func (t *weightTiers) offTier(model string) string {
	if t.everLoaded[modelKey(model)] {
		return schemas.TierPageCache
	}
	return schemas.TierDisk
}

// fill sets m's tier, tier_s, tier_measured and load_s from the tiers an
// engine model can fall to, each the measured time where there is one,
// else estimate[tier]. load_s is the load from where the weights sit; for
// a resident model, the load from the tier an unload or sleep leaves it in
// (fallTo), what giving it up would cost.
func (t *weightTiers) fill(m *schemas.ModelState, model, tier, fallTo string, estimate map[string]float64) {
	measured := t.measured[modelKey(model)]
	m.Tier = tier
	m.TierSeconds = make(map[string]float64, len(estimate))
	m.TierMeasured = nil
	for tr, est := range estimate {
		if s, ok := measured[tr]; ok {
			m.TierSeconds[tr] = s
			m.TierMeasured = append(m.TierMeasured, tr)
			continue
		}
		m.TierSeconds[tr] = est
	}
	slices.Sort(m.TierMeasured)
	from := tier
	if tier == schemas.TierHBM {
		from = fallTo
	}
	if s, ok := m.TierSeconds[from]; ok {
		m.LoadSeconds = s
	}
}

// ollamaTiers fills an Ollama model's tiers: it falls to the page cache
// (an unload), or sits on disk if never loaded here; guess is the
// unmeasured load. Callers hold w.mu.
func (w *Worker) ollamaTiers(m *schemas.ModelState, model string, guess float64) {
	e := &w.remote.engine
	tier := schemas.TierHBM
	if m.State == schemas.WeightCold {
		tier = e.tiers.offTier(model)
	}
	w.remote.engine.tiers.fill(m, model, tier, schemas.TierPageCache, map[string]float64{
		schemas.TierPageCache: guess,
		schemas.TierDisk:      guess,
	})
}

// isVLLM reports whether the engine is vLLM, by its metric names. Callers
// hold w.mu.
func (w *Worker) isVLLM() bool {
	return w.remote.scraped && w.remote.metrics.Engine == enginemetrics.EngineVLLM
}

// vllmTiers fills the worker's own model's state and tiers on a vLLM
// engine: asleep at level 1 it is sleeping in host memory, at level 2 cold
// in the page cache. Unmeasured wakes are the catalog's: the host tier's
// copy for level 1; for level 2 the host tier's fixed cost and the weights
// read at the page cache's speed, without the engine start the catalog's
// page_cache tier includes (the process stays up). Callers hold w.mu.
func (w *Worker) vllmTiers(m *schemas.ModelState) {
	t := &w.remote.engine.tiers
	switch t.sleepLevel {
	case openai.SleepOffload:
		m.State = schemas.WeightSleeping
	case openai.SleepDiscard:
		m.State = schemas.WeightCold
	}
	reload := w.replica.TierSeconds(schemas.TierPageCache)
	cat := catalog.Default()
	if host, ok := cat.Tier(schemas.TierHost); ok {
		if pc, ok := cat.Tier(schemas.TierPageCache); ok && pc.GBps > 0 {
			reload = host.FixedSeconds + w.replica.WeightBytes()/(pc.GBps*1e9)
		}
	}
	t.fill(m, w.servedName(), openai.SleepTier(t.sleepLevel), schemas.TierHost, map[string]float64{
		schemas.TierHost:      w.replica.TierSeconds(schemas.TierHost),
		schemas.TierPageCache: reload,
	})
}

// vllmWarmth carries out a warmth decision on a vLLM engine through its
// sleep mode: sleeping is level 1, cold level 2, hot a wake from whichever
// level it sleeps at; the engine's /is_sleeping is read back after. A
// sleep is refused while this worker has requests at the engine: vLLM's
// sleep aborts what is in flight. It returns the event's fields, or an
// error saying why nothing changed.
func (w *Worker) vllmWarmth(ctx context.Context, state string) (map[string]any, error) {
	r := w.remote
	w.mu.Lock()
	level, busy := r.engine.tiers.sleepLevel, r.running
	w.mu.Unlock()
	fields := map[string]any{"engine": "vllm"}
	switch state {
	case schemas.WeightSleeping, schemas.WeightCold:
		want := openai.SleepOffload
		if state == schemas.WeightCold {
			want = openai.SleepDiscard
		}
		if level == want {
			return nil, errors.New("already asleep at that level")
		}
		if busy > 0 {
			return nil, errors.New("requests running on the engine: vLLM's sleep would abort them")
		}
		if level != 0 {
			// From one level to the other: wake first, so the level-2
			// wake's reload is not skipped or the level-1 copy not lost.
			if _, err := r.client.Wake(ctx, level); err != nil {
				return nil, err
			}
		}
		if err := r.client.Sleep(ctx, want); err != nil {
			return nil, err
		}
		w.mu.Lock()
		r.engine.tiers.sleepLevel = want
		w.mu.Unlock()
		fields["sleep_level"], fields["tier"] = want, openai.SleepTier(want)
	case schemas.WeightHot:
		if level == 0 {
			return nil, errors.New("already awake")
		}
		d, err := w.wakeVLLM(ctx, level)
		if err != nil {
			return nil, err
		}
		fields["wake_s"], fields["tier"] = d.Seconds(), schemas.TierHBM
	default:
		return nil, errors.New("unknown warmth state")
	}
	asleep, err := r.client.IsSleeping(ctx)
	if err != nil {
		return nil, err
	}
	if want := state != schemas.WeightHot; asleep != want {
		w.sh.Log.Warn("vLLM's /is_sleeping disagrees with the command it answered", "state", state, "is_sleeping", asleep)
	}
	fields["is_sleeping"] = asleep
	return fields, nil
}

// wakeVLLM wakes the engine from level and records the wake's time as the
// measured load from that level's tier.
func (w *Worker) wakeVLLM(ctx context.Context, level int) (time.Duration, error) {
	r := w.remote
	d, err := r.client.Wake(ctx, level)
	if err != nil {
		return 0, err
	}
	w.mu.Lock()
	r.engine.tiers.sleepLevel = 0
	r.engine.tiers.noteLoad(w.servedName(), openai.SleepTier(level), d)
	w.mu.Unlock()
	return d, nil
}

// wakeForDispatch wakes a sleeping vLLM engine before a dispatch is
// forwarded to it, so the request waits for the wake rather than failing
// on a sleeping engine; the wake is measured and reported. Reports whether
// the engine is vLLM (the caller then does not treat it as Ollama).
func (w *Worker) wakeForDispatch(ctx context.Context, model string) bool {
	r := w.remote
	w.mu.Lock()
	vllm := w.isVLLM()
	level := r.engine.tiers.sleepLevel
	key := modelKey(model)
	need := vllm && level != 0 && !r.engine.loading[key]
	if need {
		r.engine.loading[key] = true
	}
	w.mu.Unlock()
	if !need {
		return vllm
	}
	d, err := w.wakeVLLM(ctx, level)
	w.mu.Lock()
	delete(r.engine.loading, key)
	w.mu.Unlock()
	if err != nil {
		w.sh.Log.Warn("wake the engine for a dispatch", "model", model, "err", err)
		return true
	}
	w.sh.Emit(schemas.Event{Kind: "weights", WorkerID: w.cfg.ID, Reason: "woken on the engine for a dispatch",
		Fields: map[string]any{"model": model, "state": schemas.WeightHot, "engine": "vllm", "from_tier": openai.SleepTier(level), "wake_s": d.Seconds()}})
	return true
}

// pendingSleepFor bounds how long a deferred sleep waits for the engine to
// fall idle: the controller repeats a decision it still wants.
const pendingSleepFor = time.Minute

// pendingSleepPoll is how often a deferred sleep looks for an idle engine.
const pendingSleepPoll = 50 * time.Millisecond

// pendingSleep is a simulated worker's sleep (or unload) the controller
// asked for while the engine ran sequences: it is carried out once they
// are done, as the simulator's sleepPending is, unless a hot command
// cancels it. Guarded by Worker.mu.
type pendingSleep struct {
	stop chan struct{}
}

// cancelPendingSleep drops a deferred sleep. Callers hold w.mu.
func (w *Worker) cancelPendingSleep() {
	if w.pending.stop != nil {
		close(w.pending.stop)
		w.pending.stop = nil
	}
}

// sleepWhenIdle defers moving the simulated engine's weights to state
// until it holds no work (running or waiting), for at most
// pendingSleepFor; the worker keeps serving meanwhile.
func (w *Worker) sleepWhenIdle(model, state, reason string) {
	w.mu.Lock()
	w.cancelPendingSleep()
	stop := make(chan struct{})
	w.pending.stop = stop
	w.mu.Unlock()
	go func() {
		tick := time.NewTicker(pendingSleepPoll)
		defer tick.Stop()
		deadline := time.NewTimer(pendingSleepFor)
		defer deadline.Stop()
		deferredAt := time.Now()
		for {
			select {
			case <-stop:
				return
			case <-deadline.C:
				w.mu.Lock()
				if w.pending.stop == stop {
					w.cancelPendingSleep()
				}
				w.mu.Unlock()
				w.sh.Log.Info("deferred warmth change dropped: the engine never fell idle", "state", state, "waited", pendingSleepFor)
				return
			case <-tick.C:
			}
			w.mu.Lock()
			if w.pending.stop != stop {
				w.mu.Unlock()
				return
			}
			err := errors.New("work queued")
			if !w.eng.HasWork() {
				err = w.eng.SetWeightState(state)
			}
			if err == nil {
				w.pending.stop = nil
			}
			w.mu.Unlock()
			if err != nil {
				continue
			}
			w.heartbeat()
			w.sh.Emit(schemas.Event{Kind: "weights", WorkerID: w.cfg.ID, Reason: reason,
				Fields: map[string]any{"model": model, "state": state, "deferred_s": time.Since(deferredAt).Seconds()}})
			return
		}
	}()
}
