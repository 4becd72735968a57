package control

// Planner is anything that sizes pools from the controller's inputs: the
// Switchyard Controller, or one of the planner baselines it is measured
// against (internal/core/baselines, planner_*.go). The simulator's autoscaler
// and the live scaler call Decide every Config.Interval with the same
// Inputs and act on Decision.Replicas (and, where a planner sets them, the
// per-worker and shedding decisions) the same way, so every planner runs
// on the same fleet with the same cold-start costs.
type Planner interface {
	// Name is the planner's name in reports and on --planner.
	Name() string
	// Decide makes one decision; Replicas must hold every configured pool.
	Decide(in Inputs) Decision
}

// PlannerSwitchyard is the Controller's name as a Planner.
const PlannerSwitchyard = "switchyard"

// Name is PlannerSwitchyard.
func (c *Controller) Name() string { return PlannerSwitchyard }

// Arrivals turns what a planner sees at each decision into the requests
// that arrived since the last one: completions and errors counted by the
// workers, the growth of what is in the system (running, waiting and
// queued) and the requests turned away without a worker. It is how the
// Controller measures demand, shared so that every planner reads the same
// signal a frontend's request counter would give it. The zero value is
// ready; it is not safe for concurrent use.
type Arrivals struct {
	counted  map[string]uint64
	lastLoad float64
	unserved uint64
	have     bool
}

// Observe returns the arrivals since the previous call (0 on the first).
func (a *Arrivals) Observe(in Inputs) float64 {
	if a.counted == nil {
		a.counted = map[string]uint64{}
	}
	done, load := 0.0, 0.0
	seen := map[string]bool{}
	for i := range in.Workers {
		hb := &in.Workers[i]
		seen[hb.WorkerID] = true
		n := hb.CompletedTotal + hb.ErrorsTotal
		if prev, ok := a.counted[hb.WorkerID]; ok && n >= prev {
			done += float64(n - prev)
		}
		a.counted[hb.WorkerID] = n
		load += float64(hb.Running + hb.Waiting)
	}
	for id := range a.counted {
		if !seen[id] {
			delete(a.counted, id)
		}
	}
	for _, n := range in.Queued {
		load += float64(n)
	}
	out := 0.0
	if a.have {
		out = max(0, done+load-a.lastLoad)
		if in.Unserved >= a.unserved {
			out += float64(in.Unserved - a.unserved)
		}
	}
	a.lastLoad, a.unserved, a.have = load, in.Unserved, true
	return out
}
