package placement

import (
	"math"

	"github.com/switchyard-ai/switchyard/internal/core/fleet"
	"github.com/switchyard-ai/switchyard/schemas"
)

// Axis: phase (row AxisPhase in axes.go): prefill and decode split
// across workers.
//
// Why: a long prefill on a worker that is decoding is the ITL penalty
// every disaggregated engine exists to avoid (Dynamo, llm-d, SGLang,
// vLLM's NIXL connector), and on a mixed fleet the two phases want
// different GPUs: prefill is compute-bound, decode bandwidth-bound, so a
// prompt may be cheapest on an H100 and its tokens on an A100
// (Splitwise). Placing the two legs apart pays a KV transfer over the
// two workers' links; whether that is worth it depends on the prompt
// left uncached, both sides' queues and prices, the link, and both
// targets, which is what the placer prices.
//
// Reads: the worker's role (which phases it takes: schemas.RoleTakes,
// "" reads as both) and its link (a catalog link name; a worker without
// one takes no split leg), the request's phase and, for a decode leg,
// its source: the prefill worker, whose link the KV leaves from.
//
// Filter: role_mismatch, in the scan's first checks (bound) and for a
// whole class at once (a class is per GPU, TP and the phases its
// workers take, so a class that cannot take the phase is never costed):
// an aggregated request (Phase "") goes only to role both; a leg only to
// a worker whose role takes it and that has a link. A decode leg to
// which the cost model prices no transfer from the source's link (+Inf:
// an unknown link, or no source) is turned down the same way. It is
// unresolvable for that phase only: Place weighs the split before it
// calls an aggregated request that found only prefill and decode
// workers unresolvable.
//
// Terms: a prefill leg is placed as a request of one output token: its
// queue, prefill and the decode of its first token, the TTFT target and
// no TPOT target (its PrefillSeconds is what the transfer can overlap
// with). A decode leg prefills nothing (prefill_s 0, and no delay or
// interference from a prefill on its neighbours): transfer_s, the KV of
// the prompt tokens not already cached on this worker moving from the
// source's link to this one's, left after the prefill ends
// (TransferCost, overlapped with the prefill leg's prefill_s as NIXL
// moves it layer by layer), takes prefill_s's place in completion_s.
// Its TTFT is the prefill worker's, so none is judged here; its TPOT is
// the decode step plus the gap before its second token (transfer,
// queue, load) spread over the output tokens after the first, as
// internal/core/slo judges ITL: (finish − first token) ÷ (n − 1). For a
// split, the request's deadlines reach the decode leg shortened by the
// prefill leg's first token.
//
// Trade-offs: the legs are chosen one after the other, the best prefill
// leg on its own terms and then the best decode leg from it, not the
// best pair: a prefill worker with a slightly dearer leg but a faster
// link to a cheap decoder is not found. The transfer is priced as the
// cost model has it (bytes per token × tokens ÷ bandwidth + latency), and
// a decode leg queues behind the worker's queued prefill as an
// aggregated request does, though its KV may arrive while it waits. A
// decode leg re-placed alone (its planned worker lost after the prefill)
// overlaps nothing: the prefill is over.
//
// Disabled: never split (Options.Split off); the role filter stays, as
// the GPU axis's capability filters do, since a prefill-only worker
// cannot run a whole request; a leg asked for by phase is still priced.

// TransferCost is the optional part of a CostModel that prices moving a
// prompt's KV between two workers (*perf.Predictor implements it): the
// seconds after the prefill (of prefillSeconds, which the transfer
// overlaps) until tokens of KV of model at dtype, for a worker of gpu
// and tp, are on the decode worker, from fromLink to toLink; +Inf for a
// link it does not know. Without it the placer never splits.
type TransferCost interface {
	KVTransferSeconds(gpu, model, dtype string, tp, tokens int, prefillSeconds float64, fromLink, toLink string) float64
}

// The phases a worker takes, as a mask (class.takes), and the request's
// phase as one of them (reqParams.phase).
const (
	takesWhole   uint8 = 1 << iota // an aggregated request
	takesPrefill                   // a prefill leg
	takesDecode                    // a decode leg
)

// takesOf is the phases a worker of role with link takes: a split leg
// needs a link to move its KV over.
func takesOf(role, link string) uint8 {
	var t uint8
	if schemas.RoleTakes(role, schemas.PhaseBoth) {
		t |= takesWhole
	}
	if link != "" {
		if schemas.RoleTakes(role, schemas.PhasePrefill) {
			t |= takesPrefill
		}
		if schemas.RoleTakes(role, schemas.PhaseDecode) {
			t |= takesDecode
		}
	}
	return t
}

// phaseOf is the request phase's bit.
func phaseOf(phase string) uint8 {
	switch phase {
	case schemas.PhasePrefill:
		return takesPrefill
	case schemas.PhaseDecode:
		return takesDecode
	}
	return takesWhole
}

// phasePrepare sets the request's phase for the scan and, for a decode
// leg, where its KV comes from: the split's prefill leg (set by the
// outer placer, with the prefill seconds the transfer overlaps), else
// the Source worker's link, nothing to overlap (its prefill is done).
func phasePrepare(p *Placer, f *fleet.Fleet, r *Request) {
	rp := &p.rp
	rp.phase = phaseOf(r.Phase)
	rp.srcLink, rp.srcPrefill = "", 0
	if rp.phase != takesDecode {
		return
	}
	p.transfers = p.transfers[:0]
	switch {
	case p.leg.set:
		rp.srcLink, rp.srcPrefill = p.leg.link, p.leg.prefill
	case r.Source != "":
		if w := f.Get(r.Source); w != nil {
			rp.srcLink = w.Link
		}
	}
}

// phaseMeasure prices a decode leg's transfer to this worker: the KV of
// the prompt tokens it does not hold cached.
func phaseMeasure(p *Placer, c *cand, r *Request) {
	if p.rp.phase != takesDecode {
		return
	}
	c.t.TransferSeconds = p.transferSeconds(c.c, c.row.link, r, max(r.PromptTokens-c.t.CachedTokens, 0))
}

// phaseFilter turns down a decode leg with no priced transfer.
func phaseFilter(p *Placer, c *cand, _ *Request, _ uint64) Reason {
	if p.rp.phase == takesDecode && !(c.t.TransferSeconds < math.Inf(1)) {
		return ReasonRoleMismatch
	}
	return ReasonNone
}

// transferEntry caches one transfer price within a placement.
type transferEntry struct {
	class  *class
	link   string
	tokens int
	secs   float64
}

// transferSeconds is TransferCost's price to a worker of cl on link, kept
// for the placement: the workers of one class and link holding the same
// prefix cost one call.
func (p *Placer) transferSeconds(cl *class, link string, r *Request, tokens int) float64 {
	if p.tc == nil || p.rp.srcLink == "" || link == "" {
		return math.Inf(1)
	}
	for i := range p.transfers {
		if e := &p.transfers[i]; e.class == cl && e.tokens == tokens && e.link == link {
			return e.secs
		}
	}
	s := p.tc.KVTransferSeconds(cl.gpu, r.Model, r.Dtype, cl.tp, tokens, p.rp.srcPrefill, p.rp.srcLink, link)
	if math.IsNaN(s) || s < 0 {
		s = math.Inf(1)
	}
	p.transfers = append(p.transfers, transferEntry{class: cl, link: link, tokens: tokens, secs: s})
	return s
}
