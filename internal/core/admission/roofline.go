package admission

import (
	"math"
	"slices"
	"time"
)

// ReplicaKind is one kind of replica the fleet runs: the GPU, how many of
// them serve one replica, and the dtype it serves a model in.
type ReplicaKind struct {
	GPU   string
	TP    int
	Dtype string
}

// ServiceModel predicts prefill and decode seconds on one kind of replica;
// internal/core/perf's Predictor is one (the router's placement cost model).
type ServiceModel interface {
	PrefillSeconds(gpu, model, dtype string, tp, newTokens, cachedTokens int) float64
	DecodeSeconds(gpu, model, dtype string, tp, outputTokens, batch, ctx int) float64
}

// Kinds lists the distinct replica kinds among the live workers that
// serve model, or among all live workers when none lists it (a cold load
// would run there). The admitter and the simulator estimate service time
// over the same kinds, read from the same heartbeats.
func (f *FleetView) Kinds(now time.Time, model string, dst []ReplicaKind) []ReplicaKind {
	dst = dst[:0]
	live := f.live(now)
	for pass := 0; pass < 2 && len(dst) == 0; pass++ {
		for _, w := range live {
			k := ReplicaKind{GPU: w.last.GPU, TP: max(1, w.last.TP), Dtype: "bf16"}
			if pass == 0 {
				found := false
				for _, m := range w.last.Models {
					if m.Name == model {
						found = true
						if m.Dtype != "" {
							k.Dtype = m.Dtype
						}
						break
					}
				}
				if !found {
					continue
				}
			}
			if !slices.Contains(dst, k) {
				dst = append(dst, k)
			}
		}
	}
	return dst
}

// RooflineEstimate predicts a request alone and uncached on the fastest of
// kinds: the service time the shedder adds to the predicted wait, and its
// GPU-seconds. With no kinds (an empty fleet) it reports ok=false, and the
// caller falls back to the ladder's order-of-magnitude rates.
func RooflineEstimate(m ServiceModel, kinds []ReplicaKind, model string, promptTokens, maxTokens int) (Estimate, bool) {
	best := math.Inf(1)
	var gpuSec float64
	for _, k := range kinds {
		p := m.PrefillSeconds(k.GPU, model, k.Dtype, k.TP, promptTokens, 0)
		d := m.DecodeSeconds(k.GPU, model, k.Dtype, k.TP, maxTokens, 1, promptTokens)
		if s := p + d; s < best {
			best, gpuSec = s, (p+d)*float64(k.TP)
		}
	}
	if math.IsInf(best, 1) || math.IsNaN(best) {
		return Estimate{}, false
	}
	return Estimate{Latency: time.Duration(best * float64(time.Second)), GPUSeconds: gpuSec}, true
}
