package placement

import (
	"math"
	"math/bits"

	"github.com/switchyard-ai/switchyard/schemas"
)

// Cost-model answers depend on the worker only through its class (GPU, TP)
// and on the request's token counts, so within one placement they are
// computed once per class, and per distinct batch bucket or cached length.

// The role and link enter the key only as the phases a worker takes
// (takes): workers of one GPU that take different phases are costed
// alike but must be told apart by the scan, which skips a whole class
// whose workers cannot take the request's phase. A fleet without roles
// or links has takes == takesWhole everywhere, so its classes are the
// (GPU, TP) ones as before.
type classKey struct {
	gpu   string
	tp    int
	takes uint8
}

// decodeBuckets are the batch sizes at which decode time is asked for;
// other batch sizes interpolate linearly between neighbours, which follows
// the roofline's piecewise-linear shape closely enough for ranking.
const decodeBuckets = 12 // 1, 2, 4, ... 2048

// queueRefTokens sizes the probe used to turn queued prompt tokens into
// seconds of wait.
const queueRefTokens = 1024

type class struct {
	gpu   string // the GPU the cost model is asked about
	tp    int
	epoch uint64 // placement these per-call values belong to
	// takes is the phases the class's workers take (takesWhole and the
	// rest, from their role and link): next to epoch, which the scan
	// reads for every worker too.
	takes uint8
	// rowsEpoch is the placement that load belongs to, and evalEpoch the
	// one perCtxToken does: bounds of whole groups take their workers as
	// hot and at the table's decode, so load and perCtxToken (which prices
	// the KV a batch holds in decode_s) are asked for when the first of
	// the class's workers is bounded one by one. evaluate still checks
	// evalEpoch, for a worker evaluated without a bound.
	rowsEpoch, evalEpoch uint64

	prefillFull float64 // the whole prompt, nothing cached
	queueRate   float64 // seconds per queued prompt token
	price       float64 // $/hour
	// pricePerSecond is price/3600, for the scan's bound.
	pricePerSecond float64

	// decodeAt is the decode time at each bucket's batch size with every
	// sequence at the request's context, for the buckets in the mask (the
	// rest are left from earlier placements). decodeFloor is the same
	// batch with the other sequences holding no context, the least the
	// decode can be there: decodeTerm prices a worker holding most of the
	// prompt from it plus the KV its batch holds, and the scan bounds such
	// a worker with it. It is filled bucket by bucket as those workers ask
	// (floorFilled, for the placement floorEpoch): they are a handful of
	// prefix holders, reading two buckets each, and filling every bucket
	// of the class at the first of them was 21 of the 71 cost-model
	// decode calls per placement on the synthetic fleet.
	decodeAt, decodeFloor [decodeBuckets]float64
	floorEpoch            uint64
	floorFilled           uint16
	// buckets is a mask of the decode buckets the class's workers
	// interpolate between (kept by summarize); prepare asks the cost model for
	// exactly those, and bucket 0 for the deadline filter's batch of one,
	// instead of the scan checking each bucket per worker.
	buckets uint16
	// ctx is the request's mean context during decode, and perCtxToken
	// the seconds one more context token in the batch adds to each of the
	// request's decode steps (the KV every step reads).
	ctx         int
	perCtxToken float64
	load        [stateUnknown + 1]float64 // load_s from each weightState in states
	// errTTFT and errTPOT are the relative prediction errors of the
	// class's GPU for each phase (Options.PhaseError), fixed when the
	// class is made.
	errTTFT, errTPOT float64
	// stepAlone is the request's decode step alone on the class's GPU
	// (the chunk-sharing term of ttft_s counts the batch's steps beyond
	// it); set by prepare.
	stepAlone float64
	// states is a mask of the weight states the request's model has been
	// seen in on this class's workers (kept by reread; it only grows), so
	// prepare fills load for those and the scan looks it up unchecked.
	states uint8
}

// loadStates are the states a load starts from, in weightState order from
// stateSleeping.
var loadStates = [...]string{schemas.WeightSleeping, schemas.WeightLoading, schemas.WeightCold, schemas.WeightAbsent}

type cachedPrefill struct {
	class  *class
	cached int
	secs   float64
}

// prepare computes cl's per-placement values for r; the scan calls it the
// first time it meets a worker of cl in a placement.
func (p *Placer) prepare(cl *class, r *Request) {
	cl.epoch = p.epoch
	cl.prefillFull = p.cost.PrefillSeconds(cl.gpu, r.Model, r.Dtype, cl.tp, r.PromptTokens, 0)
	if p.rp.phase == takesDecode && !isInf(cl.prefillFull) {
		// A decode leg prefills nothing here: its KV arrives over the
		// link (transfer_s). Kept +Inf for a GPU that cannot run the
		// model, which the GPU axis turns down.
		cl.prefillFull = 0
	}
	cl.queueRate = p.cost.PrefillSeconds(cl.gpu, r.Model, r.Dtype, cl.tp, queueRefTokens, 0) / queueRefTokens
	cl.price = p.cost.PricePerHour(cl.gpu, cl.tp)
	cl.pricePerSecond = cl.price / 3600
	// The mean context during decode is the prompt plus half the output.
	ctx := r.PromptTokens + r.OutputTokens/2
	cl.ctx = ctx
	for m := cl.buckets | 1; m != 0; m &= m - 1 {
		i := bits.TrailingZeros16(m)
		cl.decodeAt[i] = p.cost.DecodeSeconds(cl.gpu, r.Model, r.Dtype, cl.tp, r.OutputTokens, 1<<i, ctx)
	}
	cl.stepAlone = cl.decodeAt[0] / float64(r.OutputTokens)
}

// prepareRows computes what only workers read one by one need of cl for r
// (see class.rowsEpoch); the scan calls it, after prepare, the first time
// it bounds a worker of cl in a placement. Every full evaluation follows a
// bound, so evaluate finds them filled.
func (p *Placer) prepareRows(cl *class, r *Request) {
	cl.rowsEpoch = p.epoch
	if cl.evalEpoch != p.epoch {
		p.prepareEval(cl, r) // the bound prices decode_s as evaluate does
	}
	for m := cl.states; m != 0; m &= m - 1 {
		p.fillLoad(cl, r, weightState(bits.TrailingZeros8(m)))
	}
}

// prepareEval computes perCtxToken of cl for r (see class.evalEpoch):
// prepareRows calls it, and evaluate for a worker no bound prepared.
func (p *Placer) prepareEval(cl *class, r *Request) {
	cl.evalEpoch = p.epoch
	const probe = 4096
	cl.perCtxToken = max(0, p.cost.DecodeSeconds(cl.gpu, r.Model, r.Dtype, cl.tp, 1, 1, cl.ctx+probe)-
		p.cost.DecodeSeconds(cl.gpu, r.Model, r.Dtype, cl.tp, 1, 1, cl.ctx)) / probe
}

func (p *Placer) prefillCached(cl *class, r *Request, cached int) float64 {
	for i := range p.cached {
		if e := &p.cached[i]; e.class == cl && e.cached == cached {
			return e.secs
		}
	}
	s := p.cost.PrefillSeconds(cl.gpu, r.Model, r.Dtype, cl.tp, r.PromptTokens-cached, cached)
	p.cached = append(p.cached, cachedPrefill{class: cl, cached: cached, secs: s})
	return s
}

// decodeInterp is the decode time at the batch whose bucket point
// decodePoint gave: linear between the two buckets around it.
func decodeInterp(cl *class, lo uint8, frac float64) float64 {
	return interp(&cl.decodeAt, lo, frac)
}

// decodeFloorInterp is decodeInterp of decodeFloor: the least the decode
// can be at that batch, its buckets filled for this placement on first
// use.
func (p *Placer) decodeFloorInterp(cl *class, r *Request, lo uint8, frac float64) float64 {
	p.fillFloorAt(cl, r, lo, frac != 0)
	return interp(&cl.decodeFloor, lo, frac)
}

// fillFloorAt fills cl.decodeFloor at bucket lo, and the one above if
// next (interp reads it only for a fraction past lo), unless this
// placement has.
func (p *Placer) fillFloorAt(cl *class, r *Request, lo uint8, next bool) {
	if cl.floorEpoch != p.epoch {
		cl.floorEpoch, cl.floorFilled = p.epoch, 0
	}
	p.fillFloor(cl, r, lo)
	if next && lo+1 < decodeBuckets {
		p.fillFloor(cl, r, lo+1)
	}
}

// fillFloor fills cl.decodeFloor at bucket i unless this placement has.
func (p *Placer) fillFloor(cl *class, r *Request, i uint8) {
	if cl.floorFilled&(1<<i) != 0 {
		return
	}
	cl.floorFilled |= 1 << i
	cl.decodeFloor[i] = cl.decodeAt[i]
	if i > 0 {
		// The batch's context is the request's own: its mean over the
		// batch is ctx / batch.
		cl.decodeFloor[i] = min(cl.decodeAt[i], p.cost.DecodeSeconds(cl.gpu, r.Model, r.Dtype, cl.tp, r.OutputTokens, 1<<i, cl.ctx>>i))
	}
}

func interp(t *[decodeBuckets]float64, lo uint8, frac float64) float64 {
	a := t[lo]
	if frac != 0 {
		a += frac * (t[lo+1] - a)
	}
	return a
}

// heldTokens is the KV the worker's batch holds, in tokens, as decode
// reads it (view.held): -1 when the worker reports no KV capacity.
func heldTokens(c *coldRow) float64 {
	if c.kvTotal <= 0 {
		return -1
	}
	return float64(max(0, c.kvTotal-c.free) * max(1, c.blockSize))
}

// decode is decode_s on the worker whose hot row is h, holding held
// tokens of KV (view.held) and cached tokens of r's prompt: decodeTerm's
// term, and the one the bounds price, so that a bound cannot drift from
// the total it bounds. cl's perCtxToken must be set for this placement
// (prepareEval).
func (p *Placer) decode(cl *class, r *Request, h *hotRow, held float64, cached int) float64 {
	d := decodeInterp(cl, h.decodeLo, h.decodeFrac)
	if cl.perCtxToken > 0 && held >= 0 {
		// others+1 is the batch, an integer, so the product is the
		// integer product exactly.
		if extra := held + float64(cl.ctx) - (h.others+1)*float64(cl.ctx); extra > 0 {
			d += float64(r.OutputTokens) * cl.perCtxToken * extra
		}
		if p.rp.heldKVDecode || mostlyCached(cached, r) {
			d = min(d, p.decodeFloorInterp(cl, r, h.decodeLo, h.decodeFrac)+float64(r.OutputTokens)*cl.perCtxToken*held)
		}
	}
	return d
}

// decodeAlone is the decode time at a batch of one.
func decodeAlone(cl *class) float64 { return cl.decodeAt[0] }

// fillLoad computes cl's load_s from state for this request.
func (p *Placer) fillLoad(cl *class, r *Request, state weightState) {
	var s float64
	switch {
	case state == stateHot || !p.on[axWarmth]:
	case state >= stateSleeping && state <= stateAbsent:
		s = p.cost.LoadSeconds(cl.gpu, r.Model, r.Dtype, cl.tp, loadStates[state-stateSleeping])
	default:
		s = math.Inf(1) // an unknown state: do not bet on it
	}
	cl.load[state] = s
}
