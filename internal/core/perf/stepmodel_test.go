package perf

import (
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/switchyard-ai/switchyard/internal/core/catalog"
)

// The predictor's prefill and decode answers, from the StepModel it
// caches per kind, are the Replica's to the last bit for every valid
// replica the catalog builds (GPU, model, dtype, TP) and random shapes:
// the cache is keyed and filled right, and holds the replica it was asked
// for.
func TestPredictorAnswersAreTheReplicasToTheBit(t *testing.T) {
	cat := catalog.Default()
	pred := NewPredictor(cat)
	rng := rand.New(rand.NewPCG(1, 2))
	replicas := 0
	for _, g := range cat.GPUs() {
		for _, m := range cat.Models() {
			for _, dtype := range []string{catalog.DtypeBF16, catalog.DtypeFP8} {
				for _, tp := range []int{1, 2, 4, 8} {
					r, err := NewReplica(cat, g.Name, m.Name, dtype, tp)
					if err != nil {
						continue
					}
					replicas++
					for range 200 {
						out, batch, ctx := 1+rng.IntN(2000), rng.IntN(600), rng.IntN(1<<17)
						want := float64(out) * r.DecodeStepSeconds(max(batch, 1), ctx+out/2)
						if got := pred.DecodeSeconds(g.Name, m.Name, dtype, tp, out, batch, ctx); math.Float64bits(got) != math.Float64bits(want) {
							t.Fatalf("%s %s %s tp%d decode(%d, %d, %d): %v, want %v", g.Name, m.Name, dtype, tp, out, batch, ctx, got, want)
						}
						n, cached := 1+rng.IntN(1<<17), rng.IntN(1<<17)
						want = r.PrefillSeconds(n, cached)
						if got := pred.PrefillSeconds(g.Name, m.Name, dtype, tp, n, cached); math.Float64bits(got) != math.Float64bits(want) {
							t.Fatalf("%s %s %s tp%d prefill(%d, %d): %v, want %v", g.Name, m.Name, dtype, tp, n, cached, got, want)
						}
					}
				}
			}
		}
	}
	if replicas < 20 {
		t.Fatalf("only %d replicas built", replicas)
	}
}

// A kind asked for by equal names held elsewhere in memory (a request's
// own strings rather than the fleet's) is the kind already built, found
// by value past the by-identity pass: the same answers, no second entry.
func TestPredictorFindsAKindByValue(t *testing.T) {
	p := NewPredictor(nil)
	want := p.DecodeSeconds("h100", "llama-3.1-8b", "bf16", 1, 128, 32, 2000)
	p.DecodeSeconds("a100-80g", "llama-3.1-8b", "bf16", 1, 128, 32, 2000) // a second kind to pass over
	gpu, model, dtype := strings.Clone("h100"), strings.Clone("llama-3.1-8b"), strings.Clone("bf16")
	if got := p.DecodeSeconds(gpu, model, dtype, 1, 128, 32, 2000); got != want {
		t.Fatalf("by value: %v, by identity: %v", got, want)
	}
	if n := len(*p.valid.Load()); n != 2 {
		t.Fatalf("%d kinds listed, want 2", n)
	}
}
