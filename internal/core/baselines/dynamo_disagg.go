package baselines

import (
	"time"

	"github.com/switchyard-ai/switchyard/internal/core/fleet"
	"github.com/switchyard-ai/switchyard/internal/core/placement"
	"github.com/switchyard-ai/switchyard/internal/core/tokens"
)

// dynamo-disagg: NVIDIA Dynamo's conditional disaggregation, re-implemented
// from the Dynamo docs (github.com/ai-dynamo/dynamo, docs.nvidia.com/dynamo):
//
//   - v0.2–0.4 design doc "Dynamo Disaggregation: Separating Prefill and
//     Decode" (architecture/disagg_serving.md): the decode worker's
//     DisaggregatedRouter prefills remotely iff
//     prompt length − prefix hit length > max_local_prefill_length
//     AND the prefill queue holds fewer than max_prefill_queue_size
//     requests; its disagg example configs set 1000 and 2
//     (DynamoMaxLocalPrefill).
//   - v1.x "Conditional Disaggregation" (advanced-customizations/
//     conditional-disaggregation.md, --router-conditional-disagg): the
//     router itself decides, with a policy over the effective (uncached)
//     input length; this project's issue 28 quotes its isl_bounding
//     policy as "uncached ≥ 2,048 tokens and uncached/raw < 0.7"
//     (DynamoISLBounding, the default). ASSUMPTION: read literally, that
//     ratio would keep every wholly uncached prompt local, the opposite of
//     the doc's stated aim (avoid "the heavy ITL penalty" of long prefills
//     on decode workers, keep local only what the decode worker's cache
//     makes cheap); the ratio is therefore read as Dynamo's
//     eff_isl_ratio_threshold on uncached/raw with the decode worker's
//     cache deciding: remote iff uncached ≥ 2,048 AND uncached/raw ≥ 0.7
//     (stay local when the decode worker holds more than 30 % of the
//     prompt). The v1.x docs' own example sets eff_isl_threshold 4096 and
//     eff_isl_ratio_threshold 0.6 under policy isl_or_load; the numbers
//     here are the issue's. The prefill-queue bound applies under both
//     rules, as the issue asks.
//
// The decode worker is chosen first, by the KV router exactly as the
// aggregated dynamo baseline chooses (kv_overlap_score_weight 1, router
// temperature 0), among decode-capable workers: conditional disaggregation
// needs the decode worker's overlap to decide, so overlap scoring stays
// on (unconditional disaggregation in v1.x turns it off on the decode
// stage). The prefill worker: Dynamo's prefill workers pull from one
// shared prefill queue, first free first; modelled as the prefill-capable
// worker with the fewest queued prompt tokens (heartbeat queue plus the
// router's bookings not yet in a heartbeat), ties at random. The queue
// size compared with max_prefill_queue_size is the requests waiting on
// the prefill workers (heartbeat Waiting plus unabsorbed bookings): what
// the shared queue's depth would be.
//
// Roles: Dynamo's decode workers run local prefills, so the role split
// its guides use is prefill workers "prefill" and decode workers "both"
// (with a link). A decode-only worker cannot prefill locally; when the
// rule says local on one, the prefill goes remote anyway. Without a
// prefill-capable and a decode-capable worker (with links) the policy is
// the aggregated dynamo baseline. Its gate is dynamo's (529 when every
// decode-capable worker is busy).

// DynamoDisaggRule picks the remote-prefill rule.
type DynamoDisaggRule int

const (
	// DynamoISLBounding is v1.x conditional disaggregation's isl_bounding
	// (as issue 28 quotes it; see the file's header).
	DynamoISLBounding DynamoDisaggRule = iota
	// DynamoMaxLocalPrefill is the older DisaggregatedRouter rule.
	DynamoMaxLocalPrefill
)

// DynamoDisaggConfig is the policy's tuning.
type DynamoDisaggConfig struct {
	Router DynamoConfig
	Rule   DynamoDisaggRule
	// MinUncachedTokens and MinUncachedRatio are isl_bounding's bounds:
	// remote iff uncached ≥ MinUncachedTokens and uncached/prompt ≥
	// MinUncachedRatio.
	MinUncachedTokens int
	MinUncachedRatio  float64
	// MaxLocalPrefillLength is the older rule's bound: remote iff
	// uncached > it.
	MaxLocalPrefillLength int
	// MaxPrefillQueueSize: remote only while fewer requests wait for
	// prefill workers (both rules).
	MaxPrefillQueueSize int
}

// DynamoDisaggDefaults: isl_bounding at the numbers, the older
// rule's 1000 and the prefill-queue bound 2 of Dynamo's disagg configs.
var DynamoDisaggDefaults = DynamoDisaggConfig{
	Router: DynamoDefaults, Rule: DynamoISLBounding,
	MinUncachedTokens: 2048, MinUncachedRatio: 0.7,
	MaxLocalPrefillLength: 1000, MaxPrefillQueueSize: 2,
}

// DynamoDisagg is dynamo-disagg.
type DynamoDisagg struct {
	*Dynamo
	cfg   DynamoDisaggConfig
	cost  placement.CostModel
	pools pools
	rest  []*fleet.Worker
}

// NewDynamoDisagg returns Dynamo's conditional disaggregation; cost, if
// it has KVTransferSeconds, prices each split's transfer for the record.
func NewDynamoDisagg(cfg DynamoDisaggConfig, cost placement.CostModel) *DynamoDisagg {
	d := NewDynamo(cfg.Router)
	d.base = newBase("dynamo-disagg")
	d.gateDecode = true
	return &DynamoDisagg{Dynamo: d, cfg: cfg, cost: cost}
}

// Place implements placement.Policy.
func (p *DynamoDisagg) Place(f *fleet.Fleet, req *placement.Request, now time.Time) *placement.Decision {
	if req.Phase != "" || !p.pools.fill(&p.base, f, req.Model, now) {
		// One leg asked for, or no split possible: the KV router over
		// the workers taking that phase.
		return p.Dynamo.Place(f, req, now)
	}
	dec, newBlocks, overlap := p.pick(f, req, p.pools.decode)
	bs := tokens.BlockSize
	cached := min(overlap*bs, req.PromptTokens)
	var pre *fleet.Worker
	if whole := runsWhole(dec); !whole || p.remote(req.PromptTokens, cached) {
		// A decode-only worker cannot prefill locally: its prompt goes
		// to the prefill queue however long that is.
		pre = p.prefillWorker(without(p.rest, p.pools.prefill, dec), whole)
	}
	if pre == nil {
		if !runsWhole(dec) {
			// No other worker can prefill for this decode-only one:
			// the aggregated router over the workers that run whole
			// requests.
			return p.Dynamo.Place(f, req, now)
		}
		d := p.decide(req, dec)
		p.book(req, dec, newBlocks)
		return d
	}
	d := p.decideSplit(req, pre, dec)
	p.book(req, dec, 0) // the decode worker receives the prompt's KV
	preCached := cachedTokens(f, req.BlockHashes, pre, &p.lens, &p.touched)
	splitTerms(d, p.cost, req, preCached, cached)
	return d
}

// remote is the configured rule, before the queue bound.
func (p *DynamoDisagg) remote(prompt, cached int) bool {
	uncached := prompt - cached
	switch p.cfg.Rule {
	case DynamoMaxLocalPrefill:
		return uncached > p.cfg.MaxLocalPrefillLength
	default:
		return uncached >= p.cfg.MinUncachedTokens && float64(uncached) >= p.cfg.MinUncachedRatio*float64(prompt)
	}
}

// prefillWorker is the first free prefill worker of the shared queue, or
// nil when there is none or, if bounded, the queue is at its bound.
func (p *DynamoDisagg) prefillWorker(ws []*fleet.Worker, bounded bool) *fleet.Worker {
	p.rest = ws
	queued := 0
	var best *fleet.Worker
	bestQ, ties := 0, 0
	for _, w := range ws {
		queued += w.Waiting + w.BookedRequests
		q := w.QueuedTokens + w.BookedPromptTokens
		switch {
		case best == nil || q < bestQ:
			best, bestQ, ties = w, q, 1
		case q == bestQ:
			ties++
			if p.rng.IntN(ties) == 0 {
				best = w
			}
		}
	}
	if bounded && p.cfg.MaxPrefillQueueSize > 0 && queued >= p.cfg.MaxPrefillQueueSize {
		return nil
	}
	return best
}
