package placement

import (
	"time"

	"github.com/switchyard-ai/switchyard/internal/core/catalog"
	"github.com/switchyard-ai/switchyard/schemas"
)

// The placer's options: which axes run, their weights and prices, and
// the defaults a zero Options takes.

// DefaultChunkTokens is Options.ChunkTokens's default, vLLM's
// max_num_batched_tokens for chunked prefill (8,192), and so
// Options.SplitMinUncached's.
const DefaultChunkTokens = 8192

// Options configures a Placer. Zero values take the documented defaults.
type Options struct {
	// Disabled turns axes off by name (the Axis* constants) for ablations.
	// A disabled axis contributes no filter and a neutral term: the placer
	// behaves as if it could not see that information. The GPU axis's
	// capability filters (dtype support, model fits) stay on, since
	// without them requests would be sent where they cannot run at all.
	Disabled map[string]bool
	// DefaultDtype is used when a request names none (default "bf16").
	DefaultDtype string
	// WeightBytes returns the model's weight size in bytes at dtype, 0 when
	// unknown (the fits-in-HBM and HBM-headroom checks are then skipped).
	WeightBytes func(model, dtype string) uint64
	// ReferenceGPU is the GPU every worker is assumed to be when the GPU
	// axis is disabled (default "h100").
	ReferenceGPU string
	// Catalog is where a worker's GPU architecture and FP8 support are
	// looked up (default catalog.Default()): the one table the cost model
	// reads too, so a worker the roofline can cost in FP8 (an L4 or L40S)
	// is one placement lets run FP8 weights.
	Catalog *catalog.Catalog
	// Targets are each class's default TTFT and TPOT targets, for requests
	// that carry none of their own (default DefaultTargets).
	Targets map[string]ClassTargets
	// ChunkTokens is the engine's prefill token budget per step (default
	// 8192, vLLM's max_num_batched_tokens and internal/core/engine's
	// default): a prompt prefills in chunks of it, each sharing its step
	// with every decode on the worker.
	ChunkTokens int
	// NeighbourTokens is the output tokens a sequence already on a worker
	// is assumed to spread a stall over when the interference axis prices
	// it (default 512; heartbeats do not say how long each sequence's
	// output is, and slo.Met averages its time per token over all of it).
	// At 256, about one chat turn, the axis crowded interactive prefills
	// off critical-heavy workers under 12× overload until their router
	// queue wait p90 doubled (TestPriorityUnderOverload: 4.1 s at 512,
	// 8.7 s at 256); 512 and 256 measured the same capacity on the mixed
	// fleet, Mooncake conversation and agentic-overload.
	NeighbourTokens int
	// ValueOfTime is USD per second of predicted completion time, per
	// priority class.
	ValueOfTime map[string]float64
	// MissPenalty is the USD lost when a request misses its deadline, per
	// priority class.
	MissPenalty map[string]float64
	// KVCeiling is the highest KV-cache fill (0..1] a class may push a
	// worker to, keeping headroom for higher classes.
	KVCeiling map[string]float64
	// QueueCeiling is the most predicted queueing, in seconds, a class may
	// find on a worker and still be placed there; a class without an entry
	// has no ceiling. Work over it waits in the router's class queue, where
	// higher classes overtake it, instead of in the worker's first-come
	// first-served prefill queue, where they cannot.
	QueueCeiling map[string]float64
	// QueueCeilingYields lists the classes whose workflow steps' queue
	// ceiling yields to their own TTFT target: such a step joins a worker
	// over the ceiling when its first token is still predicted within its
	// target there, and waits in the router only when it is not (default
	// interactive; a nil map means the default, an empty one no class).
	// See the priority axis and DefaultQueueCeilingYields.
	QueueCeilingYields map[string]bool
	// QueueCeilingYieldsUnder is, per class, the prompt size in tokens at
	// or under which a request outside a workflow joins a worker over its
	// class's queue ceiling wherever its first token is still predicted
	// within its target there and the worker's batch keeps half its slots
	// for higher classes (see firstTokenInTime). Such a prompt's prefill
	// fits one step's chunk, so once started it cannot run ahead of a
	// higher class's waiting prefill for more than a step; held in the
	// router behind the ceiling instead, a short standard or batch prompt
	// waits for the long ones to drain and misses a target it could have
	// met. Workflow steps keep the ceiling: yielding them cost
	// agentic-overload its high bar. Nor does a prompt yield while a
	// higher class waits in the router (Request.HigherWaiting): it would
	// take the capacity that class is held for. Nil (the default) yields
	// for no class: the policy "switchyard-short-yield" sets interactive,
	// standard and batch to ChunkTokens. Off by default: under autoscaling
	// the demand it moves out of the router's queue reaches the controller
	// only a heartbeat later (see docs/benchmarks.md, "Short prompts past
	// the queue ceiling" and the sections after it).
	QueueCeilingYieldsUnder map[string]int
	// Reclaim lists the classes whose requests may count KV blocks held by
	// strictly lower classes as theirs to take, as the engine lets them
	// (see the headroom axis); default critical only. A nil map means the
	// default; an empty one, no class.
	Reclaim map[string]bool
	// SharedPrefill lists the classes whose queue wait, on a worker whose
	// engine shares its steps among the prompts it prefills
	// (fleet.Worker.StepCap), is priced as that sharing runs rather than
	// first come, first served (see queueTerm and sharedQueue); default
	// none. The policy "switchyard-shared-queue" sets standard and batch
	// (see docs/benchmarks.md, "The shared prefill queue").
	SharedPrefill map[string]bool
	// HeadroomKnee is the KV fill above which preemption risk starts
	// (default 0.8).
	HeadroomKnee float64
	// PredictionError is the relative standard error of completion-time
	// predictions, used for P(miss) (default 0.25).
	PredictionError float64
	// PhaseError, when set, overrides PredictionError for one phase of
	// one GPU kind: keyed by PhaseKey (GPU, "ttft" or "tpot"), it is the
	// relative standard error of that prediction there, as learned from
	// results (observed ÷ predicted). Missing keys take PredictionError.
	PhaseError map[string]float64
	// Explain is how many of the cheapest candidates a Decision keeps with
	// their breakdowns (default 8).
	Explain int
	// FinishWeight scales how much a workflow's completed fraction raises
	// the value of its next step's time (default 3).
	FinishWeight float64
	// Split is whether Place may split a request's prefill from its
	// decode across two workers (the phase axis): SplitAuto (the default,
	// "") weighs the split against the aggregated placement per request,
	// SplitOff never splits. It splits only with a CostModel that
	// implements TransferCost; Disabled[AxisPhase] is SplitOff too.
	Split string
	// SplitMinUncached is the fewest prompt tokens left uncached on the
	// aggregated choice for a split to be weighed at all (default
	// ChunkTokens, one step's prefill budget): a prefill that fits in one
	// chunk stretches its neighbours' decode by one step, which the
	// interference axis already prices where it lands, while splitting it
	// pays a transfer, holds its KV twice for a moment and costs a second
	// placement. Prompts longer than a step stall the decodes beside them
	// step after step — the "heavy ITL penalty" disaggregation exists for.
	// (At 1,024 the Azure code trace, prompts up to 7.4k tokens, split
	// 148 requests at 4× and lost a critical one; it should not split at
	// all.) A request no aggregated worker can take is weighed whatever
	// its length.
	SplitMinUncached int
}

// The Options.Split modes.
const (
	SplitAuto = "auto"
	SplitOff  = "off"
)

func (o *Options) fill() {
	if o.DefaultDtype == "" {
		o.DefaultDtype = "bf16"
	}
	if o.ReferenceGPU == "" {
		o.ReferenceGPU = "h100"
	}
	if o.Catalog == nil {
		o.Catalog = catalog.Default()
	}
	if o.Targets == nil {
		o.Targets = DefaultTargets
	}
	if o.ChunkTokens <= 0 {
		o.ChunkTokens = DefaultChunkTokens
	}
	if o.NeighbourTokens <= 0 {
		o.NeighbourTokens = 512
	}
	if o.ValueOfTime == nil {
		o.ValueOfTime = DefaultValueOfTime
	}
	if o.MissPenalty == nil {
		o.MissPenalty = DefaultMissPenalty
	}
	if o.KVCeiling == nil {
		o.KVCeiling = DefaultKVCeiling
	}
	if o.QueueCeiling == nil {
		o.QueueCeiling = DefaultQueueCeiling
	}
	if o.QueueCeilingYields == nil {
		o.QueueCeilingYields = DefaultQueueCeilingYields
	}
	if o.Reclaim == nil {
		o.Reclaim = DefaultReclaim
	}
	if o.HeadroomKnee <= 0 || o.HeadroomKnee >= 1 {
		o.HeadroomKnee = 0.8
	}
	if o.PredictionError <= 0 {
		o.PredictionError = 0.25
	}
	if o.Explain <= 0 {
		o.Explain = 8
	}
	if o.FinishWeight <= 0 {
		o.FinishWeight = 3
	}
	if o.Split == "" {
		o.Split = SplitAuto
	}
	if o.SplitMinUncached <= 0 {
		o.SplitMinUncached = o.ChunkTokens
	}
}

// ClassTargets is a class's default latency objective: the first token
// within TTFTBase + PerPromptToken × prompt tokens of submission, and TPOT
// per output token after it.
type ClassTargets struct {
	TTFTBase, PerPromptToken, TPOT time.Duration
}

// DefaultTargets are loadgen's class SLOs (loadgen/traces.DefaultSLOs),
// which every trace and scenario of docs/benchmarks.md carries on its
// requests: a request that names no target is held to its class's.
var DefaultTargets = map[string]ClassTargets{
	schemas.PriorityCritical:    {TTFTBase: 1 * time.Second, PerPromptToken: 100 * time.Microsecond, TPOT: 50 * time.Millisecond},
	schemas.PriorityInteractive: {TTFTBase: 2 * time.Second, PerPromptToken: 100 * time.Microsecond, TPOT: 75 * time.Millisecond},
	schemas.PriorityStandard:    {TTFTBase: 5 * time.Second, PerPromptToken: 200 * time.Microsecond, TPOT: 100 * time.Millisecond},
	schemas.PriorityBatch:       {TTFTBase: 30 * time.Second, PerPromptToken: 500 * time.Microsecond, TPOT: 200 * time.Millisecond},
}

// PhaseKey is the Options.PhaseError key of one GPU kind's phase.
func PhaseKey(gpu, phase string) string { return gpu + "/" + phase }

// The phases PhaseError is keyed by.
const (
	PhaseTTFT = "ttft"
	PhaseTPOT = "tpot"
)
