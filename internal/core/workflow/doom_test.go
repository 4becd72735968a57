package workflow

import (
	"strings"
	"testing"
	"time"
)

var t0 = time.Date(2025, 1, 1, 12, 0, 0, 0, time.UTC)

func sec(n float64) time.Duration { return time.Duration(n * float64(time.Second)) }

func TestAssess(t *testing.T) {
	cases := []struct {
		name    string
		s       *State
		now     time.Time
		perStep time.Duration
		doomed  bool
		reason  string
		cancels int
	}{
		{name: "nil state is never doomed", s: nil, now: t0, perStep: sec(1)},
		{name: "failure within retries is not doomed",
			s:   &State{Of: 3, MaxRetries: 1, Steps: map[int]*Step{1: {Number: 1, Status: StepFailed, Attempts: 1}}},
			now: t0, perStep: sec(1)},
		{name: "failure beyond retries dooms and cancels running steps",
			s: &State{Of: 4, MaxRetries: 1, Steps: map[int]*Step{
				1: {Number: 1, Status: StepFailed, Attempts: 2, Error: "worker_failed"},
				2: {Number: 2, Status: StepStarted, Attempts: 1, StartedAt: t0, PredictedSeconds: 4, GPUSeconds: 4}}},
			now: t0.Add(sec(1)), perStep: sec(1), doomed: true, reason: "step 1 failed on 2 attempt(s)", cancels: 1},
		{name: "deadline passed",
			s:   &State{Of: 3, StartedAt: t0, Deadline: t0.Add(sec(10)), Steps: map[int]*Step{}},
			now: t0.Add(sec(11)), perStep: sec(1), doomed: true, reason: "deadline passed"},
		{name: "not enough time for remaining steps",
			s: &State{Of: 5, StartedAt: t0, Deadline: t0.Add(sec(10)), Steps: map[int]*Step{
				1: {Number: 1, Status: StepFinished, StartedAt: t0, EndedAt: t0.Add(sec(3))}}},
			// 4 steps left at the observed 3 s/step = 12 s > 7 s left.
			now: t0.Add(sec(3)), perStep: sec(1), doomed: true, reason: "4 step(s) left need 12s"},
		{name: "enough time at the predicted latency",
			s:   &State{Of: 5, StartedAt: t0, Deadline: t0.Add(sec(60)), Steps: map[int]*Step{}},
			now: t0, perStep: sec(2)},
		{name: "unknown step count: only the hard deadline dooms",
			s:   &State{Of: 0, StartedAt: t0, Deadline: t0.Add(sec(5)), Steps: map[int]*Step{}},
			now: t0.Add(sec(4)), perStep: sec(100)},
		{name: "already doomed stays doomed",
			s:   &State{Doomed: true, DoomedReason: "earlier", Steps: map[int]*Step{}},
			now: t0, perStep: sec(1), doomed: true, reason: "earlier"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			v := Assess(c.s, c.now, c.perStep)
			if v.Doomed != c.doomed {
				t.Fatalf("doomed = %v (%s), want %v", v.Doomed, v.Reason, c.doomed)
			}
			if c.reason != "" && !strings.Contains(v.Reason, c.reason) {
				t.Fatalf("reason %q does not contain %q", v.Reason, c.reason)
			}
			if len(v.Cancel) != c.cancels {
				t.Fatalf("cancels = %d, want %d", len(v.Cancel), c.cancels)
			}
		})
	}
}

func TestCancelSavesRemainingWork(t *testing.T) {
	s := &State{Of: 3, MaxRetries: 0, Steps: map[int]*Step{
		1: {Number: 1, Status: StepFailed, Attempts: 1},
		2: {Number: 2, Status: StepStarted, StartedAt: t0, PredictedSeconds: 10, GPUSeconds: 8}}}
	v := Assess(s, t0.Add(sec(5)), sec(1))
	if !v.Doomed || len(v.Cancel) != 1 {
		t.Fatalf("verdict %+v", v)
	}
	// Half the predicted time has passed: half the GPU work is saved.
	if v.CancelGPUSeconds < 3.99 || v.CancelGPUSeconds > 4.01 {
		t.Fatalf("saved %.3f GPU-s, want 4", v.CancelGPUSeconds)
	}
}

func TestSplitBudget(t *testing.T) {
	cases := []struct {
		name string
		left time.Duration
		pred []time.Duration
		want []time.Duration
	}{
		{"equal steps share evenly", sec(12), []time.Duration{sec(1), sec(1), sec(1)}, []time.Duration{sec(4), sec(4), sec(4)}},
		{"proportional to predicted latency", sec(12), []time.Duration{sec(1), sec(2), sec(3)}, []time.Duration{sec(2), sec(4), sec(6)}},
		{"unknown predictions take the mean", sec(9), []time.Duration{sec(2), 0, sec(4)}, []time.Duration{sec(2), sec(3), sec(4)}},
		{"no time left", 0, []time.Duration{sec(1)}, []time.Duration{0}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := SplitBudget(c.left, c.pred)
			var sum time.Duration
			for i := range got {
				if d := got[i] - c.want[i]; d > time.Millisecond || d < -time.Millisecond {
					t.Fatalf("got %v, want %v", got, c.want)
				}
				sum += got[i]
			}
			if sum > c.left {
				t.Fatalf("split %v exceeds the budget %v", sum, c.left)
			}
		})
	}
}

func TestStepDeadline(t *testing.T) {
	s := &State{Of: 4, StartedAt: t0, Deadline: t0.Add(sec(40)), Steps: map[int]*Step{
		1: {Number: 1, Status: StepFinished, StartedAt: t0, EndedAt: t0.Add(sec(4))}}}
	// At t0+4s, 36 s left across 3 steps at the observed 4 s/step: 12 s each.
	d, ok := StepDeadline(s, t0.Add(sec(4)), sec(4), sec(1))
	if !ok || !d.Equal(t0.Add(sec(16))) {
		t.Fatalf("deadline %v ok=%v, want %v", d, ok, t0.Add(sec(16)))
	}
	if _, ok := StepDeadline(&State{Steps: map[int]*Step{}}, t0, sec(1), sec(1)); ok {
		t.Fatal("a workflow without a deadline must not set a step deadline")
	}
}
