package sim

import (
	"fmt"
	"time"

	"github.com/switchyard-ai/switchyard/internal/core/engine"
	"github.com/switchyard-ai/switchyard/internal/core/perf"
	"github.com/switchyard-ai/switchyard/internal/core/routing"
	"github.com/switchyard-ai/switchyard/internal/core/slo"
	"github.com/switchyard-ai/switchyard/schemas"
)

// The simulated workers: each an internal/core/engine replica stepped in
// virtual time, taking dispatches after the dispatch latency, and sending
// the heartbeats and KV events the live worker sends.

type simWorker struct {
	id      string
	idx     int32
	pool    string
	eng     *engine.Engine
	rep     perf.Replica
	busy    bool
	last    engine.Step
	kvSeq   uint64
	hbSeq   uint64
	done    uint64
	busyGPU float64
	hb      schemas.Heartbeat
	kv      schemas.KVEvent
	fault   workerFault
	// running maps a request on this engine to its attempt, so a late
	// finish of an attempt the router re-placed is told apart.
	running map[int32]int32
	// deliveredAt is when each running request reached the engine.
	deliveredAt map[int32]int64
	// sleepPending: the controller put it to sleep while it ran
	// sequences; it sleeps once they are done (kick).
	sleepPending bool
	// role and link are what the heartbeat says of the worker's phases
	// and KV link (schemas.Heartbeat.Role, Link).
	role, link string
}

// newWorker builds one replica's engine.
func (r *runner) newWorker(gpu, model string, tp int, id, role, link string) (*simWorker, error) {
	if model == "" {
		model = r.cfg.Model
	}
	rep, err := perf.NewReplica(r.cfg.Catalog, gpu, model, r.cfg.Dtype, max(tp, 1))
	if err != nil {
		return nil, fmt.Errorf("sim: %w", err)
	}
	eng, err := engine.New(engine.Config{
		Replica: rep, MaxBatch: r.cfg.MaxBatch, TokenBudget: r.cfg.TokenBudget,
		KVBlocks: r.cfg.KVBlocks, Spec: engine.SpecConfig{Seed: uint64(r.cfg.Seed) + uint64(len(r.ws))},
		TargetStepCap: r.pol.EngineTargets,
	})
	if err != nil {
		return nil, fmt.Errorf("sim: %w", err)
	}
	w := &simWorker{id: id, idx: int32(len(r.ws)), pool: gpu, eng: eng, rep: rep,
		running: map[int32]int32{}, deliveredAt: map[int32]int64{}, role: role, link: link}
	r.ws = append(r.ws, w)
	r.byWID[w.id] = w.idx
	return w, nil
}

func (r *runner) buildFleet() error {
	seen := map[string]int{}
	for _, g := range r.cfg.GPUs {
		for i := 0; i < g.Count; i++ {
			// Pools of one GPU serving different models share a numbering.
			n := seen[g.GPU]
			seen[g.GPU]++
			if _, err := r.newWorker(g.GPU, g.Model, g.TP, fmt.Sprintf("%s-%02d", g.GPU, n), g.Role, r.cfg.linkOf(g)); err != nil {
				return err
			}
		}
	}
	// Heartbeats are staggered over one period, as independent workers'
	// tickers are; all workers announce themselves at t=0.
	period := int64(r.cfg.HeartbeatInterval)
	for i, w := range r.ws {
		r.heartbeat(w)
		r.h.push(period+period*int64(i)/int64(len(r.ws)), evHeartbeat, w.idx)
	}
	return nil
}

// deliver is a dispatch reaching its worker.
func (r *runner) deliver(i, attempt int32) {
	st := &r.reqs[i]
	if r.resolved(i) || st.attempt != attempt || st.worker < 0 {
		return
	}
	w := r.ws[st.worker]
	if w.fault.dead {
		return // lost with the worker; its breaker will notice
	}
	q := &r.tr.Requests[i]
	adm := &r.adm[i]
	if e := w.eng.RefuseModel(adm.Model, w.id); e != nil {
		r.finishError(w, i, e)
		return
	}
	if e := engine.RefuseLate(adm, at(r.now), w.id); e != nil {
		r.finishError(w, i, e)
		return
	}
	seq := engine.Sequence{
		ID: q.ID, PromptTokens: q.PromptTokens, BlockHashes: q.BlockHashes,
		MaxTokens: q.OutputTokens, Arrival: at(r.now),
		Priority: engine.PriorityOf(adm.Priority), Critical: adm.Priority == schemas.PriorityCritical,
		TPOTTarget: time.Duration(adm.TPOTTargetMs * float64(time.Millisecond)),
	}
	switch st.phase {
	case schemas.PhasePrefill:
		seq.PrefillOnly = true
	case schemas.PhaseDecode:
		// The pull: the source must still hold the KV (it is released to
		// this worker), else the leg fails back to the router.
		if e := r.pull(w, i); e != nil {
			r.legFailed(w, i, e)
			return
		}
		seq.Transferred = true
	}
	err := w.eng.Add(seq)
	if err != nil {
		r.finishError(w, i, schemas.Errf(schemas.CodeUnplaceable, "", "worker %s cannot run it: %v", w.id, err))
		return
	}
	w.running[i] = attempt
	w.deliveredAt[i] = r.now
	r.kick(w)
}

// finishError is a worker's error result: it resolves the request and
// releases it in the router, whose breaker learns from its code.
func (r *runner) finishError(w *simWorker, i int32, e *schemas.Error) {
	r.reqs[i].code = e.Code
	r.resolve(i, stFailed)
	r.apply(routing.Input{Kind: routing.InReleased, ID: r.tr.Requests[i].ID,
		Result: &routing.ResultSummary{Status: schemas.StatusFailed, Code: e.Code, WorkerID: w.id}})
}

// kick starts w's next step if it is idle and has work.
func (r *runner) kick(w *simWorker) {
	if w.sleepPending && !w.busy && !w.fault.dead && !w.eng.HasWork() {
		r.as.sleep(r, w)
		return
	}
	if w.busy || w.fault.dead || !w.eng.HasWork() {
		return
	}
	asleep := w.eng.Tier() == schemas.TierHost
	st := w.eng.Step(at(r.now))
	r.steps++
	if asleep && r.as != nil && w.eng.Tier() != schemas.TierHost {
		// Work placed on a sleeping replica wakes it (the router's warmth
		// axis priced the wake).
		r.as.stats.Wakes++
	}
	if st.Duration <= 0 && len(st.Finished) == 0 && len(st.Emitted) == 0 {
		return // nothing fits until something changes
	}
	w.busy = true
	w.last = st
	r.h.push(r.now+w.fault.stretch(st.Duration), evStepEnd, w.idx)
}

func (r *runner) stepEnd(w *simWorker) {
	w.busy = false
	if w.fault.dead {
		return
	}
	st := &w.last
	if len(st.Stored) > 0 {
		r.kvEvent(w, schemas.KVStored, st.Stored)
	}
	if len(st.Evicted) > 0 {
		r.kvEvent(w, schemas.KVEvicted, st.Evicted)
	}
	w.busyGPU += st.GPUSeconds
	for _, f := range st.Finished {
		r.finish(w, f)
	}
	r.kick(w)
}

func (r *runner) kvEvent(w *simWorker, kind string, hashes []uint64) {
	w.kvSeq++
	w.kv = schemas.KVEvent{WorkerID: w.id, Seq: w.kvSeq, Kind: kind, Hashes: hashes, At: at(r.now)}
	r.apply(routing.Input{Kind: routing.InKV, KV: &w.kv})
}

// finish is a worker's ok result for request f.ID. The first final result
// wins, as the live result ledger makes it: a finish of an attempt the
// router already re-placed or answered is dropped.
func (r *runner) finish(w *simWorker, f engine.Finished) {
	i, ok := r.byID[f.ID]
	if !ok {
		return
	}
	attempt := w.running[i]
	delivered := w.deliveredAt[i]
	delete(w.running, i)
	delete(w.deliveredAt, i)
	st := &r.reqs[i]
	st.gpuSec += f.GPUSeconds
	if r.resolved(i) || st.attempt != attempt || st.worker != w.idx {
		if f.Handoff {
			w.eng.ReleaseKV(f.ID) // nobody will pull it
		}
		return
	}
	if f.Handoff {
		r.handedOff(w, i, f)
		return
	}
	w.done++
	st.cached = f.CachedTokens
	st.preempt = int32(f.Preemptions)
	first := f.FirstTokenAt
	if st.phase == schemas.PhaseDecode {
		first = at(st.firstTokenAt)  // the prefill worker's first token
		st.cached = st.prefillCached // what the prompt found cached where it ran
	}
	ttft := first.Sub(at(st.submitAt))
	var itl time.Duration
	if f.OutputTokens > 1 {
		itl = f.FinishedAt.Sub(first) / time.Duration(f.OutputTokens-1)
	}
	st.ttft, st.itl = ttft.Seconds(), itl.Seconds()
	st.sloMet = slo.Met(slo.Observed{OK: true, TTFT: ttft, ITL: itl, Finished: f.FinishedAt}, slo.TargetOf(&r.adm[i]))
	r.resolve(i, stOK)
	r.apply(routing.Input{Kind: routing.InReleased, ID: f.ID, Result: &routing.ResultSummary{
		Status: schemas.StatusOK, WorkerID: w.id, WorkMs: float64(r.now-delivered) / 1e6,
		TTFTMs: float64(ttft) / 1e6, ITLMs: float64(itl) / 1e6}})
}

// heartbeat publishes w's state to the router core and the admitter's
// fleet view, built as the live worker builds it (engine.FillHeartbeat).
func (r *runner) heartbeat(w *simWorker) {
	if w.fault.silent {
		return
	}
	w.hbSeq++
	hb := &w.hb
	hb.WorkerID, hb.Pool, hb.Backend = w.id, w.pool, "sim"
	hb.Role, hb.Link = w.role, w.link
	hb.KVSeq, hb.Seq, hb.SentAt, hb.CompletedTotal = w.kvSeq, w.hbSeq, at(r.now), w.done
	hb.Draining = r.as != nil && r.as.draining(w.idx)
	w.eng.FillHeartbeatAt(hb, at(r.now))
	if r.as != nil {
		r.as.annotate(w, hb) // models parked on a GPU that changes model (shift.go)
	}
	r.view.Observe(*hb, at(r.now))
	r.apply(routing.Input{Kind: routing.InHeartbeat, Heartbeat: hb})
}
