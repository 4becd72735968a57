package worker

import (
	"context"
	"hash/fnv"
	"strings"
	"time"

	"github.com/switchyard-ai/switchyard/internal/core/engine"
	"github.com/switchyard-ai/switchyard/schemas"
)

// The simulated GPU: the engine loop that steps internal/core/engine in
// simulated time back to back, what a step emits and finishes, and the
// text a simulated model "generates".

// simClock maps real time onto simulated GPU time at a fixed speed-up.
type simClock struct {
	real0, sim0 time.Time
	speed       float64
}

func (c simClock) now(real time.Time) time.Time {
	return c.sim0.Add(time.Duration(float64(real.Sub(c.real0)) * c.speed))
}

// realUntil is the real time at which the simulated clock reads sim.
func (c simClock) realUntil(sim time.Time) time.Time {
	return c.real0.Add(time.Duration(float64(sim.Sub(c.sim0)) / c.speed))
}

// loop drives the engine: plan a step at the current simulated time, wait
// for it to elapse, then publish what it produced.
//
// While the engine has work its steps follow each other back to back in
// simulated time, as a GPU's do: a step starts where the last one ended,
// not when this goroutine woke up, and the wait is until the step's end on
// the real clock rather than for its length. Otherwise every timer's
// lateness and every publish is added to the next step, and on a loaded
// machine the simulated GPU ran at a third of its modelled speed (a
// 2,000-token decode at 6.4 ms a token took 17 ms a token), so the live
// system and the simulator disagreed for no reason but the emulation.
func (w *Worker) loop(ctx context.Context) {
	var lastEnd time.Time // simulated end of the previous step
	for {
		w.mu.Lock()
		has := w.eng.HasWork()
		w.mu.Unlock()
		if !has {
			lastEnd = time.Time{}
			select {
			case <-ctx.Done():
				return
			case <-w.wake:
				continue
			case <-time.After(50 * time.Millisecond):
				continue
			}
		}
		w.mu.Lock()
		start := w.clock.now(w.sh.Now())
		if !lastEnd.IsZero() && start.After(lastEnd) && start.Sub(lastEnd) < backToBack {
			start = lastEnd
		}
		st := w.eng.Step(start)
		w.mu.Unlock()
		end := start.Add(time.Duration(float64(st.Duration) * w.cfg.Fault.stretch()))
		lastEnd = end
		if wait := w.clock.realUntil(end).Sub(w.sh.Now()); wait > 0 {
			select {
			case <-ctx.Done():
				return
			case <-time.After(wait):
			}
		}
		w.afterStep(ctx, st)
	}
}

// backToBack is how far behind the real clock a step may start and still
// count as following the previous one: a timer's lateness and the publish
// of a step's tokens, not an idle spell.
const backToBack = 50 * time.Millisecond

func (w *Worker) afterStep(ctx context.Context, st engine.Step) {
	w.mu.Lock()
	if len(st.Stored) > 0 || len(st.Evicted) > 0 {
		w.publishKV(st.Stored, st.Evicted)
	}
	now := w.sh.Now()
	emitted := make(map[string]bool, len(st.Emitted))
	for _, e := range st.Emitted {
		if j := w.inflight[e.ID]; j != nil && j.tokens != nil {
			emitted[e.ID] = true
			if j.tokens.add(j.words.next(e.Tokens), e.Tokens, now) {
				w.flush(j.tokens, false)
			}
		}
	}
	// A stream that produced nothing this step (a preempted sequence)
	// still sends what it holds once it has waited long enough.
	for id, j := range w.inflight {
		if j.tokens != nil && !emitted[id] && j.tokens.due(now) {
			w.flush(j.tokens, false)
		}
	}
	type fin struct {
		j *job
		f engine.Finished
	}
	var fins []fin
	for _, f := range st.Finished {
		if j := w.inflight[f.ID]; j != nil {
			delete(w.inflight, f.ID)
			fins = append(fins, fin{j, f})
		}
	}
	w.mu.Unlock()
	for _, x := range fins {
		w.complete(ctx, x.j, x.f)
	}
}

func (w *Worker) complete(ctx context.Context, j *job, f engine.Finished) {
	switch j.d.Phase {
	case schemas.PhasePrefill:
		w.completePrefill(ctx, j, f)
		return
	case schemas.PhaseDecode:
		w.completeDecode(ctx, j, f)
		return
	}
	a := j.d.Admitted
	// A resumed sequence prefilled the tokens streamed before as prompt;
	// they are output the client received, and counted as such.
	k := j.resumed.tokens
	ttft := f.FirstTokenAt.Sub(f.Arrival)
	total := f.FinishedAt.Sub(f.Arrival)
	itl := 0.0
	if f.OutputTokens > 1 {
		itl = float64(f.FinishedAt.Sub(f.FirstTokenAt).Milliseconds()) / float64(f.OutputTokens-1)
	}
	queue := j.d.PlacedAt.Sub(a.SubmittedAt)
	firstToken := queue + ttft
	if k > 0 && !j.resumed.firstAt.IsZero() {
		firstToken = j.resumed.firstAt.Sub(a.SubmittedAt) // what the client saw
	}
	finished := w.sh.Now()
	// A streamed answer is exactly what its chunks carried.
	var text string
	if j.tokens != nil {
		text = j.tokens.Text()
	} else {
		text = SimulatedText(a.Request.ID, a.Model, f.OutputTokens)
	}
	res := schemas.Result{
		ID:           a.Request.ID,
		Tenant:       a.Tenant,
		Status:       schemas.StatusOK,
		Model:        a.Model,
		Text:         text,
		FinishReason: "length",
		Usage:        schemas.Usage{PromptTokens: f.PromptTokens - k, CompletionTokens: f.OutputTokens + k, CachedTokens: f.CachedTokens},
		Timing: schemas.Timing{
			QueueMs: float64(queue.Microseconds()) / 1000,
			TTFTMs:  float64(firstToken.Microseconds()) / 1000,
			ITLMs:   itl,
			TotalMs: float64((queue + total).Microseconds()) / 1000,
		},
		WorkerID:   w.cfg.ID,
		GPU:        w.replica.GPU.Name,
		Simulated:  true,
		Priority:   a.Priority,
		Attempt:    a.Attempt,
		GPUSeconds: f.GPUSeconds,
		CostUSD:    w.eng.CostUSD(f.GPUSeconds),
		FinishedAt: finished,
	}
	if k > 0 {
		reprefill := f.PromptTokens - f.CachedTokens
		res.Reliability = &schemas.Reliability{
			ResumedFromSeq: j.resumed.seq, ResumedTokens: k, ReprefillTokens: reprefill,
			ReprefillGPUSeconds: w.replica.PrefillSeconds(reprefill, f.CachedTokens) * float64(w.replica.TP),
			LostWorkers:         a.ExcludeWorkers,
		}
	}
	dl := a.Deadline
	res.Deadline = &dl
	res.SLOMet = sloMet(&a, firstToken, itl, finished)
	if j.tokens != nil {
		w.flush(j.tokens, true)
	}
	w.finish(ctx, j.d, j.msg, res)
}

var vocab = strings.Fields("the a model token answer result cache prefix batch worker router queue deadline tenant gpu memory value step plan tool")

// SimulatedText is a deterministic stand-in answer of n words. It is
// labelled as simulated in every result (Simulated: true). A streamed
// answer's chunks concatenate to the same text (simWords).
func SimulatedText(seed, model string, n int) string {
	g := newSimWords(seed)
	return g.next(n)
}

func fnvSeed(seed string) uint64 {
	h := fnv.New64a()
	h.Write([]byte(seed))
	return h.Sum64()
}

// instantResult answers a dispatch with zero GPU time.
func (w *Worker) instantResult(d schemas.Dispatch) schemas.Result {
	a := d.Admitted
	now := w.sh.Now()
	total := float64(now.Sub(a.SubmittedAt).Microseconds()) / 1000
	return schemas.Result{
		ID: a.Request.ID, Tenant: a.Tenant, Status: schemas.StatusOK, Model: a.Model,
		FinishReason: "length", Usage: schemas.Usage{PromptTokens: a.PromptTokens},
		Timing:   schemas.Timing{QueueMs: float64(d.PlacedAt.Sub(a.SubmittedAt).Microseconds()) / 1000, TTFTMs: total, TotalMs: total},
		WorkerID: w.cfg.ID, GPU: w.replica.GPU.Name, Simulated: true, Priority: a.Priority,
		FinishedAt: now, SLOMet: sloMet(&a, now.Sub(a.SubmittedAt), 0, now),
	}
}
