package control

import (
	"fmt"
	"testing"
	"time"

	"github.com/switchyard-ai/switchyard/internal/core/engine"
	"github.com/switchyard-ai/switchyard/internal/core/perf"
	"github.com/switchyard-ai/switchyard/schemas"
)

// measured is what the engine did in one regime.
type measured struct {
	itl        time.Duration // mean per-token latency after the first token
	tokensPerS float64       // output tokens per second of the replica
}

// runClosedLoop keeps `concurrency` sequences in the engine (a finished one
// is replaced at once, as a saturated router would) until `total` have
// finished, in virtual time.
func runClosedLoop(t *testing.T, rep perf.Replica, sc engine.SpecConfig, concurrency, total, prompt, output int) measured {
	t.Helper()
	e, err := engine.New(engine.Config{Replica: rep, Spec: sc})
	if err != nil {
		t.Fatal(err)
	}
	now := t0
	next := 0
	add := func() {
		id := fmt.Sprint(next)
		next++
		if err := e.Add(engine.Sequence{ID: id, PromptTokens: prompt, MaxTokens: output, Arrival: now}); err != nil {
			t.Fatal(err)
		}
	}
	for range concurrency {
		add()
	}
	var itlSum time.Duration
	outTok, done := 0, 0
	for done < total {
		st := e.Step(now)
		if st.Duration == 0 && len(st.Emitted) == 0 {
			t.Fatalf("engine stalled: %+v", e.State())
		}
		now = now.Add(st.Duration)
		for _, em := range st.Emitted {
			outTok += em.Tokens
		}
		for _, f := range st.Finished {
			done++
			itlSum += f.FinishedAt.Sub(f.FirstTokenAt) / time.Duration(f.OutputTokens-1)
			if next < total+concurrency {
				add()
			}
		}
	}
	return measured{itl: itlSum / time.Duration(done), tokensPerS: float64(outTok) / now.Sub(t0).Seconds()}
}

// TestSpecDecodingChoiceIsTheMeasuredBetterOne runs the engine in virtual
// time at low and at high load with speculative decoding on and off, and
// checks that the controller picks the better setting in each regime: on
// at low load, where it cuts inter-token latency, off at high load, where
// verifying draft tokens in a compute-bound step costs more throughput
// than it buys. The setting is a draft-model speculator (K 4, α 0.6, a
// draft costing 4 target layers per token) on an A100-80G serving
// llama-3.1-8b: the A100's low FLOP/byte ratio makes decode compute-bound
// at batches a busy replica reaches.
func TestSpecDecodingChoiceIsTheMeasuredBetterOne(t *testing.T) {
	rep, err := perf.NewReplica(nil, "a100-80g", model, "bf16", 1)
	if err != nil {
		t.Fatal(err)
	}
	sc := engine.SpecConfig{K: 4, Acceptance: 0.6, DraftLayers: 4, Seed: 7}
	const prompt, output = 512, 256
	c := newCtl(t, Pool{GPU: "a100-80g", Model: model, Min: 1, Max: 4}, func(c *Config) { c.Spec = sc })
	mix := Mix{PromptTokens: prompt, OutputTokens: output}
	for _, tc := range []struct {
		name        string
		concurrency int
		total       int
		wantOn      bool
	}{
		{"low load", 2, 8, true},
		{"high load", 256, 512, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			on := sc
			on.Enabled = true
			mOn := runClosedLoop(t, rep, on, tc.concurrency, tc.total, prompt, output)
			mOff := runClosedLoop(t, rep, sc, tc.concurrency, tc.total, prompt, output)
			t.Logf("%s (batch %d): spec on ITL %.2f ms, %.0f tok/s; off ITL %.2f ms, %.0f tok/s",
				tc.name, tc.concurrency, ms(mOn.itl), mOn.tokensPerS, ms(mOff.itl), mOff.tokensPerS)

			// The controller sees a worker at that batch in the opposite
			// state and must switch it to the wanted one.
			hb := schemas.Heartbeat{WorkerID: "w", GPU: "a100-80g", TP: 1, MaxBatch: 256, Running: tc.concurrency, SpecDecode: !tc.wantOn,
				Models: []schemas.ModelState{{Name: model, Dtype: "bf16", State: schemas.WeightHot}}}
			d := c.Decide(Inputs{Now: t0.Add(time.Hour * time.Duration(tc.concurrency)), Workers: []schemas.Heartbeat{hb}, Mix: mix})
			if len(d.Spec) != 1 || d.Spec[0].On != tc.wantOn {
				t.Fatalf("controller spec decisions %+v, want on=%v", d.Spec, tc.wantOn)
			}
			t.Logf("controller: %s", d.Spec[0].Reason)
			if tc.wantOn {
				if mOn.itl >= mOff.itl || mOn.tokensPerS <= mOff.tokensPerS {
					t.Errorf("spec on is not better at low load: on %+v off %+v", mOn, mOff)
				}
			} else if mOff.tokensPerS <= mOn.tokensPerS || mOff.itl >= mOn.itl {
				t.Errorf("spec off is not better at high load: on %+v off %+v", mOn, mOff)
			}
		})
	}
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
