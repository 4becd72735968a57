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
// standard prompt of one chunk or less over the queue ceiling is placed,
// in a workflow or not, while its first token is predicted within its
// target there; a longer prompt, a short one the queue would make late,
// and a short one without the option are held (priority_reserve).
func TestQueueCeilingYieldsToAShortPrompt(t *testing.T) {
	standard := func(prompt int, ttft time.Duration) *Request {
		r := req(schemas.PriorityStandard)
		r.PromptTokens, r.TTFTTarget = prompt, ttft
		return r
	}
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
		{"without the option a short prompt waits", standard(2000, 10*time.Second), nil, ReasonPriorityReserve},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) { overCeiling(t, c.r, c.opts, c.want) })
	}
}

// overCeiling places r on one worker with a 2 s prefill queue, over every
// class's 0.5 s queue ceiling, and checks it is placed (want ReasonNone)
// or held for want alone.
func overCeiling(t *testing.T, r *Request, opts func(*Options), want Reason) {
	t.Helper()
	o := testOpts()
	if opts != nil {
		opts(&o)
	}
	d := place(t, build(spec{gpu: "fast", queued: 20000}), r, o)
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
