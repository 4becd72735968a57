package placement

// Reason says why a worker was filtered out.
type Reason uint8

// Rejection reasons. The unresolvable ones (see Unresolvable) cannot change
// by waiting; the others are busy-now.
const (
	ReasonNone Reason = iota
	// Unresolvable for this request on this worker.
	ReasonExcluded            // a retry must avoid this worker
	ReasonDtypeUnsupported    // the GPU architecture cannot run the dtype (FP8 before Hopper)
	ReasonModelTooLarge       // the weights exceed the worker's total HBM
	ReasonCannotRun           // the cost model says this GPU cannot run the model (+Inf)
	ReasonDeadlineUnreachable // even without queueing or loading, the deadline is missed
	// Busy now; may clear.
	ReasonStale           // no heartbeat within the fleet's staleness bound
	ReasonDraining        // the worker is draining
	ReasonWouldPreempt    // not enough free KV blocks: running work would be preempted
	ReasonHBMBusy         // the model is not loaded and free HBM cannot take its weights
	ReasonPriorityReserve // the KV headroom left is reserved for higher classes
	ReasonDeadlineBusy    // queueing or loading here would miss the deadline
	// The request's own latency targets (the latency axis): a worker
	// predicted to miss one is turned down while another meets both; when
	// none does, the placer places on the best of them, priced (see
	// Decision.Relaxed), since a late first token is still an answer.
	ReasonTTFTTarget // the first token would come after the TTFT target
	ReasonTPOTTarget // the time per output token would exceed the TPOT target
	// ReasonRoleMismatch: the worker does not take the request's phase
	// (the phase axis): its role does not (schemas.RoleTakes), or a
	// split leg finds it without a link, or no transfer is priced from
	// the source's link to its own. Unresolvable for this phase only: an
	// aggregated request that finds only prefill and decode workers may
	// still be served split, which Place tries before it calls the
	// decision unresolvable.
	ReasonRoleMismatch
	NumReasons
)

var reasonNames = [NumReasons]string{
	"", "excluded", "dtype_unsupported", "model_too_large", "cannot_run", "deadline_unreachable",
	"stale", "draining", "would_preempt", "hbm_busy", "priority_reserve", "deadline_busy",
	"ttft_target", "tpot_target", "role_mismatch",
}

// String is the reason's stable name, used in events and metrics.
func (r Reason) String() string {
	if r < NumReasons {
		return reasonNames[r]
	}
	return "unknown"
}

// Unresolvable reports whether waiting cannot make this worker eligible
// for the request.
func (r Reason) Unresolvable() bool {
	return r >= ReasonExcluded && r <= ReasonDeadlineUnreachable || r == ReasonRoleMismatch
}

// Axis names for Options.Disabled.
const (
	AxisGPU      = "gpu"
	AxisHeadroom = "headroom"
	AxisKV       = "kv"
	AxisWarmth   = "warmth"
	AxisPriority = "priority"
	AxisLatency  = "latency"
	AxisWorkflow = "workflow"
	// AxisInterference prices the inter-token latency a placement's prefill
	// puts on the sequences already decoding on the worker.
	AxisInterference = "interference"
	// AxisPhase splits prefill from decode across workers (axis_phase.go).
	AxisPhase = "phase"
)

const (
	axGPU = iota
	axHeadroom
	axKV
	axWarmth
	axPriority
	axLatency
	axWorkflow
	axInterference
	axPhase
	numAxes
)

// Axes lists every axis name, in pipeline order.
var Axes = []string{AxisGPU, AxisHeadroom, AxisKV, AxisWarmth, AxisPriority, AxisLatency, AxisWorkflow, AxisInterference, AxisPhase}

var axisNames = [numAxes]string{AxisGPU, AxisHeadroom, AxisKV, AxisWarmth, AxisPriority, AxisLatency, AxisWorkflow, AxisInterference, AxisPhase}
