package baselines

import (
	"time"

	"github.com/switchyard-ai/switchyard/internal/core/fleet"
	"github.com/switchyard-ai/switchyard/internal/core/placement"
	"github.com/switchyard-ai/switchyard/internal/core/prefix"
)

// SGLangConfig is the cache-aware policy's tuning.
type SGLangConfig struct {
	// CacheThreshold is the minimum prefix match ratio to route by cache.
	CacheThreshold float64
	// BalanceAbsThreshold and BalanceRelThreshold: the system is imbalanced
	// when max_load − min_load > abs AND max_load > rel × min_load.
	BalanceAbsThreshold int
	BalanceRelThreshold float64
	// MaxTreeBlocks bounds each worker's approximate tree (max_tree_size,
	// 2^26 characters by default ≈ 16 M tokens ≈ 2^20 16-token blocks).
	MaxTreeBlocks int
}

// SGLangDefaults are the defaults of the SGLang model gateway's
// cache_aware policy as documented in lightseekorg/smg
// docs/getting-started/load-balancing.md: --cache-threshold 0.3,
// --balance-abs-threshold 64, --balance-rel-threshold 1.5. (Older
// sgl-router docs gave 0.5 / 32 / 1.0001.)
var SGLangDefaults = SGLangConfig{CacheThreshold: 0.3, BalanceAbsThreshold: 64, BalanceRelThreshold: 1.5, MaxTreeBlocks: 1 << 20}

// SGLang is the SGLang router's cache-aware load balancer, re-implemented
// from the SMG docs (docs/concepts/routing/cache-aware.md) and the
// sgl-router README:
//
//  1. If the load is imbalanced (thresholds above), route to the worker
//     with the fewest running requests (shortest queue).
//  2. Otherwise find the worker whose approximate tree has the longest
//     prefix match; if match/prompt > cache_threshold route there,
//     else route to the worker with the smallest tree (most cache room).
//  3. Insert the prompt into the chosen worker's tree.
//
// The tree is approximate: it is built from the router's own routing
// decisions, not from the workers' caches, and evicted LRU past
// max_tree_size. Here it is a prefix.Index over the prompt's chained block
// hashes, fed only by this policy's decisions, which is the same longest
// prefix match at 16-token rather than character granularity. Load is the
// router's count of dispatched, unfinished requests, as sgl-router keeps.
type SGLang struct {
	base
	cfg     SGLangConfig
	tree    *prefix.Index
	lens    []int32
	touched []int32
}

// NewSGLang returns a cache-aware policy.
func NewSGLang(cfg SGLangConfig) *SGLang {
	return &SGLang{base: newBase("sglang"), cfg: cfg, tree: prefix.New(cfg.MaxTreeBlocks)}
}

// Place implements placement.Policy.
func (p *SGLang) Place(f *fleet.Fleet, req *placement.Request, now time.Time) *placement.Decision {
	c := p.candidates(f, req.Model, req.Phase, now)
	if len(c) == 0 {
		return p.decide(req, nil)
	}
	choice := p.pick(f, req, c)
	p.insert(choice, req)
	return p.decide(req, choice)
}

// pick is the cache-aware choice among c (steps 1 and 2 above).
func (p *SGLang) pick(f *fleet.Fleet, req *placement.Request, c []*fleet.Worker) *fleet.Worker {
	minL, maxL := 1<<30, -1
	var least *fleet.Worker
	for _, w := range c {
		l := p.outstanding[w.ID]
		if l < minL {
			minL, least = l, w
		}
		maxL = max(maxL, l)
	}
	if maxL-minL > p.cfg.BalanceAbsThreshold && float64(maxL) > p.cfg.BalanceRelThreshold*float64(minL) {
		return least
	}
	for len(p.lens) < max(p.tree.MaxWorker(), len(f.Workers())) {
		p.lens = append(p.lens, 0)
	}
	p.touched = p.tree.Match(req.BlockHashes, p.lens, p.touched[:0])
	var bestMatch, smallest *fleet.Worker
	bestLen, smallN := int32(0), 1<<62
	for _, w := range c {
		if l := p.lens[w.Idx]; l > bestLen {
			bestLen, bestMatch = l, w
		}
		if n := p.tree.WorkerBlocks(w.Idx); n < smallN {
			smallN, smallest = n, w
		}
	}
	for _, t := range p.touched {
		p.lens[t] = 0
	}
	if n := len(req.BlockHashes); n > 0 && bestMatch != nil && float64(bestLen)/float64(n) > p.cfg.CacheThreshold {
		return bestMatch
	}
	return smallest
}

func (p *SGLang) insert(w *fleet.Worker, req *placement.Request) {
	p.tree.Stored(w.Idx, req.BlockHashes)
}
