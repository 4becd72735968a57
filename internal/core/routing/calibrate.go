package routing

import (
	"math"
	"sort"

	"github.com/switchyard-ai/switchyard/internal/core/placement"
)

// Calibrated prediction error (issue 27). Placement prices P(miss) of a
// request's TTFT and TPOT targets from a normal error around each
// prediction, whose spread was one fixed 25 % for every GPU and phase: an
// L40S decoding at batch was under-predicted by more than that, an idle
// H100's prefill by far less. The core learns the spread per GPU kind and
// phase from the results it releases — observed ÷ predicted, as Dynamo's
// planner corrects TTFT and ITL by it — and gives it to a policy that
// takes it (PhaseErrorSetter: Switchyard's placer). It learns only from
// the inputs it is given, so replay learns the same spreads the live
// router learned.

// PhaseErrorSetter is a policy that takes learned prediction errors:
// relative spreads keyed by placement.PhaseKey.
type PhaseErrorSetter interface {
	SetLearnedPhaseError(map[string]float64)
}

const (
	// calibMinSamples is how many results of one GPU kind and phase the
	// spread waits for before it replaces the default: fewer say more
	// about the requests than about the GPU.
	calibMinSamples = 50
	// calibWindow is the number of recent results the spread is an
	// exponential mean over: long enough that one burst does not swing it,
	// short enough to follow a fleet whose load changes over minutes.
	calibWindow = 500
	// calibSyncEvery is how many observations pass between updates of the
	// policy's spreads (each update refreshes every class of the placer).
	calibSyncEvery = 64
	// calibMinPredicted skips predictions below it (seconds): a cached
	// prompt's TTFT of a millisecond or two is mostly dispatch transit,
	// and its ratio says nothing of the GPU.
	calibMinPredicted = 0.005
	// The learned spread is kept within these: under 5 % no real engine
	// has been measured, and above 100 % the normal model itself is wrong.
	calibMinSpread, calibMaxSpread = 0.05, 1.0
	// calibMaxError caps one result's relative error, so a request that
	// waited behind a burst no prediction saw counts as a miss, not as a
	// tenfold one.
	calibMaxError = 3.0
)

// calibration is the core's learned error, per placement.PhaseKey.
type calibration struct {
	by    map[string]*errorMean
	since int
}

// errorMean is the exponential mean of one key's absolute relative
// error, |observed ÷ predicted − 1|, and of the ratio itself (its bias,
// Dynamo's correction factor: reported, not applied).
type errorMean struct {
	n           int
	mean, ratio float64
}

func (e *errorMean) add(ratio float64) {
	e.n++
	w := 1 / float64(min(e.n, calibWindow))
	e.mean += w * (min(calibMaxError, math.Abs(ratio-1)) - e.mean)
	e.ratio += w * (min(1+calibMaxError, ratio) - e.ratio)
}

// spread is the normal's relative standard deviation the mean absolute
// error implies (σ = √(π/2) × E|x| for a normal x).
func (e *errorMean) spread() float64 {
	return min(calibMaxSpread, max(calibMinSpread, math.Sqrt(math.Pi/2)*e.mean))
}

func (k *calibration) observe(key string, predicted, observed float64) {
	if !(predicted >= calibMinPredicted) || !(observed > 0) || math.IsInf(observed, 1) {
		return
	}
	if k.by == nil {
		k.by = map[string]*errorMean{}
	}
	m := k.by[key]
	if m == nil {
		m = &errorMean{}
		k.by[key] = m
	}
	m.add(observed / predicted)
	k.since++
}

// learned is the spreads of every key with enough samples.
func (k *calibration) learned() map[string]float64 {
	out := map[string]float64{}
	for key, m := range k.by {
		if m.n >= calibMinSamples {
			out[key] = m.spread()
		}
	}
	return out
}

// calibrate learns from a whole request's result released at now: its
// TTFT since it was placed against the TTFT predicted then, and its mean
// time per token against the TPOT predicted. Legs of a split request are
// not learned from: their first token and tokens are two workers'.
func (c *Core) calibrate(f *inflight, res *ResultSummary) {
	if c.cfg.FixedError || f.gpu == "" || f.phase != "" || res == nil {
		return
	}
	if res.TTFTMs > 0 && !f.adm.SubmittedAt.IsZero() {
		// The result's TTFT counts from submission; the prediction from
		// the placement.
		waited := f.placedAt.Sub(f.adm.SubmittedAt).Seconds()
		c.calib.observe(placement.PhaseKey(f.gpu, placement.PhaseTTFT), f.ttft, res.TTFTMs/1000-max(0, waited))
	}
	if res.ITLMs > 0 {
		c.calib.observe(placement.PhaseKey(f.gpu, placement.PhaseTPOT), f.tpot, res.ITLMs/1000)
	}
	if c.calib.since >= calibSyncEvery {
		c.calib.since = 0
		if s, ok := c.cfg.Policy.(PhaseErrorSetter); ok {
			s.SetLearnedPhaseError(c.calib.learned())
		}
	}
}

// LearnedError is the core's learned prediction error per GPU kind and
// phase (placement.PhaseKey → relative spread; only keys with enough
// results), sorted by key, for reports.
func (c *Core) LearnedError() []LearnedSpread {
	var out []LearnedSpread
	for key, m := range c.calib.by {
		out = append(out, LearnedSpread{Key: key, Samples: m.n, MeanAbsError: m.mean, MeanRatio: m.ratio, Spread: m.spread(), Applied: m.n >= calibMinSamples})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Key < out[j].Key })
	return out
}

// LearnedSpread is one GPU kind and phase's learned error.
type LearnedSpread struct {
	Key          string  `json:"key"`
	Samples      int     `json:"samples"`
	MeanAbsError float64 `json:"mean_abs_error"`
	// MeanRatio is the mean of observed ÷ predicted: above 1, the GPU's
	// phase runs slower than predicted.
	MeanRatio float64 `json:"mean_ratio"`
	Spread    float64 `json:"spread"`
	// Applied: enough samples that placement prices with it.
	Applied bool `json:"applied"`
}
