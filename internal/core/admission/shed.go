package admission

import (
	"fmt"
	"math"
	"time"

	"github.com/switchyard-ai/switchyard/internal/core/queue"
	"github.com/switchyard-ai/switchyard/schemas"
)

// Load is the fleet's state as the admitter sees it, supplied by the
// caller: pending counts of the admitted streams' per-class consumers and
// throughput summed from worker heartbeats.
type Load struct {
	// Pending is admitted-but-not-started requests per class.
	Pending map[string]int
	// PendingTokens is the same queue in tokens (prompt + max_tokens),
	// when the caller tracks it; it is preferred over request counts.
	PendingTokens map[string]float64
	// RequestsPerSec and TokensPerSec are the fleet's recent throughput.
	RequestsPerSec float64
	TokensPerSec   float64
	// Utilization is the fleet's mean GPU utilisation in [0, 1].
	Utilization float64
	// Slots is the live fleet's batch slots (heartbeat max_batch, summed)
	// and FreeSlots those a new request could start in now; 0 Slots means
	// the caller does not know, and the wait is predicted from throughput
	// alone.
	Slots, FreeSlots int
	// WorkerWaiting is requests already dispatched that wait on a worker
	// for a slot or KV blocks: they are ahead of anything admitted now.
	WorkerWaiting int
	// UtilizationByClass is the share of the fleet's KV blocks held by each
	// class's running requests, nil when the heartbeats do not say.
	UtilizationByClass map[string]float64
}

// Shedder predicts queueing delay per priority class and sheds requests
// predicted to miss their deadline.
type Shedder struct {
	// Weights are the router's class weights (its --queue-weights), so the
	// wait predicted here is the queue the router runs: weighted fair
	// queueing between the classes that have work. Nil means
	// queue.DefaultWeights, the router's default.
	Weights map[string]int
	// Margin multiplies a class's predicted wait+service before comparing
	// with the deadline. Lower classes get larger margins so that under
	// overload they are shed first and the higher classes keep their
	// capacity. Nil means DefaultMargins.
	Margin map[string]float64
}

// DefaultMargins: critical and interactive work is admitted on the central
// estimate; standard and batch need 20 % and 50 % headroom.
var DefaultMargins = map[string]float64{
	schemas.PriorityCritical: 1.0, schemas.PriorityInteractive: 1.0,
	schemas.PriorityStandard: 1.2, schemas.PriorityBatch: 1.5,
}

// Wait predicts how long a new request of class waits before it starts.
//
// The router serves the classes by weighted fair queueing: every class
// with work gets capacity in proportion to its weight, and a class that
// runs dry gives its share to the rest. The wait is therefore the time the
// class's own pending work takes to drain in that fluid model (generalised
// processor sharing over the pending work of every class), not the time
// for all higher classes to drain first: a lower class is never starved,
// and a higher class never has the whole fleet while lower ones have work.
// When the load knows the fleet's batch slots, work that fits the idle
// slots costs no wait, and only the excess waits for slots to free at the
// fleet's capacity rate; requests already waiting on workers are ahead of
// everything. Pending tokens, when the load has them and a token rate,
// are preferred over request counts. known is false when the load has no
// throughput figure to divide by — the caller then cannot shed on queue
// depth.
func (s Shedder) Wait(class string, l Load) (wait time.Duration, known bool) {
	if schemas.PriorityRank(class) < 0 {
		class = schemas.Priorities[len(schemas.Priorities)-1]
	}
	seconds := func(x float64) time.Duration { return time.Duration(math.Round(x * float64(time.Second))) }
	if l.TokensPerSec > 0 && len(l.PendingTokens) > 0 && l.Slots == 0 {
		return seconds(s.drain(class, l.PendingTokens, l.TokensPerSec)), true
	}
	if l.RequestsPerSec <= 0 {
		return 0, false
	}
	pending := make(map[string]float64, len(l.Pending))
	all := l.WorkerWaiting
	for c, n := range l.Pending {
		pending[c] = float64(n)
		all += n
	}
	if l.Slots == 0 {
		return seconds(s.drain(class, pending, l.RequestsPerSec)), true
	}
	if all < l.FreeSlots {
		// Work ahead that fits the idle slots starts at once, and so does
		// this request if a slot is left for it: no queue, whatever the
		// recent completion rate says.
		return 0, true
	}
	// The idle slots take the first FreeSlots requests at once; what waits
	// on workers goes before the queue; then the class's share drains its
	// own pending work, and this request takes the next slot to free.
	ahead := float64(l.WorkerWaiting-l.FreeSlots+1)/l.RequestsPerSec + s.drain(class, pending, l.RequestsPerSec)
	return seconds(max(ahead, 0)), true
}

// drain is how long, in seconds, class's pending work takes to be served
// at rate (per second) when the classes with work share it by weight and a
// class that empties passes its share on: generalised processor sharing,
// the fluid form of the router's weighted fair queue.
func (s Shedder) drain(class string, pending map[string]float64, rate float64) float64 {
	if pending[class] <= 0 || rate <= 0 {
		return 0
	}
	type band struct{ left, weight float64 }
	var bands []band
	mine := -1
	for _, c := range schemas.Priorities {
		if pending[c] <= 0 {
			continue
		}
		if c == class {
			mine = len(bands)
		}
		bands = append(bands, band{pending[c], float64(queue.ClassWeight(s.Weights, c))})
	}
	elapsed := 0.0
	for {
		// The band that empties next is the one with the least work per
		// unit of weight; every band is served at rate × its weight share
		// until then.
		total, next := 0.0, -1
		for i, b := range bands {
			if b.left <= 0 {
				continue
			}
			total += b.weight
			if next < 0 || b.left/b.weight < bands[next].left/bands[next].weight {
				next = i
			}
		}
		dt := bands[next].left * total / (rate * bands[next].weight)
		elapsed += dt
		if next == mine || bands[mine].left/bands[mine].weight <= bands[next].left/bands[next].weight {
			return elapsed
		}
		for i := range bands {
			if bands[i].left > 0 {
				bands[i].left -= rate * bands[i].weight / total * dt
			}
		}
		bands[next].left = 0
	}
}

// ShedVerdict is the outcome of Shedder.Check.
type ShedVerdict struct {
	Shed       bool
	Wait       time.Duration
	Completion time.Time
	Reason     string
	Error      *schemas.Error
}

// Check predicts completion = now + margin × (wait + service) and sheds
// when it falls after the deadline: doomed work is refused early instead of
// queued, where it would only delay the work that can still make it.
func (s Shedder) Check(class string, now, deadline time.Time, service time.Duration, l Load) ShedVerdict {
	wait, known := s.Wait(class, l)
	margin := DefaultMargins[class]
	if m, ok := s.Margin[class]; ok {
		margin = m
	}
	if margin <= 0 {
		margin = 1
	}
	need := time.Duration(margin * float64(wait+service))
	v := ShedVerdict{Wait: wait, Completion: now.Add(wait + service)}
	if !known {
		v.Reason = "no fleet throughput yet: queue wait unknown, not shedding"
		if now.Add(service).After(deadline) {
			v.Shed = true
			v.Reason = fmt.Sprintf("service alone (%s) exceeds the %s budget", service.Round(time.Millisecond), deadline.Sub(now).Round(time.Millisecond))
			v.Error = schemas.Errf(schemas.CodeShed, "", "%s", v.Reason)
		}
		return v
	}
	v.Reason = fmt.Sprintf("class %s: predicted wait %s + service %s (x%.2f margin) vs %s budget",
		class, wait.Round(time.Millisecond), service.Round(time.Millisecond), margin, deadline.Sub(now).Round(time.Millisecond))
	if now.Add(need).After(deadline) {
		v.Shed = true
		v.Error = schemas.Errf(schemas.CodeShed, "", "shed under load: %s", v.Reason)
	}
	return v
}

// WaitCheck compares a request's predicted queue wait with the wait it
// measured, so that the predictions shedding and deferral rest on are
// checked against what happened.
type WaitCheck struct {
	Class     string
	Predicted time.Duration
	Measured  time.Duration
}

// Error is predicted minus measured: positive when admission expected a
// longer queue than the request met (it would shed or defer too early).
func (c WaitCheck) Error() time.Duration { return c.Predicted - c.Measured }

// CheckWait measures the queue wait a final result reports — from
// admission to placement (Timing.QueueMs), less the time the request sat
// deferred on purpose — against the predicted wait. ok is false for a
// result that never reached a worker (refused, cancelled or expired in the
// queue before placement), which measured no placement wait.
func CheckWait(class string, predicted, deferred time.Duration, res schemas.Result) (WaitCheck, bool) {
	if res.WorkerID == "" || res.FromCache != "" {
		return WaitCheck{}, false
	}
	measured := time.Duration(res.Timing.QueueMs*float64(time.Millisecond)) - deferred
	return WaitCheck{Class: class, Predicted: predicted, Measured: max(measured, 0)}, true
}
