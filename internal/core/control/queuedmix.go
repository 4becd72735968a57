package control

import "math"

// QueuedByModelFrom estimates Inputs.QueuedByModel from what the routers
// hold, by model, and the router consumers' backlog over every class. The
// routers count only what they have pulled; the backlog also holds what
// none has pulled yet (past a router's window, or paced by its pull rate)
// and bounds a dead router's figure that has not lapsed. So the routers'
// mix is scaled to the backlog, by largest remainder so that the models'
// counts add up to it (ties to the lower name, for a deterministic
// answer). A negative backlog (unknown) or one equal to what is held
// leaves held as it is; nil held, or nothing held against a non-empty
// backlog (no mix to scale), is nil: the queue's models are unknown and
// the core splits the queue over the pools by capacity.
func QueuedByModelFrom(held map[string]int, backlog int) map[string]int {
	total := 0
	for _, n := range held {
		total += n
	}
	if held == nil || backlog < 0 || total == backlog {
		return held
	}
	if total == 0 {
		return nil
	}
	type part struct {
		m    string
		frac float64
	}
	scale := float64(backlog) / float64(total)
	out := make(map[string]int, len(held))
	parts := make([]part, 0, len(held))
	sum := 0
	for m, n := range held {
		v := float64(n) * scale
		out[m] = int(math.Floor(v))
		sum += out[m]
		parts = append(parts, part{m, v - math.Floor(v)})
	}
	for left := backlog - sum; left > 0; left-- {
		best := -1
		for i, p := range parts {
			if best < 0 || p.frac > parts[best].frac || (p.frac == parts[best].frac && p.m < parts[best].m) {
				best = i
			}
		}
		out[parts[best].m]++
		parts[best].frac = -1
	}
	return out
}
