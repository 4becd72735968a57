package control

import "slices"

// The share of the traffic a fleet sized for the high classes must serve.
//
// Sizing a fleet for the high classes' share of the arrivals alone assumes
// the router serves them first. Its class queue does not: it is weighted
// fair (ClassWeights, the router's 8:4:2:1 by default), so while every
// class queues the lower classes still get their weighted share of the
// starts, and a class whose share of the traffic exceeds its share of the
// weights waits behind them. On the demo's mix (critical 20 %, interactive
// 30 %, standard 30 %, batch 20 %) the interactive class is served in full
// only by a fleet that can take 72.5 % of all arrivals, not the 50 % the
// two high classes send: interactive gets 4/7 of what critical leaves, and
// 4/7 × (0.725 − 0.2) = 0.3. The simulated demo showed it (fixed 3 H100s
// at 64 % of the peak's arrivals: interactive 0.983; fixed 4 at 86 %: 1.000).

// queueShare is the least fraction of the arrivals the fleet must be able
// to serve for every high class to be served in full under weighted fair
// sharing (generalised processor sharing over the classes' recent mix),
// with lower classes queued and taking their weighted share. It is the
// high classes' share when the lower classes send nothing, and 1 until
// MinSLOSamples results have been seen.
func (c *Controller) queueShare(slo map[string]Attainment) float64 {
	all := 0
	for _, a := range slo {
		all += a.Total
	}
	if all < c.cfg.MinSLOSamples || all == 0 {
		return 1
	}
	demand := map[string]float64{}
	high := 0.0
	for cl, a := range slo {
		if a.Total > 0 {
			demand[cl] = float64(a.Total) / float64(all)
		}
	}
	for _, cl := range c.cfg.HighClasses {
		high += demand[cl]
	}
	if high == 0 {
		return 0
	}
	servedInFull := func(capacity float64) bool {
		full := gpsFull(capacity, demand, c.classWeight)
		for _, cl := range c.cfg.HighClasses {
			if demand[cl] > 0 && !full[cl] {
				return false
			}
		}
		return true
	}
	lo, hi := high, 1.0
	if servedInFull(lo) {
		return lo
	}
	for range 40 {
		mid := (lo + hi) / 2
		if servedInFull(mid) {
			hi = mid
		} else {
			lo = mid
		}
	}
	return hi
}

// classWeight is a class's weight in the router's queue (ClassWeights;
// a class it does not name, or names below 1, gets 1, as the queue gives
// it so that no class starves).
func (c *Controller) classWeight(class string) float64 {
	return float64(max(c.cfg.ClassWeights[class], 1))
}

// gpsFull reports which classes a capacity serves in full under
// generalised processor sharing: capacity is split over the classes with
// demand left in proportion to their weights, a class asking for no more
// than its split is served in full and what it leaves is split again.
func gpsFull(capacity float64, demand map[string]float64, weight func(string) float64) map[string]bool {
	active := make([]string, 0, len(demand))
	for cl, d := range demand {
		if d > 0 {
			active = append(active, cl)
		}
	}
	slices.Sort(active) // deterministic order for the float sums
	full := map[string]bool{}
	left := capacity
	for len(active) > 0 {
		total := 0.0
		for _, cl := range active {
			total += weight(cl)
		}
		var rest []string
		for _, cl := range active {
			if demand[cl] <= left*weight(cl)/total+1e-12 {
				full[cl] = true
			} else {
				rest = append(rest, cl)
			}
		}
		if len(rest) == len(active) {
			break
		}
		for _, cl := range active {
			if full[cl] {
				left -= demand[cl]
			}
		}
		active = rest
	}
	return full
}
