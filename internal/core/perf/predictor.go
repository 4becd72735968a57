package perf

import (
	"math"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/switchyard-ai/switchyard/internal/core/catalog"
)

// Predictor answers the router's cost questions by name. It caches one
// Replica per (gpu, model, dtype, tp) key exactly as the caller spells it,
// so after the first call per key a lookup is a scan of the few keys seen
// (a fleet has a handful of kinds), with no lock and no allocation. Unknown or invalid combinations (unknown names, FP8 on
// Ampere, weights that do not fit) are cached too and cost +Inf seconds, so
// a cost-minimising router never picks them. Safe for concurrent use.
type Predictor struct {
	cat *catalog.Catalog
	mu  sync.RWMutex
	rep map[replicaKey]*replicaEntry
	// valid is every valid entry built so far, copied on write: placement
	// asks by name several times per worker it evaluates, and a scan of a
	// handful of keys (their strings usually the heartbeat's own, so equal
	// by pointer) is cheaper than hashing three strings and a read lock.
	valid atomic.Pointer[[]validEntry]
}

// maxValidScan bounds the lock-free list; kinds past it use the map.
const maxValidScan = 16

type validEntry struct {
	k replicaKey
	e *replicaEntry
}

type replicaKey struct {
	gpu, model, dtype string
	tp                int
}

type replicaEntry struct {
	r Replica
	// step is r's StepModel, for the prefill and decode questions.
	step StepModel
	ok   bool
	// gen is the catalog's generation when a failed entry was built: a
	// model learned since (catalog.Learn) may make the key valid.
	gen uint64
}

// NewPredictor returns a Predictor over c (nil = catalog.Default()).
func NewPredictor(c *catalog.Catalog) *Predictor {
	if c == nil {
		c = catalog.Default()
	}
	return &Predictor{cat: c, rep: make(map[replicaKey]*replicaEntry)}
}

// replica returns the cached entry for the key, building it on first use.
// A valid entry is never replaced, so a lookup copies nothing; a failed one
// is rebuilt once the catalog has learned a model since (see gen).
func (p *Predictor) replica(gpu, model, dtype string, tp int) *replicaEntry {
	k := replicaKey{gpu, model, dtype, tp}
	if v := p.valid.Load(); v != nil {
		// By identity first: the caller's strings are usually the very ones
		// the entry was built from (placement asks with its class's GPU and
		// the fleet's canonical model and dtype), and comparing them by
		// pointer is a few instructions where == calls memequal for each
		// string of each entry whose lengths match (h100, h200, b200, l40s),
		// which was a tenth of a roofline-costed placement.
		for i := range *v {
			if e := &(*v)[i]; e.k.tp == tp && same(e.k.gpu, gpu) && same(e.k.model, model) && same(e.k.dtype, dtype) {
				return e.e
			}
		}
		for i := range *v {
			if (*v)[i].k == k {
				return (*v)[i].e
			}
		}
	}
	p.mu.RLock()
	e := p.rep[k]
	p.mu.RUnlock()
	gen := p.cat.Generation()
	if e != nil && (e.ok || e.gen == gen) {
		return e
	}
	r, err := NewReplica(p.cat, gpu, model, dtype, tp)
	p.mu.Lock()
	defer p.mu.Unlock()
	if e := p.rep[k]; e != nil && (e.ok || e.gen == gen) {
		return e
	}
	e = &replicaEntry{r: r, ok: err == nil, gen: gen}
	if e.ok {
		e.step = e.r.StepModel()
	}
	p.rep[k] = e
	if e.ok {
		// Under p.mu: one writer at a time, so the copy loses nothing.
		var next []validEntry
		if v := p.valid.Load(); v != nil {
			next = append(next, *v...)
		}
		if len(next) < maxValidScan {
			next = append(next, validEntry{k, e})
			p.valid.Store(&next)
		}
	}
	return e
}

// same reports whether a and b are the same string in memory (and so
// equal); equal strings elsewhere in memory are not.
func same(a, b string) bool {
	return len(a) == len(b) && unsafe.StringData(a) == unsafe.StringData(b)
}

// PrefillSeconds is the time to prefill newTokens over cachedTokens alone on
// the replica; +Inf when the replica is unknown or invalid.
func (p *Predictor) PrefillSeconds(gpu, model, dtype string, tp, newTokens, cachedTokens int) float64 {
	e := p.replica(gpu, model, dtype, tp)
	if !e.ok {
		return math.Inf(1)
	}
	return e.step.prefill(newTokens, cachedTokens)
}

// DecodeSeconds is the time to produce outputTokens for one sequence while
// batch sequences (itself included) decode with mean context ctx; +Inf when
// the replica is unknown or invalid. The context grows by outputTokens/2 on
// average over the generation.
func (p *Predictor) DecodeSeconds(gpu, model, dtype string, tp, outputTokens, batch, ctx int) float64 {
	e := p.replica(gpu, model, dtype, tp)
	if !e.ok {
		return math.Inf(1)
	}
	if outputTokens <= 0 {
		return 0
	}
	return float64(outputTokens) * e.step.decodeStep(max(batch, 1), ctx+outputTokens/2)
}

// LoadSeconds is the time to make the model servable from a weight state
// (0 for hot); +Inf when the replica is unknown or invalid.
func (p *Predictor) LoadSeconds(gpu, model, dtype string, tp int, fromState string) float64 {
	e := p.replica(gpu, model, dtype, tp)
	if !e.ok {
		return math.Inf(1)
	}
	return e.r.LoadSeconds(fromState)
}

// PricePerHour is the on-demand price of tp GPUs of this type; +Inf for an
// unknown GPU so that it is never the cheapest choice.
func (p *Predictor) PricePerHour(gpu string, tp int) float64 {
	g, ok := p.cat.GPU(gpu)
	if !ok {
		return math.Inf(1)
	}
	return g.PricePerHour * float64(max(tp, 1))
}
