package sim

// GPUs that change model in virtual time (Autoscale.ShiftModels): the
// controller's switch decisions (internal/core/control, shift.go) carried
// out on the simulated fleet as a worker with vLLM's sleep mode carries
// them out. The worker announces itself draining for the old model (so
// routers stop placing it there), finishes what it holds and every dispatch
// sent before that heartbeat, puts the old model to sleep in host memory
// (its KV cache dropped, as sleep level 1 drops it) and brings the new
// model's weights into HBM from the tier they sit in: a wake from host
// memory where it slept there before, else an engine start from the page
// cache or disk (Autoscale.ParkedTier: where the fleet's other models sit
// on each worker at the start). Its heartbeat lists the active model first
// and then every parked model with its tier and load time, which is what
// the controller prices the next switch by.
//
// One engine holds the GPU at a time: a parked model is not loadable on
// demand beside the active one, so the heartbeat's free HBM is what the
// active engine's reservation leaves (vLLM preallocates its KV pool at
// gpu_memory_utilization), and the router's headroom axis turns such a
// placement down as hbm_busy rather than sending a request the worker
// would refuse.

import (
	"errors"
	"fmt"

	"github.com/switchyard-ai/switchyard/internal/core/control"
	"github.com/switchyard-ai/switchyard/internal/core/engine"
	"github.com/switchyard-ai/switchyard/internal/core/perf"
	"github.com/switchyard-ai/switchyard/schemas"
)

// switchOrder is a switch under way on one worker.
type switchOrder struct {
	to *pool
	at int64
}

// shiftPools derives the pools of a fleet whose GPUs change model
// (control.ShiftPools): every GPU type (and TP) of the fleet × every model
// it serves, each bounded by that type's GPUs, their shared inventory.
func (r *runner) shiftPools(cc *control.Config) error {
	fleet := make([]control.ShiftReplica, 0, len(r.cfg.GPUs))
	for _, g := range r.cfg.GPUs {
		if control.FixedRole(g.Role) {
			return fmt.Errorf("sim: autoscale: shift models: pool %s has role %s; GPUs change model in pools of whole requests", g.GPU, g.Role)
		}
		m := g.Model
		if m == "" {
			m = r.cfg.Model
		}
		rep, err := perf.NewReplica(r.cfg.Catalog, g.GPU, m, r.cfg.Dtype, max(g.TP, 1))
		if err != nil {
			return fmt.Errorf("sim: autoscale: %w", err)
		}
		fleet = append(fleet, control.ShiftReplica{GPU: rep.GPU.Name, TP: rep.TP, Model: rep.Model.Name, Count: g.Count})
	}
	pools, inventory := control.ShiftPools(fleet)
	if len(pools) == len(inventory) {
		return fmt.Errorf("sim: autoscale: shift models: the fleet serves one model (%s); GPUs change model between two or more", fleet[0].Model)
	}
	for i := range pools {
		pools[i].Dtype = r.cfg.Dtype
	}
	cc.Pools, cc.Inventory, cc.ShiftModels = append(cc.Pools, pools...), inventory, true
	return nil
}

// stageModels parks every other model of the fleet on each initial worker
// at Autoscale.ParkedTier (control.ParkedModels).
func (a *autoscaler) stageModels(r *runner) error {
	tier, err := control.ParkedTier(a.cfg.ParkedTier)
	if err != nil {
		return fmt.Errorf("sim: autoscale: %w", err)
	}
	pools := make([]control.Pool, len(a.pools))
	reps := map[string]perf.Replica{}
	for k, pl := range a.pools {
		pools[k] = control.Pool{GPU: pl.rep.GPU.Name, TP: pl.rep.TP, Model: pl.rep.Model.Name}
		reps[control.PoolKey(pl.rep.GPU.Name, pl.rep.Model.Name)] = pl.rep
	}
	a.shelves = make([]*engine.Shelf, len(r.ws))
	for i, w := range r.ws {
		a.shelves[i] = r.newShelf(w.idx)
		for _, m := range control.ParkedModels(pools, w.rep.GPU.Name, w.rep.TP, w.rep.Model.Name) {
			if err := a.shelves[i].Park(reps[control.PoolKey(w.rep.GPU.Name, m)], tier); err != nil {
				return fmt.Errorf("sim: autoscale: %w", err)
			}
		}
	}
	return nil
}

// newShelf is the shelf of worker idx's parked models: an engine it makes
// for a model's first switch there is sized as the run sizes every engine,
// its speculation seeded by the worker.
func (r *runner) newShelf(idx int32) *engine.Shelf {
	return engine.NewShelf(engine.Config{
		MaxBatch: r.cfg.MaxBatch, TokenBudget: r.cfg.TokenBudget, KVBlocks: r.cfg.KVBlocks,
		Spec:          engine.SpecConfig{Seed: uint64(r.cfg.Seed) + uint64(idx) + 7919},
		TargetStepCap: r.pol.EngineTargets,
	})
}

// queuedByModel counts the requests admitted but not yet placed, per model.
func (a *autoscaler) queuedByModel(r *runner) map[string]int {
	if a.byModel == nil {
		a.byModel = map[string]int{}
	}
	clear(a.byModel)
	for i := range r.reqs {
		if r.reqs[i].status != stQueued {
			continue
		}
		m := r.adm[i].Model
		if m == "" {
			m = r.ws[0].rep.Model.Name
			if r.cfg.Model != "" {
				m = r.cfg.Model
			}
		}
		a.byModel[m]++
	}
	return a.byModel
}

// orderSwitch starts one switch: the worker drains its model at once (its
// draining heartbeat goes out now) and joins the new model's pool, counted
// there as a replica on its way.
func (a *autoscaler) orderSwitch(r *runner, sw control.SwitchDecision) {
	w := a.live(r, sw.Worker)
	if w == nil || a.switches[w.idx] != nil || w.rep.Model.Name != sw.From {
		return
	}
	pl := a.byKey[control.PoolKey(w.rep.GPU.Name, sw.To)]
	if pl == nil || !a.shelves[w.idx].Parked(pl.rep.Model.Name) {
		return
	}
	a.switches[w.idx] = &switchOrder{to: pl, at: r.now}
	a.poolOf[w.idx] = pl
	w.sleepPending = true // kick hands an idle worker to a.sleep, which finishes the switch
	r.heartbeat(w)
	// Dispatches sent before the draining heartbeat may still arrive: the
	// switch waits them out.
	r.h.push(r.now+int64(r.cfg.DispatchLatency)+1, evReady, -1-w.idx)
}

// switchPending reports whether worker i is draining for a switch.
func (a *autoscaler) switchPending(i int32) bool {
	return int(i) < len(a.switches) && a.switches[i] != nil
}

// finishSwitch completes w's switch once it holds no work and every
// dispatch sent before its draining heartbeat has arrived: the old model
// sleeps in host memory, the new one loads from its tier.
func (a *autoscaler) finishSwitch(r *runner, w *simWorker) {
	o := a.switches[w.idx]
	if o == nil || w.busy || w.eng.HasWork() || r.now-o.at <= int64(r.cfg.DispatchLatency) {
		return
	}
	ch, err := a.shelves[w.idx].Change(o.to.rep.Model.Name, w.eng, at(r.now))
	if errors.Is(err, engine.ErrRunning) {
		return // sequences still running: a later kick or beat retries
	}
	if err != nil {
		// orderSwitch checked the model is parked and the catalog built
		// its pool: unreachable unless the configuration changed under
		// the run.
		panic(fmt.Sprintf("sim: autoscale: switch: %v", err))
	}
	w.eng, w.rep = ch.Engine, ch.Replica
	w.sleepPending = false
	a.switches[w.idx] = nil
	a.stats.Switches++
	a.stats.SwitchSeconds += float64(r.now-o.at)/1e9 + ch.LoadSeconds
	if ch.From == schemas.TierHost {
		a.stats.WarmSwitches++
	}
	// The old model's KV is gone with its sleep: the router's index of
	// this worker is cleared, as a live engine's KV events clear it.
	r.kvEvent(w, schemas.KVCleared, nil)
	r.heartbeat(w)
}

// annotate adds to w's heartbeat the models parked on it, each with its
// tier and load time, and states its free HBM as the active engine's
// reservation leaves it (see the file comment).
func (a *autoscaler) annotate(w *simWorker, hb *schemas.Heartbeat) {
	if int(w.idx) < len(a.shelves) {
		a.shelves[w.idx].Annotate(hb)
	}
}

// switchEvent handles the control loop's switch events (evReady with a
// negative worker index, -1-idx).
func (a *autoscaler) switchEvent(r *runner, a32 int32) {
	if i := -1 - a32; int(i) < len(r.ws) {
		a.finishSwitch(r, r.ws[i])
	}
}
