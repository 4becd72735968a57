package placement

import (
	"testing"
	"time"

	"github.com/switchyard-ai/switchyard/schemas"
)

// TestQueueCeilingYieldsToAStepsTarget: an interactive workflow step over
// the queue ceiling (a 2 s queue against the 0.5 s ceiling) is placed
// while its first token is still predicted within its TTFT target there,
// and held (priority_reserve) when it is not; an interactive request
// outside a workflow is held either way, and so is a step once
// QueueCeilingYields names no class.
func TestQueueCeilingYieldsToAStepsTarget(t *testing.T) {
	interactive := func(ttft time.Duration, step bool) *Request {
		r := req(schemas.PriorityInteractive)
		r.TTFTTarget = ttft
		if step {
			r = withWorkflow(r, 2, 4, 0)
		}
		return r
	}
	noYield := func(o *Options) { o.QueueCeilingYields = map[string]bool{} }
	cases := []struct {
		name string
		r    *Request
		opts func(*Options)
		want Reason // ReasonNone: placed
	}{
		{"a step in time joins the queue", interactive(5*time.Second, true), nil, ReasonNone},
		{"a step the queue would make late waits", interactive(1500*time.Millisecond, true), nil, ReasonPriorityReserve},
		{"a request outside a workflow waits", interactive(5*time.Second, false), nil, ReasonPriorityReserve},
		{"no class yields", interactive(5*time.Second, true), noYield, ReasonPriorityReserve},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) { overCeiling(t, c.r, c.opts, c.want) })
	}
}

// TestQueueCeilingYieldsToAShortPrompt: with QueueCeilingYieldsUnder, a
// standard prompt of one chunk or less outside a workflow, over the queue
// ceiling, is placed while its first token is predicted within its target
// there and the worker's batch, with it and those waiting, fills at most
// half its slots; a longer prompt, a short one the queue would make late,
// a short workflow step, a short one onto a batch past half its slots, one
// while a higher class waits in the router, and a short one without the
// option are held (priority_reserve).
func TestQueueCeilingYieldsToAShortPrompt(t *testing.T) {
	standard := func(prompt int, ttft time.Duration) *Request {
		r := req(schemas.PriorityStandard)
		r.PromptTokens, r.TTFTTarget = prompt, ttft
		return r
	}
	step := withWorkflow(standard(2000, 10*time.Second), 2, 4, 0)
	behindHigher := standard(2000, 10*time.Second)
	behindHigher.HigherWaiting = 1
	spare := spec{gpu: "fast", queued: 20000, running: 2, waiting: 1, maxBatch: 8}  // 2 + 1 + 1 of 8
	filled := spec{gpu: "fast", queued: 20000, running: 3, waiting: 1, maxBatch: 8} // 3 + 1 + 1 of 8
	short := func(o *Options) {
		o.QueueCeilingYieldsUnder = map[string]int{schemas.PriorityStandard: DefaultChunkTokens}
	}
	cases := []struct {
		name string
		r    *Request
		opts func(*Options)
		want Reason // ReasonNone: placed
	}{
		{"a short prompt in time joins the queue", standard(2000, 10*time.Second), short, ReasonNone},
		{"a prompt over one chunk waits", standard(DefaultChunkTokens+16, 10*time.Second), short, ReasonPriorityReserve},
		{"a short prompt the queue would make late waits", standard(2000, 1500*time.Millisecond), short, ReasonPriorityReserve},
		{"a short workflow step waits", step, short, ReasonPriorityReserve},
		{"a short prompt waits behind a higher class in the router", behindHigher, short, ReasonPriorityReserve},
		{"without the option a short prompt waits", standard(2000, 10*time.Second), nil, ReasonPriorityReserve},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) { overCeiling(t, c.r, c.opts, c.want) })
	}
	slots := []struct {
		name string
		w    spec
		want Reason
	}{
		{"half the batch slots or fewer: joins", spare, ReasonNone},
		{"past half the batch slots: waits", filled, ReasonPriorityReserve},
	}
	for _, c := range slots {
		t.Run(c.name, func(t *testing.T) { overCeilingOn(t, c.w, standard(2000, 10*time.Second), short, c.want) })
	}
}

// overCeiling places r on one worker with a 2 s prefill queue, over every
// class's 0.5 s queue ceiling, and checks it is placed (want ReasonNone)
// or held for want alone.
func overCeiling(t *testing.T, r *Request, opts func(*Options), want Reason) {
	t.Helper()
	overCeilingOn(t, spec{gpu: "fast", queued: 20000}, r, opts, want)
}

// overCeilingOn is overCeiling on the worker w (its queue over the
// ceiling too).
func overCeilingOn(t *testing.T, w spec, r *Request, opts func(*Options), want Reason) {
	t.Helper()
	o := testOpts()
	if opts != nil {
		opts(&o)
	}
	d := place(t, build(w), r, o)
	if want == ReasonNone {
		if !d.OK() {
			t.Fatalf("held: %v", d.Rejections[0].Reason)
		}
		if q := d.Terms.QueueSeconds; q <= DefaultQueueCeiling[r.Priority] {
			t.Fatalf("queue_s %.2f: the case must be over the ceiling", q)
		}
		return
	}
	if d.OK() || len(d.Rejections) != 1 || d.Rejections[0].Reason != want {
		t.Fatalf("worker %s, rejections %v: want one %v", winner(d), d.Rejections, want)
	}
}
