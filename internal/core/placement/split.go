package placement

import (
	"time"

	"github.com/switchyard-ai/switchyard/internal/core/fleet"
	"github.com/switchyard-ai/switchyard/schemas"
)

// The split decision (the phase axis, axis_phase.go): after the
// aggregated pass, Place weighs running the request's prompt on one
// worker and its decode on another, and keeps whichever is cheaper at
// equal or better P(miss).

// legSource is what a split's decode leg is placed from: the prefill
// leg's link and its predicted prefill seconds, which the transfer
// overlaps. The outer placer sets it on its legs placer for the one
// placement.
type legSource struct {
	set     bool
	link    string
	prefill float64
}

// split weighs splitting req against d, the aggregated decision, and
// rewrites d when the split wins. The legs are placed by a second Placer
// (p.legs), so d's candidates and rejections, in p's scratch, stand: they
// are the aggregated pass's.
//
// It is weighed when the aggregated choice leaves at least
// Options.SplitMinUncached prompt tokens to prefill and the request has
// a token to decode after its first, or when no aggregated worker was
// found at all (a fleet of prefill and decode roles only: the split is
// the only way). The split's cost is both legs' total_usd, their miss
// terms replaced by one for the whole request: P(miss) of the deadline
// (the decode leg's, held to the deadline less the prefill leg's first
// token), of the TTFT target (the prefill leg's) and of the TPOT target
// (the decode leg's, with the transfer gap), combined as the latency axis
// combines them. It wins when its total is lower and its P(miss) no
// higher (to 1e-9) than the aggregated choice's: the split trades the
// transfer for the interference and price, never for risk.
func (p *Placer) split(f *fleet.Fleet, req *Request, now time.Time, d *Decision) {
	r := &p.req // the aggregated pass's request, defaults filled in
	agg := d.OK()
	if agg && (r.PromptTokens-d.Terms.CachedTokens < p.opts.SplitMinUncached || r.OutputTokens < 2) {
		return
	}
	if p.legs == nil {
		p.legs = New(p.cost, p.opts)
		p.legs.SetLearnedPhaseError(p.learnedErr)
		p.legs.splits = false // its requests are legs: never split again
	}
	legs := p.legs

	p.legReq = *req
	p.legReq.Phase = schemas.PhasePrefill
	dp := legs.Place(f, &p.legReq, now)
	if !dp.OK() {
		// No prefill leg: the aggregated decision stands, and without an
		// aggregated worker waiting may still help unless the leg cannot.
		d.Unresolvable = d.Unresolvable && dp.Unresolvable
		return
	}
	pw, pt, prelaxed := dp.Worker, dp.Terms, dp.Relaxed

	// The decode leg starts when the first token is out: its deadlines
	// are what is left of the request's then, and it may not land back
	// on the prefill worker (that is the aggregated placement).
	first := firstToken(&pt)
	shift := -time.Duration(first * float64(time.Second))
	p.legReq = *req
	p.legReq.Phase, p.legReq.Source = schemas.PhaseDecode, pw.ID
	p.legReq.Deadline = shiftTime(req.Deadline, shift)
	p.legReq.HardDeadline = shiftTime(req.HardDeadline, shift)
	p.legReq.WorkflowDeadline = shiftTime(req.WorkflowDeadline, shift)
	p.legExclude = append(append(p.legExclude[:0], req.Exclude...), pw.ID)
	p.legReq.Exclude = p.legExclude
	legs.leg = legSource{set: true, link: pw.Link, prefill: pt.PrefillSeconds}
	dd := legs.Place(f, &p.legReq, now)
	legs.leg = legSource{}
	if !dd.OK() {
		d.Unresolvable = d.Unresolvable && dd.Unresolvable
		return
	}

	penalty := p.rp.missPenalty
	miss := orMiss(orMiss(dd.Terms.PMiss, pt.TTFTPMiss), dd.Terms.TPOTPMiss)
	total := pt.TotalUSD - pt.MissUSD + dd.Terms.TotalUSD - dd.Terms.MissUSD + miss*penalty
	if agg {
		at := &d.Terms
		aggMiss := orMiss(orMiss(at.PMiss, at.TTFTPMiss), at.TPOTPMiss)
		d.Aggregated = *at
		if !(total < at.TotalUSD && miss <= aggMiss+1e-9) {
			return
		}
	}
	d.Prefill, d.PrefillTerms = pw, pt
	d.Worker, d.Terms = dd.Worker, dd.Terms
	d.TransferSeconds = dd.Terms.TransferSeconds
	d.Relaxed = prelaxed || dd.Relaxed
	d.Unresolvable = false
}

// firstToken is when a prefill leg's first token is predicted: its
// ttft_s when the latency axis priced one, else its completion (the leg
// ends with that token).
func firstToken(t *Terms) float64 {
	if t.TTFTSeconds > 0 {
		return t.TTFTSeconds
	}
	return t.CompletionSeconds
}

// shiftTime is t moved by d, zero (no deadline) kept zero.
func shiftTime(t time.Time, d time.Duration) time.Time {
	if t.IsZero() {
		return t
	}
	return t.Add(d)
}
