package baselines

import (
	"time"

	"github.com/switchyard-ai/switchyard/internal/core/fleet"
	"github.com/switchyard-ai/switchyard/internal/core/placement"
	"github.com/switchyard-ai/switchyard/internal/core/tokens"
	"github.com/switchyard-ai/switchyard/schemas"
)

// What the three disaggregated baselines (dynamo-disagg, llm-d-pd,
// sglang-pd) share: the two pools a split draws from, and the split's
// breakdown as far as a baseline knows it.

// KVTransferer is the optional part of a cost model that prices moving a
// prompt's KV from a prefill worker to a decode worker (perf.Predictor
// has it). Without it a split's TransferSeconds stays 0: the baselines
// themselves never price the transfer, they only report it.
type KVTransferer interface {
	KVTransferSeconds(gpu, model, dtype string, tp, tokens int, prefillSeconds float64, fromLink, toLink string) float64
}

// pools are the workers each leg of a split may use: fresh, serving the
// model, taking the phase (schemas.RoleTakes) and with a link to move KV
// over (a worker without one cannot send or receive a handoff).
type pools struct {
	prefill, decode []*fleet.Worker
}

// fill sets the pools from the fleet; ok is false when either is empty,
// so the policy places aggregated.
func (ps *pools) fill(b *base, f *fleet.Fleet, model string, now time.Time) (ok bool) {
	ps.prefill, ps.decode = ps.prefill[:0], ps.decode[:0]
	for _, w := range f.Candidates(now, b.cands[:0]) {
		if w.Link == "" {
			continue
		}
		if _, ok := w.Model(model, ""); model != "" && !ok {
			continue
		}
		if schemas.RoleTakes(w.Role, schemas.PhasePrefill) {
			ps.prefill = append(ps.prefill, w)
		}
		if schemas.RoleTakes(w.Role, schemas.PhaseDecode) {
			ps.decode = append(ps.decode, w)
		}
	}
	return len(ps.prefill) > 0 && len(ps.decode) > 0
}

// without returns ws less w, in a scratch slice.
func without(dst, ws []*fleet.Worker, w *fleet.Worker) []*fleet.Worker {
	dst = dst[:0]
	for _, x := range ws {
		if x != w {
			dst = append(dst, x)
		}
	}
	return dst
}

// runsWhole reports whether w may run a whole request (its prefill
// locally): a decode-only worker may not, so a baseline whose rule says
// "prefill locally" on one splits anyway, as the system it follows does
// on a decode worker without local prefill.
func runsWhole(w *fleet.Worker) bool { return schemas.RoleTakes(w.Role, schemas.PhaseBoth) }

// splitTerms fills what a baseline knows of a split: each leg's cached
// prefix and KV blocks (from the prefix index it routed by), and, when
// the cost model can say, the prefill's seconds and the transfer's. The
// transfer moves the prompt's KV the decode worker does not already hold
// (Dynamo's prefill worker reads the decode worker's cached blocks and
// writes back the rest; NIXL and Mooncake likewise pull only missing
// blocks), overlapped with the prefill as the cost model assumes.
func splitTerms(d *placement.Decision, cost placement.CostModel, req *placement.Request, preCached, decCached int) {
	pre, dec := d.Prefill, d.Worker
	bs := tokens.BlockSize
	preCached = min(preCached, max(req.PromptTokens-1, 0))
	decCached = min(decCached, req.PromptTokens)
	d.PrefillTerms.CachedTokens = preCached
	d.PrefillTerms.Blocks = max((req.PromptTokens+bs-1)/bs-preCached/bs, 0)
	d.Terms.CachedTokens = decCached
	d.Terms.Blocks = max((req.PromptTokens+req.OutputTokens+bs-1)/bs-decCached/bs, 0)
	if cost == nil {
		return
	}
	dtype := req.Dtype
	if dtype == "" {
		if m, ok := pre.Model(req.Model, ""); ok {
			dtype = m.Dtype
		}
	}
	tp := max(pre.TP, 1)
	secs := cost.PrefillSeconds(pre.GPU, req.Model, dtype, tp, req.PromptTokens-preCached, preCached)
	d.PrefillTerms.PrefillSeconds = secs
	if tr, ok := cost.(KVTransferer); ok {
		d.TransferSeconds = tr.KVTransferSeconds(pre.GPU, req.Model, dtype, tp, req.PromptTokens-decCached, secs, pre.Link, dec.Link)
	}
}

// cachedTokens is the prompt tokens the fleet's KV index says w holds for
// hashes, lens and touched the caller's scratch (grown as needed, left
// zeroed): what a disaggregated baseline's decider and terms read.
func cachedTokens(f *fleet.Fleet, hashes []uint64, w *fleet.Worker, lens, touched *[]int32) int {
	for len(*lens) < f.Prefix().MaxWorker() {
		*lens = append(*lens, 0)
	}
	*touched = f.Prefix().Match(hashes, *lens, (*touched)[:0])
	n := 0
	if int(w.Idx) < len(*lens) {
		n = int((*lens)[w.Idx])
	}
	for _, t := range *touched {
		(*lens)[t] = 0
	}
	*touched = (*touched)[:0]
	return n * tokens.BlockSize
}
