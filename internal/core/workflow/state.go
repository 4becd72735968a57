package workflow

import (
	"sort"
	"time"
)

// Step statuses.
const (
	StepStarted  = "started"
	StepFinished = "finished"
	StepFailed   = "failed"
	StepRefused  = "refused"   // refused at admission because the workflow was doomed
	StepCanceled = "cancelled" // in flight when the workflow was doomed
)

// Step is one step's record. A step may be attempted several times (the
// client resubmits it after a failure); Attempts counts them.
type Step struct {
	Number    int       `json:"n"`
	RequestID string    `json:"request_id,omitempty"`
	Status    string    `json:"status"`
	Attempts  int       `json:"attempts"`
	StartedAt time.Time `json:"started_at"`
	EndedAt   time.Time `json:"ended_at,omitzero"`
	// PredictedSeconds is the admission-time prediction of this step's
	// latency; it is what a cancel saves when the step is still running.
	PredictedSeconds float64 `json:"predicted_s,omitempty"`
	// GPUSeconds is the predicted GPU work of the step, used to count what a
	// refusal or cancel saved.
	GPUSeconds float64 `json:"gpu_s,omitempty"`
	Error      string  `json:"error,omitempty"`
}

// State is everything known about one workflow.
type State struct {
	Tenant string `json:"tenant"`
	ID     string `json:"id"`
	// Of is the total step count, 0 while unknown.
	Of int `json:"of"`
	// StartedAt is when the first step was seen; Deadline is StartedAt plus
	// the workflow's deadline_ms, zero when the workflow has none.
	StartedAt time.Time `json:"started_at"`
	Deadline  time.Time `json:"deadline,omitzero"`
	// MaxRetries is how many times one step may be retried after a failure
	// before the workflow is doomed.
	MaxRetries int           `json:"max_retries"`
	Steps      map[int]*Step `json:"steps"`

	Doomed       bool      `json:"doomed,omitempty"`
	DoomedAt     time.Time `json:"doomed_at,omitzero"`
	DoomedReason string    `json:"doomed_reason,omitempty"`
	// GPUSecondsSaved accumulates the predicted GPU work of refused and
	// cancelled steps.
	GPUSecondsSaved float64 `json:"gpu_seconds_saved,omitempty"`
}

// Clone returns a deep copy, so pure functions can be handed a snapshot
// without aliasing the caller's map.
func (s *State) Clone() *State {
	if s == nil {
		return nil
	}
	c := *s
	c.Steps = make(map[int]*Step, len(s.Steps))
	for k, v := range s.Steps {
		st := *v
		c.Steps[k] = &st
	}
	return &c
}

// Finished counts the finished steps.
func (s *State) Finished() int {
	n := 0
	for _, st := range s.Steps {
		if st.Status == StepFinished {
			n++
		}
	}
	return n
}

// InFlight returns the running steps, lowest step number first.
func (s *State) InFlight() []Step {
	var out []Step
	for _, st := range s.Steps {
		if st.Status == StepStarted {
			out = append(out, *st)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Number < out[j].Number })
	return out
}

// Remaining is the number of steps not yet finished, counting the running
// ones; -1 when the total is unknown.
func (s *State) Remaining() int {
	if s.Of <= 0 {
		return -1
	}
	r := s.Of - s.Finished()
	if r < 0 {
		r = 0
	}
	return r
}

// ObservedStepLatency is the mean latency of the finished steps, or 0 when
// none finished. Observed latency beats a model prediction once there is
// any: it already includes this workflow's real queueing and tool time.
func (s *State) ObservedStepLatency() time.Duration {
	var sum time.Duration
	n := 0
	for _, st := range s.Steps {
		if st.Status == StepFinished && !st.EndedAt.IsZero() && st.EndedAt.After(st.StartedAt) {
			sum += st.EndedAt.Sub(st.StartedAt)
			n++
		}
	}
	if n == 0 {
		return 0
	}
	return sum / time.Duration(n)
}
