package baselines

import (
	"time"

	"github.com/switchyard-ai/switchyard/internal/core/fleet"
	"github.com/switchyard-ai/switchyard/internal/core/placement"
	"github.com/switchyard-ai/switchyard/internal/core/prefix"
)

// sglang-pd: the SGLang router's prefill/decode mode, re-implemented from
// the sgl-router README (sglang v0.4.x–0.5.x, "--pd-disaggregation" with
// "--prefill-policy" and "--decode-policy") and SMG's (sgl-model-gateway)
// docs/concepts/routing and load-balancing pages:
//
//   - every request is split: the router picks a prefill worker and a
//     decode worker, sends the request to both, and the decode server
//     receives the KV (Mooncake or NIXL transfer);
//   - prefill worker by cache_aware, with the cache-aware defaults of
//     the sglang baseline (cache_threshold 0.3, balance thresholds 64
//     and 1.5), its approximate tree fed by this policy's prefill
//     choices, its load the router's in-flight prefill legs;
//   - decode worker by power_of_two: two decode workers drawn at random,
//     the one with fewer in-flight requests (the router's own count, as
//     sgl-router keeps when it has no polled load) wins, ties to the
//     first drawn. The draws come from the policy's seeded generator
//     (Seed in SGLangPDConfig), so a run reproduces.
//
// Roles: SGLang's PD mode runs separate prefill and decode servers, so its
// split is "prefill" and "decode" (role "both" with a link also serves
// either pool). Without both pools the policy is the aggregated sglang
// baseline (cache_aware over whole-request workers); the router forwards
// everything, as the sglang baseline does.

// SGLangPDConfig is the policy's tuning.
type SGLangPDConfig struct {
	// Prefill is the cache_aware policy's tuning on the prefill pool,
	// and of the aggregated fallback.
	Prefill SGLangConfig
	// Seed seeds power_of_two's draws.
	Seed uint64
}

// SGLangPDDefaults are the cache-aware defaults and the package seed.
var SGLangPDDefaults = SGLangPDConfig{Prefill: SGLangDefaults, Seed: Seed}

// SGLangPD is sglang-pd.
type SGLangPD struct {
	*SGLang
	cost  placement.CostModel
	pools pools
	rest  []*fleet.Worker
}

// NewSGLangPD returns SGLang's PD router; cost, if it has
// KVTransferSeconds, prices each split's transfer for the record.
func NewSGLangPD(cfg SGLangPDConfig, cost placement.CostModel) *SGLangPD {
	s := &SGLang{base: newBaseSeed("sglang-pd", cfg.Seed), cfg: cfg.Prefill, tree: prefix.New(cfg.Prefill.MaxTreeBlocks)}
	s.gateDecode = true
	return &SGLangPD{SGLang: s, cost: cost}
}

// Place implements placement.Policy.
func (p *SGLangPD) Place(f *fleet.Fleet, req *placement.Request, now time.Time) *placement.Decision {
	if req.Phase != "" || !p.pools.fill(&p.base, f, req.Model, now) {
		return p.SGLang.Place(f, req, now)
	}
	pre := p.pick(f, req, p.pools.prefill)
	p.rest = without(p.rest, p.pools.decode, pre)
	if len(p.rest) == 0 {
		return p.SGLang.Place(f, req, now)
	}
	dec := p.powerOfTwo(p.rest)
	p.insert(pre, req)
	d := p.decideSplit(req, pre, dec)
	// SGLang routes by its own tree, not the workers' caches; what the
	// KV index says each side holds is still the split's breakdown.
	splitTerms(d, p.cost, req, cachedTokens(f, req.BlockHashes, pre, &p.lens, &p.touched), cachedTokens(f, req.BlockHashes, dec, &p.lens, &p.touched))
	return d
}

// powerOfTwo draws two distinct workers of ws and keeps the less loaded.
func (p *SGLangPD) powerOfTwo(ws []*fleet.Worker) *fleet.Worker {
	if len(ws) == 1 {
		return ws[0]
	}
	i := p.rng.IntN(len(ws))
	j := p.rng.IntN(len(ws) - 1)
	if j >= i {
		j++
	}
	a, b := ws[i], ws[j]
	if p.outstanding[b.ID] < p.outstanding[a.ID] {
		return b
	}
	return a
}
