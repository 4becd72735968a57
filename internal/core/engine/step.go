package engine

import (
	"math"
	"time"

	"github.com/switchyard-ai/switchyard/internal/core/perf"
	"github.com/switchyard-ai/switchyard/schemas"
)

// One iteration of the engine, in its three jobs: plan which tokens of
// which sequences run (decodes first, then prefill chunks by class,
// preempting when blocks run out), cost the planned batch with the
// replica's roofline model, and apply it (advance, emit, finish). The
// loading of weights comes before any of them.

// Step plans, costs and applies the iteration that starts at now. KV events
// raised between steps (Cancel, SetWeightState) are reported with it.
func (e *Engine) Step(now time.Time) Step {
	st := e.step(now)
	e.storedBuf = append(e.storedBuf[:0], e.kv.stored...)
	e.evictedBuf = append(e.evictedBuf[:0], e.kv.evicted...)
	e.kv.stored, e.kv.evicted = e.kv.stored[:0], e.kv.evicted[:0]
	st.Stored, st.Evicted = e.storedBuf, e.evictedBuf
	return st
}

func (e *Engine) step(now time.Time) Step {
	out := &e.out
	out.Duration, out.GPUSeconds, out.Batch = 0, 0, perf.Batch{}
	out.Emitted, out.Finished, out.Preempted = out.Emitted[:0], out.Finished[:0], out.Preempted[:0]
	e.expireHolds(now)
	if !e.HasWork() {
		return *out
	}
	if !e.weightsReady(now) {
		return *out
	}
	k := 0
	if e.spec {
		k = e.cfg.Spec.K
	}
	e.now = now
	if !e.planStep(k) {
		// Nothing fits (every block is pinned by sequences that cannot
		// progress); report no progress rather than spin at zero cost.
		return *out
	}
	b := e.planned(k)
	sec := e.model.Step(b)
	dur := time.Duration(math.Round(sec * float64(time.Second)))
	out.Batch, out.Duration, out.GPUSeconds = b, dur, sec*float64(e.rep.TP)
	e.attribute(out.GPUSeconds)
	emitted := e.apply(now.Add(dur), k)
	e.account(now, dur, emitted, true)
	return *out
}

// weightsReady starts loading the weights if they are not hot and reports
// whether they are by now; while they load, the step is the wait.
func (e *Engine) weightsReady(now time.Time) bool {
	if e.weights == schemas.WeightHot {
		return true
	}
	if e.weights != schemas.WeightLoading {
		e.startLoad(now)
	}
	if now.Before(e.loadUntil) {
		e.out.Duration = e.loadUntil.Sub(now)
		e.account(now, e.out.Duration, 0, false)
		return false
	}
	e.Settle(now)
	return true
}

// planStep fills e.plan for one step with k speculative tokens per decode,
// and reports whether anything was planned.
func (e *Engine) planStep(k int) bool {
	budget := e.cfg.TokenBudget
	e.capSec = 0
	if c := e.cfg.CriticalStepTime; c > 0 {
		for _, s := range e.running {
			if !s.decoding {
				continue
			}
			limit := 0.0
			if s.Critical {
				limit = c.Seconds()
			}
			if t := s.TPOTTarget; e.cfg.TargetStepCap && t > 0 {
				tl := targetLimit(s, t, e.now)
				if limit == 0 || tl < limit {
					limit = tl
				}
			}
			if limit > 0 && (e.capSec == 0 || limit < e.capSec) {
				e.capSec = limit
			}
		}
	}
	e.cur = perf.Batch{}
	if k > 0 {
		e.cur.SpecTokens, e.cur.DraftLayers = k, e.cfg.Spec.DraftLayers
	}
	for _, p := range e.plan {
		p.s.planAt = -1
	}
	e.plan = e.plan[:0]
	preempted := e.planDecodes(k, &budget)
	e.planPrefills(preempted, &budget)
	return len(e.plan) > 0
}

// planDecodes plans the decodes first, in admission order: one token each
// (1+k with speculation), they keep every running sequence's inter-token
// latency whatever the prefills do. It reports whether it preempted.
func (e *Engine) planDecodes(k int, budget *int) (preempted bool) {
	for i := 0; i < len(e.running); i++ {
		s := e.running[i]
		if !s.decoding {
			continue
		}
		n := 1 + k
		if n > *budget {
			continue
		}
		ok := true
		for !e.ensure(s, s.computed+n) {
			preempted = true
			v := e.victim(0)
			j := e.preempt(v, budget)
			if v == s {
				ok = false
				i--
				break
			}
			if j < i {
				i--
			}
		}
		if ok {
			e.add(s, n, true, budget)
		}
	}
	return preempted
}

// planPrefills plans prefill chunks by class with what budget is left: a
// running sequence's next chunk before a waiting sequence of the same
// class, but a waiting sequence of a higher class before either. A long
// low-class prompt mid-prefill pauses (keeping its KV) rather than hold a
// critical prompt behind it for seconds of chunks.
func (e *Engine) planPrefills(preempted bool, budget *int) {
	e.pre = e.pre[:0]
	for _, s := range e.running {
		if !s.decoding && s.planAt < 0 {
			e.pre = append(e.pre, s)
		}
	}
	for i := 1; i < len(e.pre); i++ { // stable: equal classes keep admission order
		for j := i; j > 0 && e.pre[j].Priority < e.pre[j-1].Priority; j-- {
			e.pre[j], e.pre[j-1] = e.pre[j-1], e.pre[j]
		}
	}
	ri, waitingBlocked := 0, false
	for *budget > 0 {
		for ri < len(e.pre) && !e.pre[ri].inRun {
			ri++ // preempted earlier in this step
		}
		if !waitingBlocked && len(e.waiting) > 0 && (ri == len(e.pre) || e.waiting[0].Priority < e.pre[ri].Priority) {
			// The head is the highest class waiting (preempted sequences
			// rejoin behind it, being of a lower class).
			waitingBlocked = !e.admit(e.waiting[0], preempted, budget)
			continue
		}
		if ri == len(e.pre) {
			break
		}
		s := e.pre[ri]
		ri++
		n := e.chunk(s, *budget)
		if n == 0 {
			break // the step-time cap is reached
		}
		ok := true
		for !e.ensure(s, s.computed+n) {
			preempted = true
			if v := e.victim(0); e.preempt(v, budget) >= 0 && v == s {
				ok = false
				break
			}
		}
		if ok {
			e.add(s, n, false, budget)
		}
	}
	clear(e.pre)
}

// planned is the batch the plan runs, as the cost model reads it.
func (e *Engine) planned(k int) perf.Batch {
	var b perf.Batch
	for _, p := range e.plan {
		if p.decode {
			b.DecodeSeqs++
			b.DecodeContextTokens += p.s.computed
		} else {
			b.PrefillTokens += p.n
			b.PrefillContext += p.s.computed
			b.PrefillSeqs++
		}
	}
	if b.DecodeSeqs > 0 && k > 0 {
		b.SpecTokens = k
		b.DraftLayers = e.cfg.Spec.DraftLayers
	}
	return b
}

// finish reports s as finished at end and frees its blocks — or, for a
// PrefillOnly sequence, holds them for the decode leg (phases.go).
func (e *Engine) finish(s *seq, end time.Time) {
	f := Finished{
		ID: s.ID, PromptTokens: s.PromptTokens, CachedTokens: s.cached, OutputTokens: s.generated,
		Arrival: s.Arrival, FirstTokenAt: s.firstToken, FinishedAt: end, Preemptions: s.preemptions,
		GPUSeconds: s.gpuSec,
	}
	delete(e.byID, s.ID)
	s.decoding, s.inRun = false, false
	if s.PrefillOnly {
		e.hold(s, end, &f)
	} else {
		e.releaseBlocks(s)
	}
	e.out.Finished = append(e.out.Finished, f)
}

// apply advances every planned sequence by the step that ends at end —
// accepted speculative tokens drawn at the configured rate, a prefill's
// last chunk giving the first token — records what it emitted and what
// finished, frees finished sequences' blocks, and returns the tokens
// emitted.
func (e *Engine) apply(end time.Time, k int) int {
	out := &e.out
	emitted := 0
	for _, p := range e.plan {
		s := p.s
		var got int
		if p.decode {
			got = 1
			for j := 0; j < k && e.rng.Float64() < e.cfg.Spec.Acceptance; j++ {
				got++
			}
			got = min(got, s.MaxTokens-s.generated)
			s.computed += got
		} else {
			s.computed += p.n
			if s.computed < s.total() {
				continue // more chunks to go
			}
			s.decoding, got = true, 1
			if s.firstToken.IsZero() {
				s.firstToken = end
			}
		}
		s.generated += got
		emitted += got
		out.Emitted = append(out.Emitted, Emit{ID: s.ID, Tokens: got})
		if s.generated >= s.MaxTokens {
			e.finish(s, end)
			s.generated = -1 << 30 // marks it for removal below
		}
	}
	if len(out.Finished) > 0 {
		kept := e.running[:0]
		for _, s := range e.running {
			if s.generated >= 0 {
				kept = append(kept, s)
			}
		}
		for i := len(kept); i < len(e.running); i++ {
			e.running[i] = nil
		}
		e.running = kept
	}
	return emitted
}

// targetLimit is the longest step a decoding sequence with TPOT target t
// can take at now and still hold its mean time per token after the first
// within t: its slack so far (t for each token after the first, less the
// time they took) plus the next token's t, a fifth of a token kept spare
// — never under StepTargetShare of t, the cap on its own.
func targetLimit(s *seq, t time.Duration, now time.Time) float64 {
	base := StepTargetShare * t.Seconds()
	if s.firstToken.IsZero() || s.generated < 1 {
		return base
	}
	slack := t.Seconds()*float64(s.generated) - now.Sub(s.firstToken).Seconds() - (1-StepTargetShare)*t.Seconds()
	return max(base, slack)
}
