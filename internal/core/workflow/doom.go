package workflow

import (
	"fmt"
	"time"
)

// Verdict is the outcome of Assess.
type Verdict struct {
	Doomed bool
	Reason string
	// Needed is the predicted time to finish the remaining steps and Left
	// the time to the workflow deadline (both zero when not computed).
	Needed, Left time.Duration
	// Cancel lists the in-flight steps to cancel when Doomed.
	Cancel []Step
	// CancelGPUSeconds is the predicted GPU work the cancels save: the part
	// of each running step's predicted work that has not been done yet.
	CancelGPUSeconds float64
}

// Assess decides whether a workflow is doomed at now. perStep is the
// predicted latency of one step, used only until the workflow has finished
// steps of its own to measure (State.ObservedStepLatency).
//
// A workflow is doomed when
//   - it was already marked doomed (doom is final: a later step succeeding
//     cannot undo a step that failed for good),
//   - a step failed on more attempts than MaxRetries allows,
//   - its deadline has passed, or
//   - with the step count known, the running steps' remaining time plus the
//     not-yet-started steps at the per-step latency exceed the time left.
//
// Steps are assumed to run one after another, the common agentic shape
// (each step consumes the previous step's tool output). Running steps
// overlap each other, so only the longest remaining one counts.
func Assess(s *State, now time.Time, perStep time.Duration) Verdict {
	if s == nil {
		return Verdict{}
	}
	doom := func(reason string, needed, left time.Duration) Verdict {
		v := Verdict{Doomed: true, Reason: reason, Needed: needed, Left: left}
		v.Cancel, v.CancelGPUSeconds = cancellable(s, now)
		return v
	}
	if s.Doomed {
		return doom(s.DoomedReason, 0, 0)
	}
	for _, n := range sortedSteps(s) {
		st := s.Steps[n]
		if st.Status == StepFailed && st.Attempts > s.MaxRetries {
			return doom(fmt.Sprintf("step %d failed on %d attempt(s), %d retr(ies) allowed: %s", n, st.Attempts, s.MaxRetries, st.Error), 0, 0)
		}
	}
	if s.Deadline.IsZero() {
		return Verdict{}
	}
	left := s.Deadline.Sub(now)
	if left <= 0 {
		return doom(fmt.Sprintf("workflow deadline passed %s ago", (-left).Round(time.Millisecond)), 0, left)
	}
	if s.Of <= 0 {
		// Without a step count the remaining work is unknown; only the
		// hard deadline above can doom it.
		return Verdict{Left: left}
	}
	if obs := s.ObservedStepLatency(); obs > 0 {
		perStep = obs
	}
	running := s.InFlight()
	var runLeft time.Duration
	for _, st := range running {
		if r := remainingOf(st, now); r > runLeft {
			runLeft = r
		}
	}
	notStarted := s.Of - s.Finished() - len(running)
	if notStarted < 0 {
		notStarted = 0
	}
	needed := runLeft + time.Duration(notStarted)*perStep
	if needed > left {
		return doom(fmt.Sprintf("%d step(s) left need %s at %s/step but only %s remain before the workflow deadline",
			notStarted+len(running), needed.Round(time.Millisecond), perStep.Round(time.Millisecond), left.Round(time.Millisecond)), needed, left)
	}
	return Verdict{Needed: needed, Left: left}
}

// remainingOf is a running step's predicted time still to go.
func remainingOf(st Step, now time.Time) time.Duration {
	pred := time.Duration(st.PredictedSeconds * float64(time.Second))
	r := pred - now.Sub(st.StartedAt)
	if r < 0 {
		return 0
	}
	return r
}

// cancellable returns the running steps and the GPU work their cancel
// saves. A step past its predicted latency is assumed nearly done: it saves
// nothing rather than an invented amount.
func cancellable(s *State, now time.Time) ([]Step, float64) {
	running := s.InFlight()
	saved := 0.0
	for _, st := range running {
		if st.PredictedSeconds <= 0 || st.GPUSeconds <= 0 {
			continue
		}
		frac := remainingOf(st, now).Seconds() / st.PredictedSeconds
		saved += st.GPUSeconds * frac
	}
	return running, saved
}
