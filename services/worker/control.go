package worker

import (
	"context"
	"fmt"

	"github.com/nats-io/nats.go"

	"github.com/switchyard-ai/switchyard/internal/core/control"
	"github.com/switchyard-ai/switchyard/schemas"
	"github.com/switchyard-ai/switchyard/services/svc"
)

// subscribeControl applies the controller's per-worker decisions to the
// engine: speculative decoding on/off (sy.ctl.spec.<id>), batch and token
// budgets (sy.ctl.budget.<id>), weight warmth (sy.ctl.warmth.<id>) and
// the role (sy.ctl.role.<id>, role.go), and answers a scaler's drain request (sy.rpc.drain.<id>).
// The engine decides what each setting means; this only moves bytes. The
// returned function unsubscribes.
func (w *Worker) subscribeControl() (func(), error) {
	var subs []*nats.Subscription
	stop := func() {
		for _, s := range subs {
			s.Unsubscribe()
		}
	}
	add := func(subject string, h nats.MsgHandler) error {
		s, err := w.sh.NC.Subscribe(subject, h)
		if err != nil {
			stop()
			return fmt.Errorf("control subscription %s: %w", subject, err)
		}
		subs = append(subs, s)
		return nil
	}
	if err := add(control.SpecSubject(w.cfg.ID), w.onSpec); err != nil {
		return nil, err
	}
	if err := add(control.BudgetSubject(w.cfg.ID), w.onBudget); err != nil {
		return nil, err
	}
	if err := add(control.WarmthSubject(w.cfg.ID), w.onWarmth); err != nil {
		return nil, err
	}
	if err := add(control.RoleSubject(w.cfg.ID), w.onRole); err != nil {
		return nil, err
	}
	if err := add(control.SwitchSubject(w.cfg.ID), w.onSwitch); err != nil { // switch.go
		return nil, err
	}
	if err := add(control.DrainSubject(w.cfg.ID), w.onDrain); err != nil {
		return nil, err
	}
	return stop, nil
}

func (w *Worker) onSpec(m *nats.Msg) {
	var c control.SpecMsg
	if err := svc.Decode(m.Header, m.Data, &c); err != nil {
		w.sh.Log.Warn("undecodable spec control", "err", err)
		return
	}
	if w.remote != nil {
		w.notApplied("speculative decoding", "on", c.On, "reason", c.Reason)
		return
	}
	w.mu.Lock()
	w.eng.SetSpecDecode(c.On)
	w.mu.Unlock()
	w.sh.Log.Info("speculative decoding switched", "on", c.On, "reason", c.Reason)
}

func (w *Worker) onBudget(m *nats.Msg) {
	var c control.BudgetMsg
	if err := svc.Decode(m.Header, m.Data, &c); err != nil {
		w.sh.Log.Warn("undecodable budget control", "err", err)
		return
	}
	if w.remote != nil {
		w.notApplied("batch and token budgets", "max_batch", c.MaxBatch, "token_budget", c.TokenBudget, "reason", c.Reason)
		return
	}
	w.mu.Lock()
	w.eng.SetBudgets(c.MaxBatch, c.TokenBudget)
	w.mu.Unlock()
	w.sh.Log.Info("budgets set", "max_batch", c.MaxBatch, "token_budget", c.TokenBudget, "reason", c.Reason)
}

// notApplied answers a controller setting a real engine does not take at
// run time (vLLM, SGLang and Ollama fix speculative decoding and batch
// limits at start): it used to be applied to the worker's unused
// simulated engine and logged as set. Logged once per kind at info, then
// at debug.
func (w *Worker) notApplied(what string, args ...any) {
	w.mu.Lock()
	first := !w.remote.notApplied[what]
	w.remote.notApplied[what] = true
	w.mu.Unlock()
	msg := what + " not applied: the engine takes it only at its own start"
	args = append(args, "server", w.remote.client.BaseURL)
	if first {
		w.sh.Log.Info(msg, args...)
		return
	}
	w.sh.Log.Debug(msg, args...)
}

func (w *Worker) onWarmth(m *nats.Msg) {
	var c control.WarmthMsg
	if err := svc.Decode(m.Header, m.Data, &c); err != nil {
		w.sh.Log.Warn("undecodable warmth control", "err", err)
		return
	}
	if w.remoteWarmth(c.Model, c.State, c.Reason) { // a real engine (engine.go)
		return
	}
	w.mu.Lock()
	w.cancelPendingSleep()
	err := w.eng.SetWeightState(c.State)
	w.mu.Unlock()
	if err != nil {
		if c.State != schemas.WeightHot {
			// Sequences arrived since the decision: serving them wins,
			// and the sleep waits for them (tiers.go), as the simulator's
			// does.
			w.sh.Log.Info("warmth change deferred until the engine's sequences finish", "state", c.State, "err", err)
			w.sleepWhenIdle(c.Model, c.State, c.Reason)
			return
		}
		w.sh.Log.Info("warmth change refused", "state", c.State, "err", err)
		return
	}
	// Heartbeat at once, as a real engine's worker does (remoteWarmth):
	// routers that still counted the weights hot would place a request on
	// them within the beat, which wakes a replica just put to sleep.
	w.heartbeat()
	w.sh.Emit(schemas.Event{Kind: "weights", WorkerID: w.cfg.ID, Reason: c.Reason, Fields: map[string]any{"model": c.Model, "state": c.State}})
}

// onDrain marks the worker draining and heartbeats at once, while it keeps
// consuming: routers stop placing on it, and whatever they dispatched
// before they heard still arrives and is served. The scaler stops the
// worker (which then finishes what it holds) only after a grace period.
func (w *Worker) onDrain(m *nats.Msg) {
	w.mu.Lock()
	w.draining = true
	w.mu.Unlock()
	w.heartbeat()
	if m.Reply != "" {
		m.Respond([]byte("draining"))
	}
	w.sh.Log.Info("draining on request: no new placements")
}

func (w *Worker) onCancel(msg *nats.Msg) {
	var c schemas.Cancel
	if err := svc.Decode(msg.Header, msg.Data, &c); err != nil {
		return
	}
	if w.remote != nil {
		// Logged either way, so a cancel that reached a running
		// generation is told apart from one that came before its dispatch.
		// (An Ollama engine can keep the slot of a stream aborted this way:
		// stall.go.)
		if w.cancelRemote(c.RequestID) {
			w.sh.Log.Info("cancel: the engine's generation is being stopped", "id", c.RequestID, "reason", c.Reason)
		} else {
			w.mu.Lock()
			w.bury(c.Tenant, c.RequestID, c.Reason, w.sh.Now())
			w.mu.Unlock()
			w.sh.Log.Info("cancel for a request not running here: kept in case its dispatch comes", "id", c.RequestID, "reason", c.Reason)
		}
		return
	}
	w.mu.Lock()
	j := w.inflight[c.RequestID]
	if j == nil || j.d.Admitted.Tenant != c.Tenant {
		w.bury(c.Tenant, c.RequestID, c.Reason, w.sh.Now())
		w.mu.Unlock()
		return
	}
	generated, cached, spent, _ := w.eng.Progress(c.RequestID)
	generated += j.resumed.tokens
	w.eng.Cancel(c.RequestID)
	delete(w.inflight, c.RequestID)
	w.mu.Unlock()
	w.sh.Emit(schemas.Event{Kind: "cancelled", RequestID: c.RequestID, Tenant: c.Tenant, WorkerID: w.cfg.ID, Reason: c.Reason,
		Fields: map[string]any{"gpu_seconds_spent": spent}})
	e := schemas.Errf(schemas.CodeCancelled, "", "cancelled: %s", c.Reason)
	res := svc.ErrorResult(c.RequestID, c.Tenant, j.d.Admitted.Priority, e, w.sh.Now())
	res.WorkerID, res.Simulated, res.GPUSeconds = w.cfg.ID, true, spent
	res.CostUSD = w.eng.CostUSD(spent)
	// What was streamed before the cancel was computed and is billed: the
	// usage says so, as OpenAI's does for an aborted stream.
	res.Usage = schemas.Usage{PromptTokens: j.d.Admitted.PromptTokens, CompletionTokens: generated, CachedTokens: cached}
	if j.tokens != nil {
		w.flush(j.tokens, true)
	}
	w.finish(context.Background(), j.d, j.msg, res)
}
