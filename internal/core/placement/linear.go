package placement

import (
	"math"

	"github.com/switchyard-ai/switchyard/schemas"
)

// LinearCost is a deliberately simple analytic CostModel, for benchmarks and
// examples only: times are linear in tokens at per-GPU rates and scale with
// model size. It is not calibrated; internal/core/perf's roofline Predictor is
// what the router and simulator use.
type LinearCost struct {
	GPUs map[string]LinearGPU
	// ModelScale is each model's cost relative to an 8B model (missing: 1).
	ModelScale map[string]float64
}

// LinearGPU is one GPU's rates for an 8B model at TP 1.
type LinearGPU struct {
	PrefillTokPerSec float64
	DecodeTokPerSec  float64 // per sequence at batch 1
	// BatchSlowdown is the fractional per-token slowdown each extra
	// sequence in the batch adds.
	BatchSlowdown float64
	ColdLoadSec   float64
	PricePerHour  float64
}

// DefaultLinearGPUs are round figures with the right ordering, not
// measurements.
var DefaultLinearGPUs = map[string]LinearGPU{
	"b200": {PrefillTokPerSec: 40000, DecodeTokPerSec: 180, BatchSlowdown: 0.01, ColdLoadSec: 12, PricePerHour: 6},
	"h200": {PrefillTokPerSec: 22000, DecodeTokPerSec: 140, BatchSlowdown: 0.012, ColdLoadSec: 15, PricePerHour: 4},
	"h100": {PrefillTokPerSec: 20000, DecodeTokPerSec: 120, BatchSlowdown: 0.015, ColdLoadSec: 15, PricePerHour: 3},
	"a100": {PrefillTokPerSec: 8000, DecodeTokPerSec: 70, BatchSlowdown: 0.02, ColdLoadSec: 20, PricePerHour: 1.8},
	"l40s": {PrefillTokPerSec: 5000, DecodeTokPerSec: 45, BatchSlowdown: 0.03, ColdLoadSec: 25, PricePerHour: 1.0},
	"l4":   {PrefillTokPerSec: 2500, DecodeTokPerSec: 25, BatchSlowdown: 0.04, ColdLoadSec: 30, PricePerHour: 0.7},
}

func (l *LinearCost) gpu(gpu, model string, tp int) (LinearGPU, float64, bool) {
	g, ok := l.GPUs[gpu]
	if !ok {
		return g, 0, false
	}
	scale := 1.0
	if s, ok := l.ModelScale[model]; ok {
		scale = s
	}
	if tp < 1 {
		tp = 1
	}
	return g, scale / float64(tp), true
}

// PrefillSeconds implements CostModel. Cached tokens cost nothing.
func (l *LinearCost) PrefillSeconds(gpu, model, _ string, tp, newTokens, _ int) float64 {
	g, s, ok := l.gpu(gpu, model, tp)
	if !ok {
		return math.Inf(1)
	}
	return float64(newTokens) / g.PrefillTokPerSec * s
}

// DecodeSeconds implements CostModel.
func (l *LinearCost) DecodeSeconds(gpu, model, _ string, tp, outputTokens, batch, _ int) float64 {
	g, s, ok := l.gpu(gpu, model, tp)
	if !ok {
		return math.Inf(1)
	}
	if batch < 1 {
		batch = 1
	}
	return float64(outputTokens) / g.DecodeTokPerSec * s * (1 + g.BatchSlowdown*float64(batch-1))
}

// LoadSeconds implements CostModel.
func (l *LinearCost) LoadSeconds(gpu, model, _ string, tp int, from string) float64 {
	g, s, ok := l.gpu(gpu, model, tp)
	if !ok {
		return math.Inf(1)
	}
	f := 1.0
	switch from {
	case schemas.WeightHot:
		return 0
	case schemas.WeightSleeping:
		f = 0.1
	case schemas.WeightLoading:
		f = 0.5
	case schemas.WeightAbsent:
		f = 3 // fetched from remote storage first
	}
	return g.ColdLoadSec * s * float64(tp) * f
}

// PricePerHour implements CostModel.
func (l *LinearCost) PricePerHour(gpu string, tp int) float64 {
	g, ok := l.GPUs[gpu]
	if !ok {
		return math.Inf(1)
	}
	if tp < 1 {
		tp = 1
	}
	return g.PricePerHour * float64(tp)
}
