package workflow

import (
	"sort"
	"time"
)

// SplitBudget divides left across steps in proportion to their predicted
// latencies, so a long step gets a long deadline and a short one a short
// deadline, and every step keeps the same relative slack. Non-positive
// predictions count as the mean of the positive ones (or 1 when none is).
func SplitBudget(left time.Duration, predicted []time.Duration) []time.Duration {
	out := make([]time.Duration, len(predicted))
	if len(predicted) == 0 || left <= 0 {
		return out
	}
	var sum time.Duration
	pos := 0
	for _, p := range predicted {
		if p > 0 {
			sum += p
			pos++
		}
	}
	fill := time.Duration(1)
	if pos > 0 {
		fill = sum / time.Duration(pos)
		if fill <= 0 {
			fill = 1
		}
	}
	w := make([]float64, len(predicted))
	total := 0.0
	for i, p := range predicted {
		if p <= 0 {
			p = fill
		}
		w[i] = float64(p)
		total += w[i]
	}
	for i := range w {
		out[i] = time.Duration(float64(left) * w[i] / total)
	}
	return out
}

// StepDeadline is the deadline the next step gets out of the workflow's
// remaining budget: the time left split across the steps not yet started
// (this one included) in proportion to predicted latency, with this step
// predicted at cur and the others at perStep (or the observed step latency
// once known). ok is false when the workflow has no deadline.
//
// Running steps are not charged: a step admitted while another runs is
// running in parallel with it. Without a step count the step gets the whole
// remaining budget, since there is nothing to split it by.
func StepDeadline(s *State, now time.Time, cur, perStep time.Duration) (time.Time, bool) {
	if s == nil || s.Deadline.IsZero() {
		return time.Time{}, false
	}
	left := s.Deadline.Sub(now)
	if left <= 0 {
		return s.Deadline, true
	}
	if s.Of <= 0 {
		return s.Deadline, true
	}
	if obs := s.ObservedStepLatency(); obs > 0 {
		perStep = obs
	}
	n := s.Of - s.Finished() - len(s.InFlight())
	if n < 1 {
		n = 1
	}
	preds := make([]time.Duration, n)
	preds[0] = cur
	for i := 1; i < n; i++ {
		preds[i] = perStep
	}
	return now.Add(SplitBudget(left, preds)[0]), true
}

func sortedSteps(s *State) []int {
	ns := make([]int, 0, len(s.Steps))
	for n := range s.Steps {
		ns = append(ns, n)
	}
	sort.Ints(ns)
	return ns
}
