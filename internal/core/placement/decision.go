package placement

import (
	"time"

	"github.com/switchyard-ai/switchyard/internal/core/fleet"
	"github.com/switchyard-ai/switchyard/internal/core/tokens"
	"github.com/switchyard-ai/switchyard/schemas"
)

// What placement is asked and what it answers: the request as placement
// sees it, the cost terms of a candidate, and the decision with every
// rejection and its reason.

// Request is what placement needs to know about one admitted request.
type Request struct {
	ID       string
	Tenant   string
	Model    string
	Dtype    string // "" means Options.DefaultDtype
	Priority string // one of schemas.Priorities; "" means standard
	// PromptTokens and OutputTokens size the work; OutputTokens is the
	// expected (or max) completion length.
	PromptTokens, OutputTokens int
	// BlockHashes are the prompt's chained KV block hashes.
	BlockHashes []uint64
	// Deadline is the request's absolute deadline; zero means none.
	Deadline time.Time
	// Workflow places the request in a multi-step workflow; nil if none.
	Workflow *schemas.Workflow
	// WorkflowDeadline is the workflow's absolute deadline (its first
	// step's submission plus Workflow.DeadlineMs); zero means none.
	WorkflowDeadline time.Time
	// Exclude lists workers a retry must avoid.
	Exclude []string
	// TTFTTarget and TPOTTarget are the request's latency objective: the
	// first token within TTFTTarget of Submitted, and a mean time per
	// output token after it within TPOTTarget (as internal/core/slo judges
	// them). Zero takes the class's default (Options.Targets).
	TTFTTarget, TPOTTarget time.Duration
	// Submitted is when the request was submitted, which TTFTTarget
	// counts from; zero means the time it is placed.
	Submitted time.Time
	// HardDeadline, when set, is the deadline past which the request is
	// refused (deadline_unreachable, deadline_busy), later than Deadline:
	// a workflow step's Deadline is its share of the workflow's when
	// admission narrowed it so (workflow.StepDeadline), and missing that
	// share is priced, not refused (see the latency axis); its hard
	// deadline is the client's own, or the workflow's. Zero means
	// Deadline.
	HardDeadline time.Time
	// Phase, when set, asks for one leg of a disaggregated request
	// (schemas.PhasePrefill or PhaseDecode): only workers whose role
	// takes it, and that have a link, are candidates. A decode leg's
	// prompt arrives as KV from Source over its link rather than being
	// prefilled (the phase axis). PromptTokens and OutputTokens stay the
	// whole request's: a prefill leg is priced for its first token, a
	// decode leg for the OutputTokens-1 after it.
	Phase string
	// Source is, for a decode leg, the prefill worker holding the KV
	// (its fleet.Worker.Link is where the transfer starts).
	Source string
	// HigherWaiting is how many requests of classes above Priority wait
	// in the router's queue as this one is placed (the router core sets
	// it; zero where unknown), of any model: the queue keeps no count per
	// model, so on a multi-model fleet a higher class held for one model
	// stops another model's short prompts yielding too. A short prompt
	// yields past its class's queue ceiling (Options.QueueCeilingYieldsUnder)
	// only when none do.
	HigherWaiting int
}

// FromAdmitted builds a Request from the admitter's envelope. The expected
// output length is the request's max_tokens; workflowStart is when the
// workflow's first step was submitted (zero if unknown).
func FromAdmitted(a *schemas.Admitted, dtype string, workflowStart time.Time) Request {
	r := Request{
		ID: a.Request.ID, Tenant: a.Tenant, Model: a.Model, Dtype: dtype,
		Priority: a.Priority, PromptTokens: a.PromptTokens, OutputTokens: a.Request.MaxTokens,
		BlockHashes: a.BlockHashes, Deadline: a.Deadline, Workflow: a.Request.Workflow,
		Exclude: a.ExcludeWorkers, Submitted: a.SubmittedAt,
		TTFTTarget: msDuration(a.TTFTTargetMs), TPOTTarget: msDuration(a.TPOTTargetMs),
	}
	if w := a.Request.Workflow; w != nil && w.DeadlineMs > 0 && !workflowStart.IsZero() {
		r.WorkflowDeadline = workflowStart.Add(time.Duration(w.DeadlineMs) * time.Millisecond)
		// The step's own deadline may be its split of the workflow's: it
		// is refused only past the client's own deadline, or without one
		// past the workflow's.
		hard := clientDeadline(a)
		if hard.IsZero() {
			hard = r.WorkflowDeadline
		}
		if !a.Deadline.IsZero() && hard.After(a.Deadline) {
			r.HardDeadline = hard
		}
	}
	return r
}

// clientDeadline is the deadline the client's request itself set
// (deadline_ms from submission, or an absolute deadline, the earlier),
// zero for none: what admission's own deadline was before a workflow split
// narrowed it.
func clientDeadline(a *schemas.Admitted) time.Time {
	var d time.Time
	if ms := a.Request.DeadlineMs; ms > 0 && !a.SubmittedAt.IsZero() {
		d = a.SubmittedAt.Add(time.Duration(ms) * time.Millisecond)
	}
	if at := a.Request.Deadline; at != nil && !at.IsZero() && (d.IsZero() || at.Before(d)) {
		d = *at
	}
	return d
}

// msDuration turns the envelope's milliseconds into a Duration.
func msDuration(ms float64) time.Duration {
	if !(ms > 0) {
		return 0
	}
	return time.Duration(ms * float64(time.Millisecond))
}

// Terms is one candidate's cost breakdown; see the package doc for the
// formula. Seconds are predictions for this request on this worker.
type Terms struct {
	QueueSeconds float64 `json:"queue_s"`
	// DelaySeconds is the delay this request imposes on the work already
	// on the worker (others' seconds, summed): see queueTerm.
	DelaySeconds   float64 `json:"delay_s"`
	LoadSeconds    float64 `json:"load_s"`
	PrefillSeconds float64 `json:"prefill_s"`
	// SavedSeconds is the prefill time the cached prefix saves; it is
	// already left out of PrefillSeconds and is reported to explain it.
	SavedSeconds      float64 `json:"saved_s"`
	DecodeSeconds     float64 `json:"decode_s"`
	PreemptSeconds    float64 `json:"preempt_s"`
	CompletionSeconds float64 `json:"completion_s"`
	// SlackSeconds is the time left before the effective deadline after
	// the predicted completion; +Inf without a deadline.
	SlackSeconds float64 `json:"slack_s"`
	ValueOfTime  float64 `json:"value_of_time_usd_per_s"`
	// DelayValue is what a second of delay_s is worth: the request's own
	// value of time, capped at the interactive class's (see delayTerm).
	DelayValue     float64 `json:"delay_value_usd_per_s"`
	WorkflowFactor float64 `json:"workflow_factor"`
	PMiss          float64 `json:"p_miss"`
	TimeUSD        float64 `json:"time_usd"`
	GPUUSD         float64 `json:"gpu_usd"`
	MissUSD        float64 `json:"miss_usd"`
	TotalUSD       float64 `json:"total_usd"`
	CachedTokens   int     `json:"cached_tokens"`
	// Blocks is the KV blocks the request needs beyond its cached prefix.
	Blocks int `json:"blocks"`
	// ReclaimBlocks is how many of Blocks the worker has free only by
	// preempting strictly lower classes (see the headroom axis);
	// ReclaimSeconds is the prefill those victims will recompute, and
	// ReclaimUSD what that costs them and the GPU. All zero when the
	// request fits in free blocks.
	ReclaimBlocks  int     `json:"reclaim_blocks,omitempty"`
	ReclaimSeconds float64 `json:"reclaim_s,omitempty"`
	ReclaimUSD     float64 `json:"reclaim_usd,omitempty"`
	// TTFTSeconds is the predicted time from now to the first token: queue,
	// load, the uncached prefill and the decode steps of the batch its
	// chunks share; TTFTSlackSeconds the time its target leaves after it
	// (+Inf without one), TTFTPMiss the chance it misses (latency axis).
	TTFTSeconds      float64 `json:"ttft_s,omitempty"`
	TTFTSlackSeconds float64 `json:"ttft_slack_s,omitempty"`
	TTFTPMiss        float64 `json:"ttft_p_miss,omitempty"`
	// TPOTSeconds is the predicted mean time per output token: the decode
	// step at the batch it joins, plus the lower classes' prefill queued
	// there, which the engine runs in the steps it decodes in;
	// TPOTPMiss the chance it misses its target.
	TPOTSeconds float64 `json:"tpot_s,omitempty"`
	TPOTPMiss   float64 `json:"tpot_p_miss,omitempty"`
	// ITLDeltaSeconds is how much this request's prefill (and load) raises
	// the mean time per token of each sequence decoding or booked on the
	// worker, and InterferenceUSD what that costs them: the rise in their
	// chance of missing their TPOT targets times their classes' miss
	// penalties (interference axis).
	ITLDeltaSeconds float64 `json:"itl_delta_s,omitempty"`
	InterferenceUSD float64 `json:"interference_usd,omitempty"`
	// TransferSeconds is, for a decode leg, the KV transfer from the
	// prefill worker's link to this one's that remains after the prefill
	// ends (the phase axis): it takes prefill_s's place in completion_s.
	TransferSeconds float64 `json:"transfer_s,omitempty"`
}

// Candidate is a worker that passed every filter, with its breakdown.
type Candidate struct {
	Worker *fleet.Worker
	Terms  Terms
}

// Rejection records why a worker was filtered out.
type Rejection struct {
	Worker *fleet.Worker
	Reason Reason
}

// Decision is the outcome of one placement. Candidates and Rejections live
// in the Placer's scratch: copy them to keep them past the next Place.
type Decision struct {
	Policy    string
	RequestID string
	// Worker is the chosen worker, nil when none passed the filters.
	Worker *fleet.Worker
	// Terms is the chosen worker's breakdown.
	Terms Terms
	// Unresolvable is set when no worker was chosen and every rejection
	// was unresolvable: waiting will not help, so the router should fail
	// the request rather than queue it.
	Unresolvable bool
	// Relaxed is set when no worker met both of the request's TTFT and
	// TPOT targets, so the placer placed again with their misses priced
	// rather than filtered; Rejections and Counts are that second pass's.
	Relaxed bool
	// Candidates are the best Options.Explain workers that passed every
	// filter, cheapest first, each with its breakdown; Considered is how
	// many passed in all. Keeping only the best few is what lets a
	// thousand-worker placement stay inside its latency budget: a full
	// breakdown per worker is ~200 bytes written a thousand times.
	Candidates []Candidate
	Considered int
	// Skipped counts workers not fully evaluated because a lower bound on
	// their cost could not beat the Explain-th best candidate; they might
	// also have failed a filter, so they are not in Rejections.
	Skipped    int
	Rejections []Rejection
	// Counts is the number of rejections per Reason.
	Counts [NumReasons]int
	// Prefill, when set, splits the request: Prefill runs its prompt and
	// first token (PrefillTerms its breakdown there), then the KV moves
	// over the two workers' links in TransferSeconds and Worker decodes
	// the rest (Terms its decode-leg breakdown). Nil runs the whole
	// request on Worker, aggregated. Aggregated is the aggregated
	// placement's breakdown the split was weighed against (zero when
	// the split was not considered).
	Prefill         *fleet.Worker
	PrefillTerms    Terms
	TransferSeconds float64
	Aggregated      Terms
}

// Split reports whether the decision splits prefill from decode.
func (d *Decision) Split() bool { return d.Prefill != nil && d.Worker != nil }

// OK reports whether a worker was chosen.
func (d *Decision) OK() bool { return d.Worker != nil }

// Booking is what the caller should fleet.Reserve on the chosen worker for
// a request of promptTokens and outputTokens: the prompt tokens the worker
// still has to prefill (its cached prefix is not queued work, and counting
// it would make the worker that holds a popular prefix look busiest), the
// output tokens, and the KV blocks beyond the cached prefix. The live
// router and the simulator both book through it.
func (d *Decision) Booking(promptTokens, outputTokens int) (prefill, output, blocks int) {
	prefill = promptTokens - d.Terms.CachedTokens
	if prefill < 1 {
		prefill = 1
	}
	blocks = d.Terms.Blocks
	if blocks <= 0 {
		blocks = (promptTokens + outputTokens + tokens.BlockSize - 1) / tokens.BlockSize
	}
	return prefill, outputTokens, blocks
}
