package admission

import (
	"slices"
	"time"
)

// Estimate is a request's predicted cost on the fleet's reference GPU.
type Estimate struct {
	// Latency is the predicted time from start of prefill to last token
	// when the request runs in a typically loaded batch.
	Latency time.Duration
	// GPUSeconds is the request's share of GPU time: prefill alone, decode
	// shared with the rest of the batch.
	GPUSeconds float64
}

// Estimator predicts a request's Estimate. The admitter shell may plug in
// the roofline model (internal/core/perf); DefaultEstimator is used otherwise.
type Estimator func(model string, promptTokens, maxTokens int) Estimate

// TierRates are rough serving rates of one ladder tier on the reference GPU
// (an H100-class card, BF16, vLLM-style continuous batching).
type TierRates struct {
	PrefillTokPerSec float64
	// DecodeTokPerSec is per stream, at the typical batch below.
	DecodeTokPerSec float64
	Batch           float64
}

// DefaultTierRates are the rates by ladder position (1B, 3B, 8B, 70B
// classes). They are order-of-magnitude figures for admission — enough to
// tell a 100 ms request from a 30 s one — not placement predictions,
// which the router makes with the roofline model.
var DefaultTierRates = []TierRates{
	{PrefillTokPerSec: 40000, DecodeTokPerSec: 250, Batch: 64},
	{PrefillTokPerSec: 20000, DecodeTokPerSec: 180, Batch: 48},
	{PrefillTokPerSec: 10000, DecodeTokPerSec: 110, Batch: 32},
	{PrefillTokPerSec: 1500, DecodeTokPerSec: 35, Batch: 16},
}

// LadderEstimator estimates by a model's position on ladder; models off
// the ladder are estimated as the middle tier.
func LadderEstimator(ladder []string, rates []TierRates) Estimator {
	if len(rates) == 0 {
		rates = DefaultTierRates
	}
	return func(model string, promptTokens, maxTokens int) Estimate {
		tier := slices.Index(ladder, model)
		if tier < 0 {
			tier = len(rates) / 2
		}
		if tier >= len(rates) {
			tier = len(rates) - 1
		}
		r := rates[tier]
		prefill := float64(promptTokens) / r.PrefillTokPerSec
		decode := float64(maxTokens) / r.DecodeTokPerSec
		const overhead = 0.02 // scheduling and first-step overhead, seconds
		return Estimate{
			Latency:    time.Duration((overhead + prefill + decode) * float64(time.Second)),
			GPUSeconds: overhead + prefill + decode/r.Batch,
		}
	}
}
