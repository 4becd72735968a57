// Package slo owns the one definition of a request meeting its
// service-level objective, used by the live worker when it writes a
// result, by the simulator when it scores a run, and by the controller
// when it measures attainment. Two definitions of "met" would let the
// simulator's figures and the live system's disagree for no reason but
// the arithmetic.
package slo

import (
	"time"

	"github.com/switchyard-ai/switchyard/schemas"
)

// Target is what a request was promised. A zero field is not checked.
type Target struct {
	// TTFT bounds the time from submission to the first token.
	TTFT time.Duration
	// TPOT bounds the mean time per output token after the first.
	TPOT time.Duration
	// Deadline bounds when the last token may arrive.
	Deadline time.Time
}

// Observed is what happened to a request that finished.
type Observed struct {
	// OK is whether it finished with an answer (status ok).
	OK bool
	// TTFT is from submission (queueing included) to the first token.
	TTFT time.Duration
	// ITL is the mean time per output token after the first.
	ITL time.Duration
	// Finished is when the last token was produced.
	Finished time.Time
}

// Met reports whether o kept every promise in t: an answer, the first
// token in time, the token rate, and the deadline. A request with no
// target at all meets its SLO by answering.
func Met(o Observed, t Target) bool {
	if !o.OK {
		return false
	}
	if t.TTFT > 0 && o.TTFT > t.TTFT {
		return false
	}
	if t.TPOT > 0 && o.ITL > t.TPOT {
		return false
	}
	if !t.Deadline.IsZero() && o.Finished.After(t.Deadline) {
		return false
	}
	return true
}

// Attainment is the share of requests that met their SLO, 1 when there
// were none (nothing was promised and nothing was broken).
func Attainment(met, total int) float64 {
	if total <= 0 {
		return 1
	}
	return float64(met) / float64(total)
}

// TargetOf is the objective an admitted request carries.
func TargetOf(a *schemas.Admitted) Target {
	return Target{
		TTFT:     time.Duration(a.TTFTTargetMs * float64(time.Millisecond)),
		TPOT:     time.Duration(a.TPOTTargetMs * float64(time.Millisecond)),
		Deadline: a.Deadline,
	}
}
