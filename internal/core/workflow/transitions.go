package workflow

import (
	"time"

	"github.com/switchyard-ai/switchyard/schemas"
)

// The transitions below are the workflow's state machine: each applies one
// event to a State and says whether anything changed (false: write
// nothing). They are pure so the store (internal/adapter/workflowstore) can
// re-apply them under compare-and-set after losing a race, and so tests and
// the simulator can drive a workflow without a bucket. exists is false for a
// State the store has just made empty (tenant, id and an empty Steps map).

// Outcome is what a change means for the caller: whether it just doomed the
// workflow, which running steps to cancel (publish a schemas.Cancel for
// each), and the GPU-seconds this change saved.
type Outcome struct {
	State           *State
	NewlyDoomed     bool
	Cancel          []Step
	GPUSecondsSaved float64
}

// StartStep records that a step was admitted. The first step seen starts
// the workflow clock, and with it the workflow deadline. predicted is the
// step's predicted latency and gpuSeconds its predicted GPU work. A
// redelivered submission of a step already started changes nothing.
func StartStep(s *State, exists bool, wf schemas.Workflow, requestID string, now time.Time, predicted time.Duration, gpuSeconds float64, maxRetries int) bool {
	if !exists {
		s.StartedAt = now
		s.MaxRetries = maxRetries
		if wf.DeadlineMs > 0 {
			s.Deadline = now.Add(time.Duration(wf.DeadlineMs) * time.Millisecond)
		}
	}
	if wf.Of > s.Of {
		s.Of = wf.Of
	}
	st := s.Steps[wf.Step]
	if st == nil {
		st = &Step{Number: wf.Step}
		s.Steps[wf.Step] = st
	}
	if st.RequestID == requestID && st.Status == StepStarted {
		return false
	}
	st.Attempts++
	st.RequestID = requestID
	st.Status = StepStarted
	st.StartedAt = now
	st.EndedAt = time.Time{}
	st.Error = ""
	st.PredictedSeconds = predicted.Seconds()
	st.GPUSeconds = gpuSeconds
	return true
}

// ApplyResult applies a step's final Result. A stale or duplicate result
// (the step is not running as that request) changes nothing. A failure that
// exhausts the step's retries dooms the workflow at once, so its running
// steps are cancelled without waiting for the next step.
func ApplyResult(s *State, exists bool, res schemas.Result, now time.Time) (bool, Outcome) {
	if !exists {
		return false, Outcome{}
	}
	var st *Step
	for _, c := range s.Steps {
		if c.RequestID == res.ID {
			st = c
		}
	}
	if st == nil || st.Status != StepStarted {
		return false, Outcome{}
	}
	st.EndedAt = now
	switch {
	case res.Status == schemas.StatusOK:
		st.Status = StepFinished
	case res.Error != nil && (res.Error.Code == schemas.CodeCancelled || res.Error.Code == schemas.CodeWorkflowDoomed):
		st.Status = StepCanceled
	default:
		st.Status = StepFailed
		if res.Error != nil {
			st.Error = res.Error.Code + ": " + res.Error.Message
		} else {
			st.Error = res.Status
		}
	}
	var out Outcome
	if !s.Doomed {
		if v := Assess(s, now, 0); v.Doomed {
			out = markDoomed(s, v, now)
		}
	}
	return true, out
}

// Refuse records that a step was refused because the admitter judged the
// workflow doomed (reason). The first refusal marks the workflow doomed and
// returns its running steps to cancel; every refusal adds the refused
// step's predicted GPU work to the savings; a redelivered refusal changes
// nothing.
func Refuse(s *State, exists bool, wf schemas.Workflow, requestID, reason string, now time.Time, gpuSeconds float64) (bool, Outcome) {
	if !exists {
		s.StartedAt = now
		if wf.DeadlineMs > 0 {
			s.Deadline = now.Add(time.Duration(wf.DeadlineMs) * time.Millisecond)
		}
	}
	if wf.Of > s.Of {
		s.Of = wf.Of
	}
	if st := s.Steps[wf.Step]; st != nil && st.RequestID == requestID && st.Status == StepRefused {
		return false, Outcome{}
	}
	var out Outcome
	if !s.Doomed {
		// The admitter judged the workflow doomed with the refused step's
		// prediction, which Assess here does not have: doom it regardless,
		// and cancel what is running.
		v := Assess(s, now, 0)
		if !v.Doomed {
			v.Cancel, v.CancelGPUSeconds = cancellable(s, now)
		}
		v.Doomed, v.Reason = true, reason
		out = markDoomed(s, v, now)
	}
	st := s.Steps[wf.Step]
	if st == nil {
		st = &Step{Number: wf.Step}
		s.Steps[wf.Step] = st
	}
	st.Attempts++
	st.RequestID = requestID
	st.Status = StepRefused
	st.StartedAt, st.EndedAt = now, now
	st.GPUSeconds = gpuSeconds
	s.GPUSecondsSaved += gpuSeconds
	out.GPUSecondsSaved += gpuSeconds
	return true, out
}

// markDoomed flips s to doomed and marks its running steps cancelled.
func markDoomed(s *State, v Verdict, now time.Time) Outcome {
	s.Doomed = true
	s.DoomedAt = now
	s.DoomedReason = v.Reason
	for _, c := range v.Cancel {
		if st := s.Steps[c.Number]; st != nil {
			st.Status = StepCanceled
			st.EndedAt = now
			st.Error = "cancelled: workflow doomed"
		}
	}
	s.GPUSecondsSaved += v.CancelGPUSeconds
	return Outcome{NewlyDoomed: true, Cancel: v.Cancel, GPUSecondsSaved: v.CancelGPUSeconds}
}
