package routing

import (
	"time"

	"github.com/switchyard-ai/switchyard/internal/core/placement"
	"github.com/switchyard-ai/switchyard/internal/core/queue"
	"github.com/switchyard-ai/switchyard/schemas"
)

// The core's vocabulary: the Inputs it is advanced by and the Actions it
// answers with, and the request it holds while it decides.

// Input kinds.
const (
	InHeartbeat      = "hb"
	InKV             = "kv"
	InAdmitted       = "admit"
	InReleased       = "release"
	InCancel         = "cancel"
	InTick           = "tick"
	InDispatchFailed = "dispatch_failed"
	InForget         = "forget"
	// InAdopt hands a new leader the requests an earlier router dispatched
	// that have no final result yet, read back from the workers' dispatch
	// consumers, so it can re-place them if their worker is dead.
	InAdopt = "adopt"
	// InHandoff is a prefill leg's KV handle (or a decode worker's report
	// that it could not pull one): the core dispatches the decode leg, or
	// re-places the request (split.go).
	InHandoff = "handoff"
)

// Input is one thing that happened to the router, with the time it
// happened. It is what the journal records.
type Input struct {
	Kind      string             `json:"kind"`
	At        time.Time          `json:"at"`
	Heartbeat *schemas.Heartbeat `json:"hb,omitempty"`
	KV        *schemas.KVEvent   `json:"kv,omitempty"`
	Admitted  *schemas.Admitted  `json:"admitted,omitempty"`
	Cancel    *schemas.Cancel    `json:"cancel,omitempty"`
	// Result is the final result that releases a request (its outcome
	// feeds the worker's circuit breaker).
	Result *ResultSummary `json:"result,omitempty"`
	// Adopted lists in-flight dispatches to take over (InAdopt).
	Adopted []schemas.Dispatch `json:"adopted,omitempty"`
	// Bookings are another router's bookings (InPeerBooking).
	Bookings []PeerBooking `json:"bookings,omitempty"`
	// Fair is another router's fairness report (InFairShare; ID names it).
	Fair *queue.Report `json:"fair,omitempty"`
	// Pool is a pool the controller scales (InPool, warmup.go).
	Pool *PoolSpec `json:"pool,omitempty"`
	// Handoff is a prefill leg's KV handle (InHandoff).
	Handoff *schemas.KVHandle `json:"handoff,omitempty"`
	// ID names the request of a release or a failed dispatch, or the peer
	// of a fairness report.
	ID string `json:"id,omitempty"`
}

// ResultSummary is what the router needs from a final result.
type ResultSummary struct {
	Status   string  `json:"status"`
	Code     string  `json:"code,omitempty"`
	WorkerID string  `json:"worker_id,omitempty"`
	WorkMs   float64 `json:"work_ms,omitempty"` // time on the worker: total minus queue
	// TTFTMs (from submission) and ITLMs (the mean time per token after
	// the first) are the result's own timing, which the core's learned
	// prediction error is fitted to (calibrate.go).
	TTFTMs float64 `json:"ttft_ms,omitempty"`
	ITLMs  float64 `json:"itl_ms,omitempty"`
}

// Summarize reduces a result to what the router journals.
func SummarizeResult(r *schemas.Result) *ResultSummary {
	s := &ResultSummary{Status: r.Status, WorkerID: r.WorkerID, WorkMs: r.Timing.TotalMs - r.Timing.QueueMs,
		TTFTMs: r.Timing.TTFTMs, ITLMs: r.Timing.ITLMs}
	if r.Error != nil {
		s.Code = r.Error.Code
	}
	return s
}

// Action kinds.
const (
	ActDispatch = "dispatch"
	ActFail     = "fail"
	ActDelayed  = "delayed"
	ActSnapshot = "snapshot"
	// ActDuplicate means an admitted request was already held. Held is the
	// request as held, Handle the duplicate delivery: the shell acks a
	// second message for the same id, but a redelivery of the held message
	// itself replaces the held handle instead — acking it would ack a
	// request that lives only in this router's memory.
	ActDuplicate = "duplicate"
	// ActEvent is a decision to record as an event (breaker transitions,
	// retries); Event holds it.
	ActEvent = "event"
)

// Action is what the shell must do.
type Action struct {
	Kind string
	ID   string
	// Held is the request the action is about (dispatch, fail, delayed).
	Held *Held
	// Worker is the dispatch target, or the worker to snapshot.
	Worker string
	GPU    string
	Policy string
	Terms  placement.Terms
	// Candidates summarises the best few candidates, for the placement
	// event's explanation.
	Candidates []Candidate
	// Rejected, Considered and Skipped count workers filtered out, passed,
	// and pruned by the placer's lower bound.
	Rejected, Considered, Skipped int
	Err                           *schemas.Error
	Reason                        string
	Event                         *schemas.Event
	// Booking is what a dispatch booked on Worker, for the shell to share
	// with peer routers (InPeerBooking).
	Booking PeerBooking
	// Handle is a duplicate delivery's handle (ActDuplicate).
	Handle any
	// Phase is the dispatch's leg (schemas.PhasePrefill, PhaseDecode; ""
	// for the whole request). A prefill leg names the worker planned to
	// decode (DecodeWorker, DecodeGPU) and the predicted transfer
	// (TransferSeconds); a decode leg carries the prefill leg's KV
	// handle (Handoff) and that transfer.
	Phase           string
	DecodeWorker    string
	Handoff         *schemas.KVHandle
	TransferSeconds float64
	// Attempt is the dispatch's attempt, as Held.Adm.Attempt (a decode
	// leg has no Held: the request left the queue with its prefill).
	Attempt int
}

// Candidate is one candidate's breakdown, copied out of the placer's scratch.
type Candidate struct {
	Worker string          `json:"worker"`
	GPU    string          `json:"gpu"`
	Terms  placement.Terms `json:"terms"`
}

// Held is an admitted request the router holds until it is placed or
// answered. Handle is the shell's (its unacked message); the core never
// touches it.
type Held struct {
	Adm          schemas.Admitted
	Handle       any
	WaitingSince time.Time
	Reason       string
}
