package control

import (
	"math"
	"sort"
	"time"

	"github.com/switchyard-ai/switchyard/schemas"
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
// sequences occupy the replicas the high classes would need. A gradual return costs a re-bought replica its cold load (the GPU paid for
// while it loads); a sudden one costs that plus the high-priority requests
// the missing replica would have served during the load, each at its miss
// penalty, in GPU-seconds at the pool's price. The hold time of level k is
// then the threshold H that minimises the recent gaps' total cost
//
//	Σ_i  g_i ≤ H ? g_i : H + C_i        (GPU-seconds; g_i the gap, C_i its re-buy cost)
//
// — the ski-rental rule with an empirical gap distribution: gaps that always
// end in a sudden return are held through, long quiet spells after which
// demand came back gradually are released at once. There is no window to
// pick: the trace's own gaps set it, and they change with the time of day.
// Until a level (or, failing that, any level of the pool) has seen a
// return, the hold is the prior, DownLeadTimes lead times (one: a return
// is taken as gradual until one has been seen sudden); a level's hold is
// never under a lead time.

// releaseGaps is how many recent gaps per level the hold is fitted on.
const releaseGaps = 24

type gap struct {
	seconds float64
	sudden  bool
}

type level struct {
	below time.Time // when the recommendation dropped below this level; zero while at or above it
	gaps  []gap
}

// observeLevels updates every level's gap history with this decision's
// recommendation raw, of which forecastRaw is what the forecast alone
// (without the burst term) asks for: a return to level k is sudden when
// the forecast did not see it coming.
func (ps *poolState) observeLevels(now time.Time, raw, forecastRaw int, lead float64) {
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
			if g := now.Sub(lv.below).Seconds(); g > lead {
				lv.gaps = append(lv.gaps, gap{seconds: g, sudden: forecastRaw < k})
			}
			if len(lv.gaps) > releaseGaps {
				lv.gaps = lv.gaps[len(lv.gaps)-releaseGaps:]
			}
			lv.below = time.Time{}
		}
	}
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
func (c *Controller) holdFor(ps *poolState, k int, mix Mix) (time.Duration, int) {
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
	loadS := ps.rep.LoadSeconds(schemas.WeightCold)
	lead := loadS + c.cfg.Interval.Seconds()
	best := c.fitHold(gs, loadS, lead+c.missSeconds(ps, mix, lead))
	// Hold at least a lead time (shorter gaps always pay to hold through),
	// plus the interval in which a return would be noticed.
	return time.Duration((max(best, lead) + c.cfg.Interval.Seconds()) * float64(time.Second)), len(gs)
}

// fitHold is the hold threshold that minimises the gaps' total cost when
// a gradual return re-buys a replica for loadS GPU-seconds and a sudden
// one for sudden GPU-seconds.
func (c *Controller) fitHold(gs []gap, loadS, sudden float64) float64 {
	cost := func(h float64) float64 {
		t := 0.0
		for _, g := range gs {
			if g.seconds <= h {
				t += g.seconds
				continue
			}
			if g.sudden {
				t += h + sudden
			} else {
				t += h + loadS
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
	lead := ps.rep.LoadSeconds(schemas.WeightCold) + c.cfg.Interval.Seconds()
	return time.Duration(c.cfg.DownLeadTimes * lead * float64(time.Second)).Round(c.cfg.Interval)
}

// missSeconds prices, in GPU-seconds of the pool, the high-priority
// requests one replica serves during a lead time — what a sudden return
// loses while a re-bought replica loads — at their miss penalties.
func (c *Controller) missSeconds(ps *poolState, mix Mix, lead float64) float64 {
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
	share := ps.highShareSeen
	if share <= 0 {
		share = 1
	}
	reqs := Capacity(ps.rep, mix, c.cfg.ITLTarget) * share * lead
	return reqs * penalty / price
}
