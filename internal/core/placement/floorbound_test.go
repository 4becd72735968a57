package placement

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/switchyard-ai/switchyard/internal/core/fleet"
	"github.com/switchyard-ai/switchyard/internal/core/perf"
	"github.com/switchyard-ai/switchyard/schemas"
)

// busyH100s is a fleet of hot llama-3.1-8b H100s at every batch size, their
// caches holding short contexts: where the roofline's decode floor (the
// batch's size, the request's context alone, plus the KV held) sits far
// under the class's table (every sequence at the request's context) for a
// long prompt.
func busyH100s(seed uint64, n int) *fleet.Fleet {
	rng := rand.New(rand.NewPCG(seed, 7))
	f := fleet.New(fleet.Options{})
	for i := range n {
		total := 30000
		running := 1 + rng.IntN(200)
		free := max(0, total-running*(20+rng.IntN(60)))
		f.ApplyHeartbeat(&schemas.Heartbeat{
			WorkerID: fmt.Sprintf("w%02d", i), GPU: "h100", TP: 1,
			HBMTotalBytes: 80 << 30, HBMFreeBytes: 2 << 30, KVBlocksTotal: total, KVBlocksFree: free, BlockSize: 16,
			Models:  []schemas.ModelState{{Name: "llama-3.1-8b", Dtype: "bf16", State: schemas.WeightHot}},
			Running: running, QueuedTokens: rng.IntN(3) * rng.IntN(20000), MaxBatch: 256, PricePerHour: 3,
		}, now)
	}
	return f
}

// longPrompts are uncached prompts of 20k–100k tokens of every class, with
// deadlines from tight to roomy.
func longPrompts(seed uint64, n int) []Request {
	rng := rand.New(rand.NewPCG(seed, 8))
	reqs := make([]Request, n)
	for i := range reqs {
		reqs[i] = Request{ID: fmt.Sprintf("r%d", i), Model: "llama-3.1-8b", Dtype: "bf16",
			Priority:     schemas.Priorities[i%len(schemas.Priorities)],
			PromptTokens: 20000 + rng.IntN(80000), OutputTokens: 50 + rng.IntN(1000),
			Deadline: now.Add(time.Duration(5+rng.IntN(60)) * time.Second)}
	}
	return reqs
}

// The scan's bounds stay under what a worker costs when a request's decode
// is priced from the floor (a critical request's, on every worker): each
// group's bound is under its members' bounds, and the pruned placer picks
// what the exhaustive one picks.
func TestBoundsHoldWhereTheDecodeIsPricedFromTheFloor(t *testing.T) {
	f := busyH100s(3, 60)
	reqs := longPrompts(4, 200)
	pruned := New(perf.NewPredictor(nil), Options{})
	all := New(perf.NewPredictor(nil), Options{Explain: 1 << 20})
	compared, critical := 0, 0
	for i := range reqs {
		r := &reqs[i]
		a := pruned.Place(f, r, now)
		if r.Priority == schemas.PriorityCritical && a.OK() {
			critical++
		}
		compared += checkGroupBounds(t, pruned, i, r)
		aw, at := a.Worker, a.Terms
		b := all.Place(f, r, now)
		if aw != b.Worker || at != b.Terms {
			t.Fatalf("request %d (%s, %d tokens): pruned picked %v, exhaustive %v", i, r.Priority, r.PromptTokens, aw, b.Worker)
		}
	}
	if compared < 1000 || critical < 10 {
		t.Fatalf("only %d comparisons, %d critical placed", compared, critical)
	}
}
