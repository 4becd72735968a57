package baselines

import (
	"time"

	"github.com/switchyard-ai/switchyard/internal/core/fleet"
	"github.com/switchyard-ai/switchyard/internal/core/placement"
	"github.com/switchyard-ai/switchyard/internal/core/tokens"
)

// DynamoConfig is the KV router's tuning.
type DynamoConfig struct {
	// OverlapScoreWeight weighs prefill blocks against decode blocks
	// (--kv-overlap-score-weight, default 1.0).
	OverlapScoreWeight float64
	// Temperature is the softmax temperature over −cost
	// (--router-temperature, default 0: deterministic argmin).
	Temperature float64
}

// DynamoDefaults are the documented defaults.
var DynamoDefaults = DynamoConfig{OverlapScoreWeight: 1.0, Temperature: 0}

// Dynamo is NVIDIA Dynamo's KV-aware router, re-implemented from
// docs/design-docs/router-design.md and docs/components/router/
// router-configuration.md (github.com/ai-dynamo/dynamo): for each worker
//
//	cost = overlap_score_weight × prefill_blocks + decode_blocks
//
// where prefill_blocks are the request's prompt blocks not already cached
// on that worker (from the KV-event radix index) plus the prefill blocks
// already in flight there, and decode_blocks are the distinct KV blocks the
// worker's active sequences hold (shared prefix blocks counted once, as
// Dynamo's ActiveSequences deduplicates by block hash) plus this request's
// blocks not among them. With temperature 0 the lowest
// cost wins, ties at random.
//
// Signal mapping: the cached overlap is the fleet's prefix index (fed by KV
// events, as Dynamo's indexer is); active prefill and decode blocks are the
// router's own book of dispatched, unfinished requests, as Dynamo's
// ActiveSequences are. Dynamo moves a request's blocks from prefill to
// decode at its first token; this router hears only completions, so a
// request's uncached blocks count as prefill until it finishes, which
// overstates prefill load for long generations.
type Dynamo struct {
	base
	cfg     DynamoConfig
	reject  DynamoRejection
	lens    []int32
	touched []int32
	active  map[string]*dynActive // per worker
	booked  map[string]dynBooking
}

type dynActive struct {
	prefill int
	// blocks counts active sequences per prompt block hash; out is the
	// generated-token blocks of active sequences.
	blocks map[uint64]int
	out    int
}

type dynBooking struct {
	worker  string
	prefill int
	out     int
	hashes  []uint64
}

func (p *Dynamo) activeOf(id string) *dynActive {
	a := p.active[id]
	if a == nil {
		a = &dynActive{blocks: make(map[uint64]int)}
		p.active[id] = a
	}
	return a
}

// NewDynamo returns a Dynamo KV router.
func NewDynamo(cfg DynamoConfig) *Dynamo {
	return &Dynamo{base: newBase("dynamo"), cfg: cfg, reject: DynamoRejectionDefaults, active: make(map[string]*dynActive), booked: make(map[string]dynBooking)}
}

// Place implements placement.Policy.
func (p *Dynamo) Place(f *fleet.Fleet, req *placement.Request, now time.Time) *placement.Decision {
	c := p.candidates(f, req.Model, req.Phase, now)
	if len(c) == 0 {
		return p.decide(req, nil)
	}
	best, bestNew, _ := p.pick(f, req, c)
	d := p.decide(req, best)
	p.book(req, best, bestNew)
	return d
}

// pick is the KV router's choice among c: the worker of least cost, its
// prompt blocks not cached there (prefill_blocks less the in-flight
// part) and the blocks it has cached (the overlap).
func (p *Dynamo) pick(f *fleet.Fleet, req *placement.Request, c []*fleet.Worker) (best *fleet.Worker, bestNew, bestOverlap int) {
	for len(p.lens) < f.Prefix().MaxWorker() {
		p.lens = append(p.lens, 0)
	}
	p.touched = f.Prefix().Match(req.BlockHashes, p.lens, p.touched[:0])
	bs := tokens.BlockSize
	reqBlocks := (req.PromptTokens + bs - 1) / bs
	bestCost, ties := 0.0, 0
	for _, w := range c {
		overlap := 0
		if int(w.Idx) < len(p.lens) {
			overlap = int(p.lens[w.Idx])
		}
		newBlocks := max(reqBlocks-overlap, 0)
		a := p.activeOf(w.ID)
		fresh := reqBlocks - len(req.BlockHashes)
		for _, h := range req.BlockHashes {
			if a.blocks[h] == 0 {
				fresh++
			}
		}
		cost := p.cfg.OverlapScoreWeight*float64(newBlocks+a.prefill) + float64(len(a.blocks)+a.out+fresh)
		switch {
		case best == nil || cost < bestCost:
			best, bestCost, bestNew, bestOverlap, ties = w, cost, newBlocks, overlap, 1
		case cost == bestCost:
			ties++
			if p.rng.IntN(ties) == 0 {
				best, bestNew, bestOverlap = w, newBlocks, overlap
			}
		}
	}
	for _, t := range p.touched {
		p.lens[t] = 0
	}
	return best, bestNew, bestOverlap
}

// book enters the request in w's active sequences, as Dynamo's
// ActiveSequences does at dispatch, with prefill blocks to compute there
// (0 for a decode that receives its KV).
func (p *Dynamo) book(req *placement.Request, w *fleet.Worker, prefill int) {
	if w == nil {
		return
	}
	bs := tokens.BlockSize
	b := dynBooking{worker: w.ID, prefill: prefill, out: (req.OutputTokens + bs - 1) / bs, hashes: req.BlockHashes}
	p.booked[req.ID] = b
	a := p.activeOf(w.ID)
	a.prefill += b.prefill
	a.out += b.out
	for _, h := range b.hashes {
		a.blocks[h]++
	}
}

// Done implements the completion hook.
func (p *Dynamo) Done(requestID, workerID string) {
	if !p.base.done(requestID, workerID) {
		return // a split's prefill leg: the decode worker's book stands
	}
	b, ok := p.booked[requestID]
	if !ok {
		return
	}
	delete(p.booked, requestID)
	a := p.activeOf(b.worker)
	a.prefill -= b.prefill
	a.out -= b.out
	for _, h := range b.hashes {
		if a.blocks[h]--; a.blocks[h] <= 0 {
			delete(a.blocks, h)
		}
	}
}
