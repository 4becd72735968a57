package control

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/switchyard-ai/switchyard/internal/core/engine"
	"github.com/switchyard-ai/switchyard/internal/core/perf"
)

// longPromptMix draws n requests with lognormal prompt and output lengths
// (σ 1: the root-mean-square prompt is 1.65× the mean, a long tail as in
// Mooncake's conversation trace, whose 12.4k-token mean prompt has a
// 20.5k-token root mean square) and returns them with their Mix.
func longPromptMix(n int, meanPrompt, meanOutput float64, seed uint64) (prompts, outputs []int, mix Mix) {
	rng := rand.New(rand.NewPCG(seed, 1))
	const sigma = 1.0
	draw := func(mean float64, lo, hi int) int {
		mu := math.Log(mean) - sigma*sigma/2
		return min(hi, max(lo, int(math.Round(math.Exp(mu+sigma*rng.NormFloat64())))))
	}
	var sp, so, sq float64
	for range n {
		p, o := draw(meanPrompt, 256, 120_000), draw(meanOutput, 2, 4096)
		prompts, outputs = append(prompts, p), append(outputs, o)
		sp += float64(p)
		so += float64(o)
		sq += float64(p) * float64(p)
	}
	k := float64(n)
	return prompts, outputs, Mix{PromptTokens: sp / k, OutputTokens: so / k, PromptTokensSquared: sq / k}
}

// closedLoopRate keeps batch sequences in the engine, each finished one
// replaced at once by the next request of the list (a saturated router),
// and measures completions per second and the mean step a decoding
// sequence sees (token-weighted) after a warm-up of the first warm.
func closedLoopRate(t *testing.T, rep perf.Replica, batch int, prompts, outputs []int, warm, total int) (perSec, meanStep float64) {
	t.Helper()
	e, err := engine.New(engine.Config{Replica: rep, CriticalStepTime: -1})
	if err != nil {
		t.Fatal(err)
	}
	now, next := t0, 0
	add := func() {
		k := next % len(prompts)
		if err := e.Add(engine.Sequence{ID: fmt.Sprint(next), PromptTokens: prompts[k], MaxTokens: outputs[k], Arrival: now}); err != nil {
			t.Fatal(err)
		}
		next++
	}
	for range batch {
		add()
	}
	var start time.Time
	done, tokens := 0, 0
	for done < total {
		st := e.Step(now)
		if st.Duration == 0 && len(st.Emitted) == 0 {
			t.Fatalf("engine stalled: %+v", e.State())
		}
		now = now.Add(st.Duration)
		for _, f := range st.Finished {
			done++
			if done == warm {
				start, tokens = now, 0
			} else if done > warm {
				tokens += f.OutputTokens
			}
			add()
		}
	}
	el := now.Sub(start).Seconds()
	return float64(total-warm) / el, el * float64(batch) / float64(tokens)
}

// TestCapacityOfALongPromptMixIsWhatTheEngineSustains pins the capacity
// the controller plans per replica against the engine it plans for, on a
// mix whose prefill dominates (12k-token prompts with a long tail, 350
// tokens out: Mooncake's conversation shape, the case that was planned at
// about twice what a replica serves). At the target batch the model picks
// for the 50 ms ITL target, the engine run closed-loop at that batch must
// complete what the model says, to within 30 %, with its mean step near
// the target. A mix of short prompts (Azure code's shape) is held to the
// same bound. The smooth steady state of perf.SteadyState, which the
// controller used before, is logged beside it: for the long prompts it
// hides every prefill token under the decodes' memory reads and skips the
// attention over earlier chunks.
func TestCapacityOfALongPromptMixIsWhatTheEngineSustains(t *testing.T) {
	rep, err := perf.NewReplica(nil, "h100", model, "bf16", 1)
	if err != nil {
		t.Fatal(err)
	}
	const itl = 50 * time.Millisecond
	for _, tc := range []struct {
		name                   string
		meanPrompt, meanOutput float64
	}{
		{"long prompts (12k in, 350 out)", 12400, 350},
		{"short prompts (2k in, 28 out)", 2048, 28},
	} {
		t.Run(tc.name, func(t *testing.T) {
			prompts, outputs, mix := longPromptMix(4000, tc.meanPrompt, tc.meanOutput, 3)
			b := TargetBatch(rep, mix, itl)
			modelled := Capacity(rep, mix, itl)
			got, step := closedLoopRate(t, rep, b, prompts, outputs, 300, 2300)
			_, smoothTPS := rep.SteadyState(int(mix.PromptTokens), int(mix.OutputTokens), b)
			t.Logf("mix %.0f in (rms %.0f), %.0f out: target batch %d, modelled %.3f req/s, engine %.3f req/s with a %.1f ms mean step; smooth steady state %.3f req/s",
				mix.PromptTokens, math.Sqrt(mix.PromptTokensSquared), mix.OutputTokens, b, modelled, got, 1000*step, smoothTPS/mix.OutputTokens)
			if r := modelled / got; r < 1/1.3 || r > 1.3 {
				t.Errorf("modelled capacity %.3f req/s is %.2f× what the engine completes at its batch (%.3f), want within 30 %%", modelled, r, got)
			}
			if step > 1.3*itl.Seconds() {
				t.Errorf("the engine's mean step at the target batch is %.1f ms, want near the %v target", 1000*step, itl)
			}
		})
	}
}

// TestSpreadOfPromptsCostsCapacity: the same mean prompt with a long tail
// (a higher mean square) plans less per replica — attention grows with a
// prompt's square — and no spread recorded plans as if every prompt were
// the mean.
func TestSpreadOfPromptsCostsCapacity(t *testing.T) {
	rep, err := perf.NewReplica(nil, "h100", model, "bf16", 1)
	if err != nil {
		t.Fatal(err)
	}
	const itl = 50 * time.Millisecond
	flat := Mix{PromptTokens: 12400, OutputTokens: 350}
	same := Mix{PromptTokens: 12400, OutputTokens: 350, PromptTokensSquared: 12400 * 12400}
	tail := Mix{PromptTokens: 12400, OutputTokens: 350, PromptTokensSquared: 20500 * 20500}
	if a, b := Capacity(rep, flat, itl), Capacity(rep, same, itl); a != b {
		t.Errorf("no spread recorded plans %.4f, a recorded spread of zero %.4f: want the same", a, b)
	}
	if a, b := Capacity(rep, flat, itl), Capacity(rep, tail, itl); b >= a {
		t.Errorf("a long tail of prompts plans %.3f req/s, no tail %.3f: want less", b, a)
	}
	if a, b := BurstCapacity(rep, flat, itl), BurstCapacity(rep, tail, itl); b >= a {
		t.Errorf("a long tail of prompts starts %.3f req/s in a burst, no tail %.3f: want fewer", b, a)
	}
}
