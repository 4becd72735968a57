package control

import (
	"sort"

	"github.com/switchyard-ai/switchyard/schemas"
)

// Reconcile says how to move one pool to desired replicas, given its live
// (heartbeating, not draining) workers and how many are still starting:
// how many to start, and which live workers to drain. Workers still
// starting count toward the pool and are left to join. The workers drained
// are the cheapest to lose: sleeping weights first, then the least loaded,
// then the newest (the highest id). The local scaler and the simulator
// both act on it.
func Reconcile(live []schemas.Heartbeat, starting, desired int) (start int, drain []string) {
	n := len(live) + starting
	if n < desired {
		return desired - n, nil
	}
	if n == desired {
		return 0, nil
	}
	order := make([]int, len(live))
	for i := range order {
		order[i] = i
	}
	sleeping := func(hb *schemas.Heartbeat) bool {
		return len(hb.Models) > 0 && hb.Models[0].State == schemas.WeightSleeping
	}
	sort.SliceStable(order, func(i, j int) bool {
		a, b := &live[order[i]], &live[order[j]]
		if sa, sb := sleeping(a), sleeping(b); sa != sb {
			return sa
		}
		if la, lb := a.Running+a.Waiting, b.Running+b.Waiting; la != lb {
			return la < lb
		}
		return a.WorkerID > b.WorkerID
	})
	for _, i := range order {
		if n <= desired {
			break
		}
		n--
		drain = append(drain, live[i].WorkerID)
	}
	return 0, drain
}
