package placement

// The placer's options: which axes run, their weights and prices, and
// the defaults a zero Options takes.

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
	// FP8Arches are the architectures with FP8 tensor cores that placement
	// trusts for FP8 weights (default hopper, blackwell, cdna3).
	FP8Arches []string
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
	// Reclaim lists the classes whose requests may count KV blocks held by
	// strictly lower classes as theirs to take, as the engine lets them
	// (see the headroom axis); default critical only. A nil map means the
	// default; an empty one, no class.
	Reclaim map[string]bool
	// HeadroomKnee is the KV fill above which preemption risk starts
	// (default 0.8).
	HeadroomKnee float64
	// PredictionError is the relative standard error of completion-time
	// predictions, used for P(miss) (default 0.25).
	PredictionError float64
	// Explain is how many of the cheapest candidates a Decision keeps with
	// their breakdowns (default 8).
	Explain int
	// FinishWeight scales how much a workflow's completed fraction raises
	// the value of its next step's time (default 3).
	FinishWeight float64
}

func (o *Options) fill() {
	if o.DefaultDtype == "" {
		o.DefaultDtype = "bf16"
	}
	if o.ReferenceGPU == "" {
		o.ReferenceGPU = "h100"
	}
	if o.FP8Arches == nil {
		o.FP8Arches = []string{"hopper", "blackwell", "cdna3"}
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
}
