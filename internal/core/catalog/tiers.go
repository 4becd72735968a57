package catalog

import (
	"fmt"
	"math"
	"sort"

	"github.com/switchyard-ai/switchyard/schemas"
)

// Weight tiers: where a model's weights sit on a worker, and what it costs
// to bring them into HBM from there (issue 30). A load from a tier is
//
//	FixedSeconds + bytes / (GBps·1e9) [+ the load from Via]
//
// with bytes the whole replica's weights, or one GPU's shard when PerGPU
// (each GPU of a tensor-parallel replica copies its own shard in
// parallel). GPUHeld says whether a replica whose weights sit in the tier
// still holds — and pays for — its GPU: a sleeping engine frees device
// memory, not the device.
//
// The defaults (defaults.json, "weight_tiers") cite their sources; see
// shared/research/gpu-model.md §7 for the measurements behind them.
type Tier struct {
	Name         string  `json:"-"`
	FixedSeconds float64 `json:"fixed_s"`
	GBps         float64 `json:"gbps"`
	PerGPU       bool    `json:"per_gpu,omitempty"`
	// Via is the tier a load from this one continues through (a remote
	// model is downloaded to local disk, then loaded from there).
	Via     string `json:"via,omitempty"`
	GPUHeld bool   `json:"gpu_held,omitempty"`
	Source  string `json:"source,omitempty"`
}

// The tiers, hottest first. Their names are also schemas.ModelState.Tier's
// values (the heartbeat's contract).
const (
	TierHBM       = schemas.TierHBM       // resident and serving
	TierHost      = schemas.TierHost      // asleep in host memory (vLLM sleep level 1)
	TierPageCache = schemas.TierPageCache // in the host's page cache; the engine must start
	TierDisk      = schemas.TierDisk      // on local NVMe; the engine must start
	TierRemote    = schemas.TierRemote    // in a registry or object store only
)

// TierOrder lists the tiers from hottest to coldest.
var TierOrder = []string{TierHBM, TierHost, TierPageCache, TierDisk, TierRemote}

func (t Tier) validate() error {
	switch {
	case t.FixedSeconds < 0:
		return fmt.Errorf("fixed_s must be >= 0")
	case t.GBps < 0:
		return fmt.Errorf("gbps must be >= 0")
	}
	return nil
}

// Tier looks a weight tier up by name.
func (c *Catalog) Tier(name string) (Tier, bool) {
	t, ok := c.tiers[name]
	return t, ok
}

// Tiers returns every weight tier, hottest first (known names in
// TierOrder, then any others by name).
func (c *Catalog) Tiers() []Tier {
	rank := map[string]int{}
	for i, n := range TierOrder {
		rank[n] = i
	}
	out := make([]Tier, 0, len(c.tiers))
	for _, t := range c.tiers {
		out = append(out, t)
	}
	sort.Slice(out, func(i, j int) bool {
		ri, oki := rank[out[i].Name]
		rj, okj := rank[out[j].Name]
		switch {
		case oki && okj:
			return ri < rj
		case oki != okj:
			return oki
		}
		return out[i].Name < out[j].Name
	})
	return out
}

// TierLoadSeconds is the time to bring weightBytes of weights (the whole
// replica's, over tp GPUs) into HBM from the named tier: 0 for hbm, +Inf
// for a tier the catalog does not know (or a loop of Via links).
func (c *Catalog) TierLoadSeconds(name string, weightBytes float64, tp int) float64 {
	s := 0.0
	for hops := 0; name != ""; hops++ {
		t, ok := c.tiers[name]
		if !ok || hops > len(c.tiers) {
			return math.Inf(1)
		}
		b := weightBytes
		if t.PerGPU {
			b /= float64(max(1, tp))
		}
		s += t.FixedSeconds
		if t.GBps > 0 {
			s += b / (t.GBps * 1e9)
		}
		name = t.Via
	}
	return s
}
