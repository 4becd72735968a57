package control

import (
	"math"
	"sort"
	"time"
)

// Releasing capacity: rent or buy, per replica level.
//
// A replica the recommendation no longer needs is worth keeping only while
// the demand that would use it is likely to come back before a replica
// ordered then could serve it. The controller keeps, for every level k (the
// k-th replica of a pool), the recent gaps between the recommendation
// dropping below k and reaching k again (gaps shorter than a lead time are
// always cheaper to hold through and are not kept), and whether each
// return was sudden — the burst term asked for the level and the forecast
// did not, so a lead time of forecasting could not have re-bought it in
// time — or gradual. Lower classes' returns count too: their running
// sequences occupy the replicas the high classes would need. A gradual
// return costs a re-bought replica its cold load (the GPU paid for while
// it loads). A sudden one costs that plus the high-priority requests that
// would have missed while the fleet ran one replica short for the load:
// what the return's arrivals over the following lead time, high classes
// ahead of the lower ones (the router's class queue gives them 12 of every
// 15 starts when all classes queue, and all of them when the lower classes
// do not), would have waited past the queue budget on a fleet of k−1
// replicas, the lower classes' mean load taken out, on a fluid queue, each
// at its class's miss penalty, in GPU-seconds at the pool's price. (Pricing
// every request a replica could serve in a lead time as missed — the rule
// before this one — made one sudden return worth hours of GPU time on a
// 3 $/h replica, so a level that had seen one was held through an hour's
// quiet: the day-long ServeGen run held three replicas where one was
// asked for.) The hold time of level k is then the threshold H that
// minimises the recent gaps' total cost
//
//	Σ_i  g_i ≤ H ? g_i : H + C_i        (GPU-seconds; g_i the gap, C_i its re-buy cost)
//
// — the ski-rental rule with an empirical gap distribution: gaps that end
// in a return the fleet could not have absorbed are held through, long
// quiet spells after which demand came back gradually, or within what one
// replica fewer absorbs, are released at once. There is no window to pick:
// the trace's own gaps set it, and they change with the time of day.
// Until a level (or, failing that, any level of the pool) has seen a
// return, the hold is the prior, DownLeadTimes lead times (one: a return
// is taken as gradual until one has been seen sudden); a level's hold is
// never under a lead time.

// releaseGaps is how many recent gaps per level the hold is fitted on.
const releaseGaps = 24

type gap struct {
	seconds float64
	sudden  bool
	// misses is, for a sudden return, the high-priority requests a fleet
	// one replica short would have failed to start within the queue
	// budget during the lead time after the return (shortMisses).
	misses float64
}

type level struct {
	below time.Time // when the recommendation dropped below this level; zero while at or above it
	// returned is when the level's last kept gap ended; for a lead time
	// after it the gap's misses are updated as the return's arrivals come.
	returned time.Time
	gaps     []gap
	// needed is whether the recommendation has ever reached this level:
	// the first time it does is demand arriving, not returning, and says
	// nothing of how soon demand comes back after a release.
	needed bool
	// arrival is the quiet before demand first reached this level (since
	// the pool was first seen; kept when longer than a lead time), with
	// whether that arrival was sudden and its misses as a return's are
	// counted. The hold never reads it (a first climb fits no hold); the
	// sleep rule takes it as its prior until the pool has seen a return
	// (sleep.go).
	arrival gap
}

// observeLevels updates every level's gap history with this decision's
// recommendation raw, of which forecastRaw is what the forecast alone
// (without the burst term) asks for: a return to level k is sudden when
// the forecast did not see it coming. short(k), when not nil, is the
// high-priority requests of the last lead time that a fleet of k−1
// replicas would have failed to start in time; a sudden return's misses
// are the most it reports over the lead time after the return.
func (ps *poolState) observeLevels(now time.Time, raw, forecastRaw int, lead float64, short func(k int) float64) {
	top := max(ps.Max, raw, len(ps.levels))
	for len(ps.levels) < top {
		ps.levels = append(ps.levels, level{})
	}
	for k := 1; k <= top; k++ {
		lv := &ps.levels[k-1]
		switch {
		case raw < k && lv.below.IsZero():
			lv.below = now
		case raw >= k && !lv.below.IsZero():
			// A gap shorter than a lead time is always cheaper to hold
			// through than to re-buy (the cold load alone costs more), so
			// the hold is at least a lead time and only longer gaps
			// are kept: short flickers would otherwise crowd the
			// history's long gaps out.
			switch g := now.Sub(lv.below).Seconds(); {
			case g > lead && lv.needed:
				lv.gaps = append(lv.gaps, gap{seconds: g, sudden: forecastRaw < k})
				lv.returned = now
			case g > lead:
				lv.arrival = gap{seconds: g, sudden: forecastRaw < k}
				lv.returned = now
			}
			if len(lv.gaps) > releaseGaps {
				lv.gaps = lv.gaps[len(lv.gaps)-releaseGaps:]
			}
			lv.below = time.Time{}
		}
		if raw >= k {
			lv.needed = true
		}
		// The return's cost is what the lead time after it brings: a
		// re-bought replica would have been loading through it.
		// The arrival's, until a return is kept, the same way.
		last := &lv.arrival
		if n := len(lv.gaps); n > 0 {
			last = &lv.gaps[n-1]
		}
		if short != nil && last.sudden && !lv.returned.IsZero() && now.Sub(lv.returned).Seconds() <= lead {
			last.misses = math.Max(last.misses, short(k))
		}
	}
}

// shortMisses is how many high-priority requests of the recent arrivals
// as would have waited longer than budget seconds to start on a fluid
// queue, empty before them, served at mu request starts per second: the
// high classes' share of each interval's arrivals, queued ahead of the
// lower classes (the router's weighted class queue serves them first
// but for a fifth of the starts while the lower classes also queue; the
// caller takes the lower classes' mean load out of mu). With no capacity
// at all every one of them misses.
func shortMisses(as []arrival, share, mu, budget float64) float64 {
	const sub = 0.25 // seconds per fluid step
	q, missed := 0.0, 0.0
	for _, a := range as {
		if a.dt <= 0 {
			continue
		}
		steps := max(1, int(math.Ceil(a.dt/sub)))
		in, dt := share*a.n/float64(steps), a.dt/float64(steps)
		for range steps {
			q = math.Max(0, q+in-mu*dt)
			if mu <= 0 || q/mu > budget {
				missed += in
			}
		}
	}
	return missed
}

// idle is how long level k has been unneeded (0 while needed).
func (ps *poolState) idle(k int, now time.Time) time.Duration {
	if k < 1 || k > len(ps.levels) || ps.levels[k-1].below.IsZero() {
		return 0
	}
	return now.Sub(ps.levels[k-1].below)
}

// holdFor is how long level k may stay unneeded before it is released,
// and how many gaps that was fitted on (0: the prior).
func (c *Controller) holdFor(ps *poolState, k int) (time.Duration, int) {
	var gs []gap
	if k >= 1 && k <= len(ps.levels) {
		gs = ps.levels[k-1].gaps
	}
	if len(gs) == 0 {
		for _, lv := range ps.levels {
			gs = append(gs, lv.gaps...)
		}
	}
	if len(gs) == 0 {
		return c.priorHold(ps), 0
	}
	loadS := c.startSeconds(ps)
	lead := loadS + c.cfg.Interval.Seconds()
	best := c.fitHold(gs, loadS, c.missSeconds(ps))
	// Hold at least a lead time (shorter gaps always pay to hold through),
	// plus the interval in which a return would be noticed.
	return time.Duration((max(best, lead) + c.cfg.Interval.Seconds()) * float64(time.Second)), len(gs)
}

// fitHold is the hold threshold that minimises the gaps' total cost when
// a return re-buys a replica for loadS GPU-seconds and a sudden one also
// pays perMiss GPU-seconds for each of its misses.
func (c *Controller) fitHold(gs []gap, loadS, perMiss float64) float64 {
	cost := func(h float64) float64 {
		t := 0.0
		for _, g := range gs {
			if g.seconds <= h {
				t += g.seconds
				continue
			}
			t += h + loadS
			if g.sudden {
				t += g.misses * perMiss
			}
		}
		return t
	}
	// The optimum is at 0 or at one of the gaps.
	cands := []float64{0}
	for _, g := range gs {
		cands = append(cands, g.seconds)
	}
	sort.Float64s(cands)
	best, bestCost := 0.0, math.Inf(1)
	for _, h := range cands {
		if v := cost(h); v < bestCost-1e-9 {
			best, bestCost = h, v
		}
	}
	return best
}

// priorHold is the hold before any return has been seen.
func (c *Controller) priorHold(ps *poolState) time.Duration {
	lead := c.startSeconds(ps) + c.cfg.Interval.Seconds()
	return time.Duration(c.cfg.DownLeadTimes * lead * float64(time.Second)).Round(c.cfg.Interval)
}

// missSeconds prices one missed high-priority request in GPU-seconds of
// the pool: the high classes' mean miss penalty (their largest before any
// was judged) over the pool's price per second.
func (c *Controller) missSeconds(ps *poolState) float64 {
	price := ps.rep.PricePerHour() / 3600
	if price <= 0 {
		return 0
	}
	penalty := ps.highPenalty
	if penalty <= 0 {
		for _, cl := range c.cfg.HighClasses {
			penalty = math.Max(penalty, c.cfg.MissPenalty[cl])
		}
	}
	return penalty / price
}
