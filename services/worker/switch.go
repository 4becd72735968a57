package worker

// GPUs that change model, live (issue 30): the controller's switch
// decisions (internal/core/control, shift.go; sy.ctl.switch.<worker>)
// carried out by a worker on the simulated engine, as the simulator's
// workers carry them out in virtual time (internal/driver/sim, shift.go)
// and as a vLLM sleep-mode deployment would.
//
// A switch from model A to model B goes: the worker heartbeats draining at
// once, so routers stop placing on it; it keeps serving, for a grace of two
// heartbeat intervals, the dispatches routers sent before they heard, and
// then waits until it holds nothing (bounded by Config.DrainTimeout: past
// it the switch is refused and the worker serves A again, never handing
// work it holds to a model it does not serve). Then A's weights go to sleep
// in host memory — the engine's KV cache with them, as sleep level 1 drops
// it, so the routers' index of this worker is cleared — and B's are brought
// into HBM from the tier they sit in on this worker: a wake of about a
// second from host memory where B slept here before, else a load from the
// page cache or disk. Its heartbeats then list B first and every parked
// model after it, each with its tier and load time, which is what the
// controller prices the next switch by; the free HBM they state is what
// the serving engine's reservation leaves, so a router never places a
// parked model's request here (hbm_busy) to have it refused.
//
// A worker in front of Ollama carries the switch out on the engine
// (switch_engine.go): one Ollama process serves any model it has pulled,
// so after the same drain the worker unloads A (keep_alive 0: Ollama has
// no host-memory tier, so A's file is left in the page cache), loads B as
// a dispatch's load does (timed by the engine's load_duration) and serves
// B: its heartbeats list B hot first and A cold in page_cache with its
// tier time. A model the engine does not have is refused. vLLM serves the
// one model its process was started with, and SGLang's memory release is
// not mapped (tiers.go), so their switches are refused with an event
// saying so, as is one to an engine not yet identified.

import (
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/switchyard-ai/switchyard/internal/core/control"
	"github.com/switchyard-ai/switchyard/internal/core/engine"
	"github.com/switchyard-ai/switchyard/internal/core/perf"
	"github.com/switchyard-ai/switchyard/schemas"
	"github.com/switchyard-ai/switchyard/services/svc"
	"github.com/switchyard-ai/switchyard/subjects"
)

// Events a switch leaves: one made (from, to, the tier the new model's
// weights came from, the drain's and the load's seconds), one refused
// (with why).
const (
	EventSwitched      = "switched"
	EventSwitchRefused = "switch_refused"
)

// switchPoll is how often a draining switch looks whether the worker holds
// nothing yet.
const switchPoll = 20 * time.Millisecond

// shiftState is the worker's models other than the one it serves, and the
// switch under way (guarded by Worker.mu).
type shiftState struct {
	// shelf is the parked models (nil until one is parked): the switch
	// itself is the engine's, the simulator's too (engine.Shelf).
	shelf *engine.Shelf
	// order is the switch under way (nil: none); since is when it began.
	order *control.SwitchMsg
	since time.Time
	// target is a real engine's model to switch to, resolved when the
	// switch began (switch_engine.go; nil on the simulated engine).
	target *engineTarget
}

// Park stages model's weights on this worker at tier (host: asleep in
// host memory; page_cache, disk or remote: files only), so its heartbeats
// list the model and the controller can price a switch to it. Call it
// before Run. Only the simulated engine parks models.
func (w *Worker) Park(model, tier string) error {
	if w.remote != nil || w.cfg.Instant {
		// A real engine's other models are the ones it has (Ollama's
		// /api/tags, listed by its heartbeats); none is staged here.
		return fmt.Errorf("worker %s: park %s: only the simulated engine parks models (%s backend)", w.cfg.ID, model, w.backendName())
	}
	rep, err := perf.NewReplica(w.cfg.Catalog, w.cfg.GPU, model, w.cfg.Dtype, w.cfg.TP)
	if err != nil {
		return fmt.Errorf("worker %s: park %s: %w", w.cfg.ID, model, err)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if strings.EqualFold(rep.Model.Name, w.replica.Model.Name) {
		return fmt.Errorf("worker %s: park %s: it is the model this worker serves", w.cfg.ID, model)
	}
	if w.shelf().Parked(rep.Model.Name) {
		return fmt.Errorf("worker %s: park %s: %s is parked here already", w.cfg.ID, model, rep.Model.Name)
	}
	if err := w.shelf().Park(rep, tier); err != nil {
		return fmt.Errorf("worker %s: %w", w.cfg.ID, err)
	}
	return nil
}

// shelf is the worker's parked models, made on first use: an engine it
// makes for a model's first switch here is sized as New sizes the worker's
// own. Callers hold w.mu.
func (w *Worker) shelf() *engine.Shelf {
	if w.shift.shelf == nil {
		w.shift.shelf = engine.NewShelf(engine.Config{MaxBatch: w.cfg.MaxBatch, TargetStepCap: true})
	}
	return w.shift.shelf
}

// Switching reports the model a switch under way moves this worker to
// ("" when none).
func (w *Worker) Switching() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.shift.order == nil {
		return ""
	}
	return w.shift.order.To
}

// Model is the model the worker serves now.
func (w *Worker) Model() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.replica.Model.Name
}

// annotateShift adds to a simulated worker's heartbeat its switch (it says
// draining while one is under way) and the models parked on it, each with
// its tier and load time, and states its free HBM as the serving engine's
// reservation leaves it (see the file comment). Callers hold w.mu.
func (w *Worker) annotateShift(hb *schemas.Heartbeat) {
	if w.shift.order != nil {
		hb.Draining = true
	}
	if w.shift.shelf.Len() == 0 {
		return
	}
	// A wake in progress is settled by now and says what is left of it,
	// so the controller sees the switch end when it ends, work or none.
	w.eng.FillHeartbeatAt(hb, w.clock.now(w.sh.Now()))
	w.shift.shelf.Annotate(hb)
}

// onSwitch takes the controller's switch command (sy.ctl.switch.<id>).
func (w *Worker) onSwitch(m *nats.Msg) {
	var c control.SwitchMsg
	if err := svc.Decode(m.Header, m.Data, &c); err != nil {
		w.refuseSwitch(c, "undecodable switch command: "+err.Error())
		return
	}
	w.startSwitch(c)
}

// startSwitch begins a switch, or refuses it with an event saying why,
// and reports whether it began.
func (w *Worker) startSwitch(c control.SwitchMsg) bool {
	if c.Worker != "" && c.Worker != w.cfg.ID {
		w.refuseSwitch(c, fmt.Sprintf("the command names worker %q", c.Worker))
		return false
	}
	if w.cfg.Instant && w.remote == nil {
		w.refuseSwitch(c, fmt.Sprintf("not supported by this engine: the %s backend serves the one model it was started with", w.backendName()))
		return false
	}
	w.mu.Lock()
	var why string
	if w.remote != nil {
		why = w.engineSwitchRefusal(c) // switch_engine.go
	} else {
		why = w.switchRefusal(c)
	}
	if why == "" {
		// Resolved by the refusal check: a model not parked here is staged
		// at the tier the controller priced it from, a real engine's
		// target is named.
		cc := c
		w.shift.order, w.shift.since = &cc, time.Now()
	}
	w.mu.Unlock()
	if why != "" {
		w.refuseSwitch(c, why)
		return false
	}
	// Draining at once: routers stop placing on this worker.
	w.heartbeat()
	w.sh.Log.Info("switching model: draining", "from", c.From, "to", c.To, "reason", c.Reason)
	go w.carrySwitch(c)
	return true
}

// switchRefusal is why a switch cannot begin ("" when it can); a model to
// switch to that is not parked here is staged at the command's tier.
// Callers hold w.mu.
func (w *Worker) switchRefusal(c control.SwitchMsg) string {
	if why := w.switchStateRefusal(c, strings.EqualFold); why != "" {
		return why
	}
	if w.shift.shelf.Parked(c.To) {
		return ""
	}
	rep, err := perf.NewReplica(w.cfg.Catalog, w.cfg.GPU, c.To, w.cfg.Dtype, w.cfg.TP)
	if err != nil {
		return fmt.Sprintf("model %q cannot run here: %v", c.To, err)
	}
	tier := c.FromTier
	if tier == "" {
		tier = schemas.TierDisk
	}
	if err := w.shelf().Park(rep, tier); err != nil {
		return fmt.Sprintf("model %s is not parked here and the command's tier %q is not one its weights can load from", c.To, c.FromTier)
	}
	return ""
}

// switchStateRefusal is why the worker's own state refuses a switch, on
// any engine ("" when it does not): one under way, the worker stopping,
// a command for a model it does not serve or for the one it serves; same
// says whether two model names are one model.
// Callers hold w.mu.
func (w *Worker) switchStateRefusal(c control.SwitchMsg, same func(a, b string) bool) string {
	serving := w.replica.Model.Name
	switch {
	case w.shift.order != nil:
		return fmt.Sprintf("a switch to %s is under way", w.shift.order.To)
	case w.draining:
		return "the worker is draining to stop"
	case !same(c.From, serving):
		return fmt.Sprintf("the worker serves %s, not %s", serving, c.From)
	case same(c.To, serving):
		return fmt.Sprintf("the worker already serves %s", serving)
	}
	return ""
}

// switchGrace is how long after its draining heartbeat a switching worker
// still expects dispatches routers sent before they heard: that heartbeat
// is sent at once, and one more interval covers a lost one.
func (w *Worker) switchGrace() time.Duration { return 2 * w.cfg.HeartbeatInterval }

// carrySwitch waits out the grace and the work the worker holds, then
// changes the model; work still held past Config.DrainTimeout refuses
// the switch, and so does the worker stopping.
func (w *Worker) carrySwitch(c control.SwitchMsg) {
	start := time.Now()
	time.Sleep(w.switchGrace())
	bound := start.Add(w.cfg.DrainTimeout)
	for {
		w.mu.Lock()
		stopping := w.draining
		busy := len(w.inflight) + len(w.held)
		if w.remote != nil {
			busy += len(w.remote.msgs) // the generations at the engine
		}
		if !stopping && busy == 0 && !w.eng.HasWork() {
			drained := time.Since(start)
			var from string
			var load float64
			var err error
			if w.remote != nil {
				// The engine's unload and load take seconds: not under
				// the lock. The heartbeat still says draining.
				w.mu.Unlock()
				from, load, err = w.changeEngineModel(c)
			} else {
				from, load, err = w.changeModel()
				w.mu.Unlock()
			}
			if err != nil {
				w.abortSwitch(c, err.Error())
				return
			}
			w.switched(c, from, load, drained)
			return
		}
		w.mu.Unlock()
		switch {
		case stopping:
			w.abortSwitch(c, "the worker is stopping")
			return
		case time.Now().After(bound):
			w.abortSwitch(c, fmt.Sprintf("%d requests still held after %s; the worker keeps serving %s", busy, w.cfg.DrainTimeout, c.From))
			return
		}
		time.Sleep(switchPoll)
	}
}

// changeModel puts the serving model to sleep in host memory and starts
// bringing the switch's model into HBM from its tier (engine.Shelf): it
// returns that tier and the load's simulated seconds. Callers hold w.mu
// and have checked the worker holds nothing.
func (w *Worker) changeModel() (string, float64, error) {
	ch, err := w.shift.shelf.Change(w.shift.order.To, w.eng, w.clock.now(w.sh.Now()))
	if err != nil {
		return "", 0, err
	}
	w.eng, w.replica = ch.Engine, ch.Replica
	w.shift.order = nil
	// The old model's KV went with its sleep: the routers' index of this
	// worker is cleared, as the simulator's switch clears it.
	w.clearKVIndex()
	return ch.From, ch.LoadSeconds, nil
}

// clearKVIndex tells routers this worker's KV cache is gone (KVCleared):
// a switch's old model took it with it. Callers hold w.mu.
func (w *Worker) clearKVIndex() {
	w.kvSeq++
	e := schemas.KVEvent{V: schemas.Version, WorkerID: w.cfg.ID, Seq: w.kvSeq, Kind: schemas.KVCleared, At: w.sh.Now()}
	if m, err := svc.Encode(subjects.KV(w.cfg.ID), schemas.Msgpack, e, ""); err == nil {
		w.sh.NC.PublishMsg(m)
	}
}

// switched heartbeats the new model and records the switch.
func (w *Worker) switched(c control.SwitchMsg, from string, load float64, drain time.Duration) {
	w.heartbeat()
	w.sh.Emit(schemas.Event{Kind: EventSwitched, WorkerID: w.cfg.ID, Reason: c.Reason,
		Fields: map[string]any{"from": c.From, "to": c.To, "from_tier": from, "load_s": load, "drain_s": drain.Seconds(), "priced_s": c.Seconds}})
	w.sh.Log.Info("switched model", "from", c.From, "to", c.To, "from_tier", from, "load_s", load, "drain", drain)
}

// abortSwitch ends a switch that cannot finish: the worker stops saying
// draining (unless it is stopping) and keeps its model.
func (w *Worker) abortSwitch(c control.SwitchMsg, why string) {
	w.mu.Lock()
	w.shift.order, w.shift.target = nil, nil
	w.mu.Unlock()
	w.heartbeat()
	w.refuseSwitch(c, why)
}

func (w *Worker) refuseSwitch(c control.SwitchMsg, why string) {
	w.sh.Log.Warn("switch refused", "from", c.From, "to", c.To, "why", why, "reason", c.Reason)
	w.sh.Emit(schemas.Event{Kind: EventSwitchRefused, WorkerID: w.cfg.ID, Reason: why,
		Fields: map[string]any{"from": c.From, "to": c.To, "controller_reason": c.Reason}})
}
