package engine

import (
	"errors"
	"math"
	"testing"
	"time"

	"github.com/switchyard-ai/switchyard/internal/core/perf"
	"github.com/switchyard-ai/switchyard/schemas"
)

// runTotals steps until idle like run, and also sums what the steps
// reported.
type totals struct {
	emitted          int
	gpuSec           float64
	prefillTokens    int
	steps            int
	firstBatch       perf.Batch
	firstDuration    time.Duration
	firstStepEmitted int
}

func runTotals(t *testing.T, e *Engine, now time.Time) ([]Finished, time.Time, totals) {
	t.Helper()
	var tot totals
	fin, end := run(t, e, now, func(st Step) {
		if tot.steps == 0 {
			tot.firstBatch, tot.firstDuration = st.Batch, st.Duration
			for _, em := range st.Emitted {
				tot.firstStepEmitted += em.Tokens
			}
		}
		tot.steps++
		for _, em := range st.Emitted {
			tot.emitted += em.Tokens
		}
		tot.gpuSec += st.GPUSeconds
		tot.prefillTokens += st.Batch.PrefillTokens
	})
	return fin, end, tot
}

func prefillOnly(id string, seed uint64, prompt, maxTok int, hold time.Duration) Sequence {
	s := seqOf(id, seed, prompt, maxTok)
	s.PrefillOnly, s.HoldKV = true, hold
	return s
}

func transferred(id string, seed uint64, prompt, maxTok int) Sequence {
	s := seqOf(id, seed, prompt, maxTok)
	s.Transferred = true
	return s
}

// A prefill leg runs exactly as a one-token aggregated request would, ends
// after its first token, and keeps its blocks — in use, under rank 0 —
// until the decode side releases them.
func TestPrefillOnlyHoldsKVUntilReleased(t *testing.T) {
	const prompt = 1000 // 62 full blocks + 8 tokens: 63 blocks
	plain := newEngine(t, Config{})
	plain.Add(seqOf("a", 1, prompt, 1))
	want, _, _ := runTotals(t, plain, t0)

	e := newEngine(t, Config{})
	s := prefillOnly("a", 1, prompt, 200, 0)
	s.Priority = 3 // batch class: its held blocks still count under rank 0
	if err := e.Add(s); err != nil {
		t.Fatal(err)
	}
	fin, end, tot := runTotals(t, e, t0)
	if len(fin) != 1 {
		t.Fatalf("finished %+v", fin)
	}
	f := fin[0]
	if f.OutputTokens != 1 || tot.emitted != 1 || !f.Handoff || f.HeldBlocks != 63 {
		t.Errorf("prefill leg %+v, emitted %d", f, tot.emitted)
	}
	if !f.FirstTokenAt.Equal(f.FinishedAt) || !f.FinishedAt.Equal(end) || !f.HeldUntil.Equal(end.Add(DefaultHoldKV)) {
		t.Errorf("times: first %v finished %v held until %v, end %v", f.FirstTokenAt, f.FinishedAt, f.HeldUntil, end)
	}
	if f.FirstTokenAt != want[0].FirstTokenAt || math.Abs(f.GPUSeconds-want[0].GPUSeconds) > 1e-12 || math.Abs(f.GPUSeconds-tot.gpuSec) > 1e-12 {
		t.Errorf("prefill leg costs %.6f GPU-s, first token %v; a plain one-token request %.6f, %v", f.GPUSeconds, f.FirstTokenAt, want[0].GPUSeconds, want[0].FirstTokenAt)
	}
	if e.HasWork() || !e.HoldsKV("a") {
		t.Fatalf("HasWork %v, HoldsKV %v", e.HasWork(), e.HoldsKV("a"))
	}
	st := e.State()
	if st.Running != 0 || st.Waiting != 0 || st.QueuedTokens != 0 || st.HeldKV != 1 || st.KVBlocksHeld != 63 ||
		st.KVBlocksFree != st.KVBlocksTotal-63 || st.KVBlocksByPriority != [NumPriorities]int{63, 0, 0, 0} {
		t.Errorf("state while held %+v", st)
	}
	// A step with no work keeps the hold (it has not expired).
	if st := e.Step(end.Add(time.Second)); st.Duration != 0 || !e.HoldsKV("a") {
		t.Errorf("idle step %+v, held %v", st, e.HoldsKV("a"))
	}
	if !e.ReleaseKV("a") || e.ReleaseKV("a") || e.HoldsKV("a") || e.ReleaseKV("nope") {
		t.Error("ReleaseKV semantics")
	}
	st = e.State()
	if st.HeldKV != 0 || st.KVBlocksHeld != 0 || st.KVBlocksFree != st.KVBlocksTotal || st.KVBlocksCached != 62 ||
		st.KVBlocksByPriority != [NumPriorities]int{} {
		t.Errorf("state after release %+v", st)
	}
	// The released prompt is a cached prefix like any finished one.
	e.Add(seqOf("b", 1, prompt, 1))
	if fin, _, _ := runTotals(t, e, end.Add(2*time.Second)); fin[0].CachedTokens != 992 {
		t.Errorf("after release: cached %d, want 992", fin[0].CachedTokens)
	}
}

// A hold expires at HoldKV after the prefill leg finished, at whichever of
// Step, Settle or a weight unload comes first; Cancel releases it too.
func TestHeldKVExpires(t *testing.T) {
	for _, tc := range []struct {
		name  string
		hold  time.Duration
		after time.Duration // since the leg finished
		free  func(e *Engine, at time.Time)
		held  bool
	}{
		{"settle before the hold ends", 5 * time.Second, 4999 * time.Millisecond, func(e *Engine, at time.Time) { e.Settle(at) }, true},
		{"settle when it ends", 5 * time.Second, 5 * time.Second, func(e *Engine, at time.Time) { e.Settle(at) }, false},
		{"idle step after it ends", 5 * time.Second, 6 * time.Second, func(e *Engine, at time.Time) { e.Step(at) }, false},
		{"default hold, before", 0, DefaultHoldKV - time.Millisecond, func(e *Engine, at time.Time) { e.Settle(at) }, true},
		{"default hold, after", 0, DefaultHoldKV, func(e *Engine, at time.Time) { e.Settle(at) }, false},
		{"step of other work", time.Second, 2 * time.Second, func(e *Engine, at time.Time) {
			e.Add(seqOf("other", 9, 100, 2))
			e.Step(at)
		}, false},
		{"cancel", time.Minute, 0, func(e *Engine, _ time.Time) { e.Cancel("a") }, false},
		{"weights to sleep", time.Minute, 0, func(e *Engine, _ time.Time) {
			if err := e.SetWeightState(schemas.WeightSleeping); err != nil {
				t.Fatal(err)
			}
		}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEngine(t, Config{})
			e.Add(prefillOnly("a", 1, 1000, 10, tc.hold))
			fin, end, _ := runTotals(t, e, t0)
			if at, ok := e.NextHoldExpiry(); !ok || !at.Equal(fin[0].HeldUntil) {
				t.Errorf("NextHoldExpiry %v %v, want %v", at, ok, fin[0].HeldUntil)
			}
			tc.free(e, end.Add(tc.after))
			if e.HoldsKV("a") != tc.held {
				t.Fatalf("held %v, want %v", e.HoldsKV("a"), tc.held)
			}
			st := e.State()
			if tc.held != (st.KVBlocksHeld == 63) || st.HeldKV != map[bool]int{true: 1}[tc.held] {
				t.Errorf("state %+v", st)
			}
			if !tc.held && e.ReleaseKV("a") {
				t.Error("released an expired hold")
			}
			if _, ok := e.NextHoldExpiry(); ok != tc.held {
				t.Errorf("NextHoldExpiry ok %v", ok)
			}
		})
	}
}

// Held blocks are neither evicted nor preempted: a sequence that needs
// them waits until the decode side has pulled the KV.
func TestHeldKVIsNotReclaimed(t *testing.T) {
	e := newEngine(t, Config{KVBlocks: 100})
	e.Add(prefillOnly("held", 1, 800, 10, time.Minute)) // 50 blocks
	_, now, _ := runTotals(t, e, t0)
	big := seqOf("big", 2, 900, 10) // 57 blocks and more: does not fit beside
	big.Priority = 0
	e.Add(big)
	if st := e.Step(now); st.Duration != 0 || len(st.Emitted) != 0 {
		t.Fatalf("ran into held blocks: %+v", st)
	}
	if st := e.State(); st.Waiting != 1 || st.KVBlocksHeld != 50 {
		t.Fatalf("state %+v", st)
	}
	e.ReleaseKV("held")
	if fin, _, _ := runTotals(t, e, now); len(fin) != 1 || fin[0].OutputTokens != 10 {
		t.Fatalf("after release: %+v", fin)
	}
}

// A decode leg computes none of its prompt: its first step is a decode-
// only step over the prompt's context, it generates MaxTokens−1 tokens,
// and it reports MaxTokens with the whole prompt cached.
func TestTransferredDecodesAtOnce(t *testing.T) {
	const prompt = 1000
	for _, tc := range []struct {
		name string
		max  int
		spec bool
	}{
		{"ten tokens", 10, false},
		{"two tokens", 2, false},
		{"one token: nothing to decode", 1, false},
		{"speculative", 50, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := Config{Spec: SpecConfig{Enabled: tc.spec, Seed: 3}}
			e := newEngine(t, cfg)
			if err := e.Add(transferred("a", 1, prompt, tc.max)); err != nil {
				t.Fatal(err)
			}
			if st := e.State(); st.Waiting != 1 || st.QueuedTokens != 0 {
				t.Errorf("a waiting decode leg queues no prefill: %+v", st)
			}
			var fin []Finished
			var tot totals
			if tc.max == 1 {
				st := e.Step(t0)
				fin = append(fin, st.Finished...)
				tot.emitted, tot.gpuSec = len(st.Emitted), st.GPUSeconds
			} else {
				fin, _, tot = runTotals(t, e, t0)
			}
			if len(fin) != 1 {
				t.Fatalf("finished %+v", fin)
			}
			f := fin[0]
			if f.OutputTokens != tc.max || tot.emitted != tc.max-1 || f.CachedTokens != prompt || f.PromptTokens != prompt {
				t.Errorf("decode leg %+v, emitted %d", f, tot.emitted)
			}
			if !f.FirstTokenAt.Equal(t0) || f.Handoff {
				t.Errorf("first token %v (want the arrival), handoff %v", f.FirstTokenAt, f.Handoff)
			}
			if tot.prefillTokens != 0 || math.Abs(f.GPUSeconds-tot.gpuSec) > 1e-12 {
				t.Errorf("prefill tokens %d; GPU-s %.6f of %.6f", tot.prefillTokens, f.GPUSeconds, tot.gpuSec)
			}
			if tc.max > 1 && !tc.spec {
				b := perf.Batch{DecodeSeqs: 1, DecodeContextTokens: prompt}
				rep := replica(t)
				want := time.Duration(math.Round(rep.StepSeconds(b) * float64(time.Second)))
				if tot.firstBatch != b || tot.firstDuration != want || tot.firstStepEmitted != 1 {
					t.Errorf("first step %+v %v emitted %d, want %+v %v", tot.firstBatch, tot.firstDuration, tot.firstStepEmitted, b, want)
				}
			}
			// The pulled blocks stay cached as the prompt's prefix.
			st := e.State()
			if st.KVBlocksCached != 62 || st.KVBlocksFree != st.KVBlocksTotal || e.HasWork() {
				t.Errorf("after the decode leg: %+v", st)
			}
		})
	}
}

// The two legs on one GPU cost exactly what the aggregated request does:
// the prefill leg is its prefill, the decode leg its decode steps.
func TestLegsAddUpToTheAggregatedRequest(t *testing.T) {
	const prompt, out = 3000, 40
	agg := newEngine(t, Config{})
	agg.Add(seqOf("a", 1, prompt, out))
	whole, aggEnd, _ := runTotals(t, agg, t0)

	p := newEngine(t, Config{})
	p.Add(prefillOnly("a", 1, prompt, out, 0))
	pre, preEnd, _ := runTotals(t, p, t0)
	d := newEngine(t, Config{})
	dec := transferred("a", 1, prompt, out)
	dec.Arrival = preEnd // no transfer time: the same GPU's arithmetic
	d.Add(dec)
	post, postEnd, _ := runTotals(t, d, preEnd)

	if got, want := pre[0].GPUSeconds+post[0].GPUSeconds, whole[0].GPUSeconds; math.Abs(got-want) > 1e-9 {
		t.Errorf("legs %.6f + %.6f GPU-s, aggregated %.6f", pre[0].GPUSeconds, post[0].GPUSeconds, want)
	}
	if c := p.CostUSD(pre[0].GPUSeconds) + d.CostUSD(post[0].GPUSeconds); math.Abs(c-agg.CostUSD(whole[0].GPUSeconds)) > 1e-12 {
		t.Errorf("legs cost %g, aggregated %g", c, agg.CostUSD(whole[0].GPUSeconds))
	}
	if !pre[0].FirstTokenAt.Equal(whole[0].FirstTokenAt) || postEnd.Sub(aggEnd).Abs() > time.Microsecond {
		t.Errorf("first token %v vs %v; end %v vs %v", pre[0].FirstTokenAt, whole[0].FirstTokenAt, postEnd, aggEnd)
	}
	if pre[0].OutputTokens+post[0].OutputTokens-1 != whole[0].OutputTokens {
		t.Errorf("tokens %d + %d, aggregated %d", pre[0].OutputTokens, post[0].OutputTokens, whole[0].OutputTokens)
	}
}

// A decode leg waits, like any sequence, until its prompt's blocks fit,
// and on the prefill worker itself (role both) it reuses the held blocks.
func TestTransferredBlocks(t *testing.T) {
	t.Run("waits for room", func(t *testing.T) {
		e := newEngine(t, Config{KVBlocks: 100})
		e.Add(prefillOnly("held", 1, 800, 10, time.Minute)) // 50 blocks
		_, now, _ := runTotals(t, e, t0)
		e.Add(transferred("d", 2, 900, 5)) // 57 blocks
		if st := e.Step(now); st.Duration != 0 {
			t.Fatalf("decoded without room: %+v", st)
		}
		if st := e.State(); st.Waiting != 1 || st.Running != 0 || st.QueuedTokens != 0 {
			t.Errorf("state %+v", st)
		}
		e.ReleaseKV("held")
		if fin, _, _ := runTotals(t, e, now); len(fin) != 1 || fin[0].OutputTokens != 5 {
			t.Errorf("after release: %+v", fin)
		}
	})
	t.Run("same worker shares the held blocks", func(t *testing.T) {
		e := newEngine(t, Config{})
		e.Add(prefillOnly("a", 1, 1000, 10, 0))
		_, now, _ := runTotals(t, e, t0)
		free := e.State().KVBlocksFree
		dec := transferred("a", 1, 1000, 10)
		dec.Arrival = now
		if err := e.Add(dec); err != nil {
			t.Fatal(err)
		}
		e.Step(now)
		// The 62 full prompt blocks are the held ones; only the partial
		// block is new (the first decode token fits in it).
		if got := free - e.State().KVBlocksFree; got != 1 {
			t.Errorf("the decode leg took %d new blocks, want 1", got)
		}
		e.ReleaseKV("a")
		if fin, _, _ := runTotals(t, e, now); len(fin) != 1 || fin[0].OutputTokens != 10 {
			t.Errorf("decode leg %+v", fin)
		}
	})
	t.Run("preempted decode leg recomputes", func(t *testing.T) {
		// After a preemption the pulled KV is gone: the leg is recomputed
		// as any preempted sequence, from its cached prefix.
		e := newEngine(t, Config{KVBlocks: 80})
		low := transferred("low", 1, 1000, 200) // 63 blocks, more as it decodes
		low.Priority = 3
		e.Add(low)
		e.Step(t0)
		hi := seqOf("hi", 2, 300, 5)
		hi.Priority = 0
		e.Add(hi)
		fin, _, _ := runTotals(t, e, t0.Add(time.Second))
		var got Finished
		for _, f := range fin {
			if f.ID == "low" {
				got = f
			}
		}
		if got.OutputTokens != 200 || got.Preemptions == 0 || got.CachedTokens != 1000 {
			t.Errorf("preempted decode leg %+v", got)
		}
	})
}

func TestAddRejectsBothPhases(t *testing.T) {
	e := newEngine(t, Config{})
	s := prefillOnly("a", 1, 100, 10, 0)
	s.Transferred = true
	if err := e.Add(s); !errors.Is(err, ErrPhases) {
		t.Errorf("Add: %v, want ErrPhases", err)
	}
}
