package baselines

import (
	"time"

	"github.com/switchyard-ai/switchyard/internal/core/fleet"
	"github.com/switchyard-ai/switchyard/internal/core/placement"
	"github.com/switchyard-ai/switchyard/internal/core/tokens"
)

// llm-d-pd: llm-d's prefill/decode disaggregation, re-implemented from
// llm-d-inference-scheduler (docs/disagg_pd.md, "Disaggregated
// Prefill/Decode Inference Serving in llm-d"; the pd-profile-handler and
// its prefix-based-pd-decider, pkg/plugins/profile/
// prefix_based_pd_decider.go, 2025–26 main branch) and llm-d's
// guides/pd-disaggregation:
//
//  1. The decode profile runs first and picks the decode pod with its
//     scorers: here the llm-d baseline's (precise-prefix-cache 3,
//     kv-cache-utilization 2, queue 2, max-score-picker), among
//     decode-capable pods.
//  2. prefix-based-pd-decider: with the chosen decode pod's prefix match,
//     split iff (1 − hit share) × prompt ≥ nonCachedTokens, i.e. the
//     prompt tokens not cached on the decode pod reach the threshold;
//     a threshold of 0 never splits. The plugin's code default is 0
//     (disaggregation off until configured); ASSUMPTION: 512 here, a
//     value in the range the P/D guide's configs use, not verified
//     against a released chart.
//  3. On a split the prefill profile picks the prefill pod with the same
//     scorer set (prefix-cache plus the load scorers) among
//     prefill-capable pods other than the decode pod; the decode pod's
//     sidecar then pulls the KV (vLLM NixlConnector).
//
// Roles: the decode pod serves the request itself when the decider says
// no, so the guide's split is prefill pods "prefill" and decode pods
// "both" (with a link); a decode-only pod always splits. Without both
// pools the policy is the aggregated llm-d baseline, and its flow control
// is llm-d's, judging the decode pool.

// LLMDPDConfig is the policy's tuning.
type LLMDPDConfig struct {
	// Decode and Prefill are the two profiles' scorer weights.
	Decode, Prefill LLMDWeights
	// NonCachedTokens is the decider's threshold (0: never split).
	NonCachedTokens int
}

// LLMDPDDefaults: the llm-d baseline's scorers in both profiles and the
// assumed 512-token threshold.
var LLMDPDDefaults = LLMDPDConfig{Decode: LLMDDefaults, Prefill: LLMDDefaults, NonCachedTokens: 512}

// LLMDPD is llm-d-pd.
type LLMDPD struct {
	*LLMD
	cfg     LLMDPDConfig
	cost    placement.CostModel
	prefill *LLMD // the prefill profile's scorers (its own scratch)
	pools   pools
	rest    []*fleet.Worker
}

// NewLLMDPD returns llm-d's P/D scheduling; cost, if it has
// KVTransferSeconds, prices each split's transfer for the record.
func NewLLMDPD(cfg LLMDPDConfig, cost placement.CostModel) *LLMDPD {
	w := cfg.Decode
	w.Name = "llm-d-pd"
	d := NewLLMD(w)
	d.gateDecode = true
	pre := NewLLMD(cfg.Prefill)
	pre.rng = d.rng // one seeded stream for the policy
	return &LLMDPD{LLMD: d, cfg: cfg, cost: cost, prefill: pre}
}

// Place implements placement.Policy.
func (p *LLMDPD) Place(f *fleet.Fleet, req *placement.Request, now time.Time) *placement.Decision {
	if req.Phase != "" || !p.pools.fill(&p.base, f, req.Model, now) {
		return p.LLMD.Place(f, req, now)
	}
	dec, _ := p.pick(f, req, p.pools.decode)
	// The decider reads the prefix match even when the decode profile
	// weighs no prefix scorer.
	cached := min(cachedTokens(f, req.BlockHashes, dec, &p.lens, &p.touched), req.PromptTokens)
	whole := runsWhole(dec)
	if whole && !p.disaggregate(req.PromptTokens, cached) {
		return p.decide(req, dec)
	}
	p.rest = without(p.rest, p.pools.prefill, dec)
	if len(p.rest) == 0 {
		if whole {
			return p.decide(req, dec)
		}
		return p.LLMD.Place(f, req, now)
	}
	pre, preBlocks := p.prefill.pick(f, req, p.rest)
	d := p.decideSplit(req, pre, dec)
	splitTerms(d, p.cost, req, preBlocks*tokens.BlockSize, cached)
	return d
}

// disaggregate is the prefix-based-pd-decider.
func (p *LLMDPD) disaggregate(prompt, cached int) bool {
	return p.cfg.NonCachedTokens > 0 && prompt-cached >= p.cfg.NonCachedTokens
}
