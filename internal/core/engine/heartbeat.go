package engine

import (
	"time"

	"github.com/switchyard-ai/switchyard/internal/core/perf"
	"github.com/switchyard-ai/switchyard/internal/core/tokens"
	"github.com/switchyard-ai/switchyard/schemas"
)

// HBMBytes reports the replica's device memory, in all its TP GPUs, and
// the part in use: the weights plus the occupied share of the KV pool the
// engine reserves (MemUtil of HBM less the weights, vLLM's
// gpu_memory_utilization). The live worker and the simulator both report
// this figure, so the headroom axis reads the same number in either.
func (e *Engine) HBMBytes() (total, used uint64) {
	total = uint64(e.rep.GPU.HBMBytes()) * uint64(e.rep.TP)
	weights := e.rep.WeightBytes()
	pool := max(0, float64(total)*e.cfg.MemUtil-weights)
	occupied := 1 - float64(e.kv.available())/float64(max(1, e.kv.total))
	return total, min(total, uint64(weights+pool*occupied))
}

// FillHeartbeat writes what a heartbeat says about this engine and its
// replica into hb: GPU, memory, KV cache, queue, rates and the model's
// weight state. The caller adds who it is (WorkerID, Pool, Backend), its
// sequence numbers, clock and counters. hb's maps and Models slice are
// reused when present, so a caller heartbeating often allocates nothing.
// This is the one heartbeat builder for a simulated GPU: the live worker
// and the simulator both call it.
func (e *Engine) FillHeartbeat(hb *schemas.Heartbeat) {
	st := e.State()
	g := e.rep.GPU
	total, used := e.HBMBytes()
	hb.GPU, hb.Arch, hb.TP = g.Name, g.Arch, e.rep.TP
	hb.Simulated = true
	hb.HBMTotalBytes, hb.HBMFreeBytes = total, total-used
	hb.KVBlocksTotal, hb.KVBlocksFree, hb.BlockSize = st.KVBlocksTotal, st.KVBlocksFree, tokens.BlockSize
	hb.Utilization, hb.TokensPerSec, hb.SpecDecode = st.Utilization, st.TokensPerSec, st.SpecDecode
	hb.Running, hb.Waiting, hb.QueuedTokens, hb.MaxBatch = st.Running, st.Waiting, st.QueuedTokens, st.MaxBatch
	hb.Prefilling, hb.StepCap = st.Prefilling, e.cfg.TargetStepCap
	hb.QueuedTokensByClass = st.ClassMap(hb.QueuedTokensByClass)
	hb.WaitingByClass = st.WaitingClassMap(hb.WaitingByClass)
	hb.KVBlocksByClass = st.KVClassMap(hb.KVBlocksByClass)
	hb.PricePerHour = e.rep.PricePerHour()
	// load_s is the time to serve from where the weights are (the router's
	// warmth axis and admission's moves read it so): the wake for a
	// sleeping replica, the full load for one still loading (FillHeartbeatAt
	// knows what is left), the load from its tier for a cold one; a hot one
	// advertises its cold load, what an unload would cost.
	load := e.rep.LoadSeconds(schemas.WeightCold)
	switch st.Weights {
	case schemas.WeightHot:
	case schemas.WeightLoading:
		load = e.rep.TierSeconds(e.loadFrom)
	default:
		load = e.rep.TierSeconds(e.tier)
	}
	m := schemas.ModelState{Name: e.rep.Model.Name, Dtype: e.rep.Dtype, State: st.Weights, LoadSeconds: load,
		Tier: e.tier, ContextLength: e.rep.Model.MaxContext}
	hb.Models = append(hb.Models[:0], m)
}

// FillHeartbeatAt is FillHeartbeat at a known time: a load whose time has
// passed is settled first, and a load in progress advertises what is
// left of it.
func (e *Engine) FillHeartbeatAt(hb *schemas.Heartbeat, now time.Time) {
	e.Settle(now)
	e.FillHeartbeat(hb)
	if e.weights == schemas.WeightLoading && len(hb.Models) > 0 {
		hb.Models[0].LoadSeconds = max(1e-3, e.loadUntil.Sub(now).Seconds())
	}
}

// CostUSD prices GPU-seconds spent on this replica: its hourly price is
// for all TP GPUs, and GPU-seconds count each of them.
func (e *Engine) CostUSD(gpuSeconds float64) float64 {
	return gpuSeconds / 3600 * e.rep.PricePerHour() / float64(max(1, e.rep.TP))
}

// AddParked lists a model parked beside the serving one (GPUs that change
// model) in hb: its weight state and tier, the load from that tier, and
// caps hb's free HBM at what the serving engine's reservation leaves (one
// engine holds the GPU at a time, vLLM's KV pool preallocated at
// perf.DefaultMemUtil), so a router turns a parked model's request away as
// hbm_busy instead of sending one the worker would refuse. The simulator
// and the live simulated worker both heartbeat parked models through it.
func AddParked(hb *schemas.Heartbeat, rep perf.Replica, tier string) {
	hb.Models = append(hb.Models, schemas.ModelState{Name: rep.Model.Name, Dtype: rep.Dtype, State: schemas.TierState(tier),
		Tier: tier, LoadSeconds: rep.TierSeconds(tier), ContextLength: rep.Model.MaxContext})
	reserved := uint64(min(float64(hb.HBMTotalBytes), float64(hb.HBMTotalBytes)*perf.DefaultMemUtil))
	hb.HBMFreeBytes = min(hb.HBMFreeBytes, hb.HBMTotalBytes-reserved)
}
