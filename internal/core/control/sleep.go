package control

import (
	"fmt"
	"time"

	"github.com/switchyard-ai/switchyard/schemas"
)

// Buying a return in the cheapest tier that arrives in time (issue 30).
//
// A replica past its release hold is given back by default: the ski-rental
// rule of release.go found holding it dearer than re-buying it. But a
// re-buy is a cold start from Config.StartTier (29.4 s for llama-3.1-8b on
// an H100 from local NVMe), and a replica asleep in host memory returns in
// about a second (vLLM sleep level 1: the weights copied back over PCIe;
// the catalog's "host" tier). With Config.SleepOnRelease, a replica past
// its hold is put to sleep instead of released when its evidence — its
// level's recent gaps in demand (release.go's, the ski rental's own, each
// read as a return up to returnSpread later than it came), or, before the
// level's first return, the quiet before its first demand — says the
// returns still to come save more than sleeping until them costs: each
// caught return saves a cold re-buy and, for a sudden one, the misses of
// a fleet one replica short; the sleep costs its GPU-seconds at
// SleepPrice. How long it sleeps is fitted as the hold is, over the
// returns' edges, so a return expected three holds away is slept through
// to rather than missed one hold short. It is woken — before any cold
// replica is started, as decideWarmth always does — when its level is
// needed, and released once no return still to come is worth its sleep.
// The top hot replica joins the sleepers once past its own hold, so a
// fall from a peak can leave the whole peak asleep. A sleeping replica
// stays provisioned and is counted in GPU-hours as a hot one is.
//
// In a pool of one model SleepPrice is 1 (the GPU is held), and then the
// GPU-seconds of sleeping are those of holding hot: the hold the ski
// rental fitted already minimises the gaps' cost over every longer hold,
// so past it sleeping pays only on returns the fit has not priced — later
// than those it has seen, or, after a first climb, any: the hold sees no
// return there and falls back to its one-lead-time prior, and the sleep
// hedges that prior on the climb's own quiet. It buys returns in a second
// at the price of holding; where no return comes, it costs that holding
// (docs/benchmarks.md: rise-fall against rise-fall-repeat). It pays on
// GPU-hours by design only where the freed HBM has another use (SleepPrice
// below 1: another model's weights on the same GPU), which the simulator's
// one-model pools do not model.

// sleepInstead decides, for level old of a pool past its release hold,
// between releasing the replica (false) and keeping it asleep (true, with
// the reason). The replicas kept asleep are the pool's top sleepWant
// levels: while the top one sleeps it is kept as long as the returns
// still to come are worth the sleep, and the top hot level, once past its
// own hold, may join it — so a fall from a peak can leave the peak's
// replicas asleep, not only its top one.
func (c *Controller) sleepInstead(ps *poolState, old int, idle, hold time.Duration) (string, bool) {
	wake, cold := ps.rep.LoadSeconds(schemas.WeightSleeping), c.startSeconds(ps)
	if ps.sleepWant == 0 {
		v := c.sleepValue(ps, old, idle.Seconds(), hold.Seconds())
		if v.saved <= v.cost {
			return "", false
		}
		ps.sleepWant++
		return c.sleepReason(ps, old, idle, hold, v), true
	}
	// The top replica already sleeps: released once no return still to
	// come is worth its sleep (past the latest its evidence expects).
	v := c.sleepValue(ps, old, idle.Seconds(), hold.Seconds())
	if v.saved <= v.cost {
		ps.sleepWant--
		return "", false
	}
	// The top hot replica, once its level is past its own hold, sleeps
	// too when its returns say so. Levels drop from the top, so its idle
	// is the top's less the time between their drops.
	if j := old - ps.sleepWant; j >= 2 && j <= len(ps.levels) && old <= len(ps.levels) && !ps.levels[j-1].below.IsZero() {
		idleJ := idle - ps.levels[j-1].below.Sub(ps.levels[old-1].below)
		if holdJ, _ := c.holdFor(ps, j); idleJ >= holdJ {
			if vj := c.sleepValue(ps, j, idleJ.Seconds(), holdJ.Seconds()); vj.saved > vj.cost {
				ps.sleepWant++
				return c.sleepReason(ps, j, idleJ, holdJ, vj), true
			}
		}
	}
	return fmt.Sprintf("release held: replica %d asleep (its level unneeded for %s; released after %s asleep unless needed, woken in %.1fs; %.1f returns still to come of %s; a cold start takes %.1fs; its GPU still held)",
		old, idle.Round(time.Second), v.until.Round(time.Second), wake, v.longer, v.basis, cold), true
}

func (c *Controller) sleepReason(ps *poolState, k int, idle, hold time.Duration, v sleepVal) string {
	wake, cold := ps.rep.LoadSeconds(schemas.WeightSleeping), c.startSeconds(ps)
	return fmt.Sprintf("sleep instead of release: replica %d unneeded for %s, past its %s hold; of the %.1f returns of %s still to come, %.1f within %s more, whose re-buys (%.1fs cold start from %s, and misses) save %.0f GPU-s against %.0f asleep; asleep it returns in %.1fs, its GPU still held",
		k, idle.Round(time.Second), hold.Round(time.Second), v.longer, v.basis, v.caught, v.until.Round(time.Second), cold, c.cfg.StartTier, v.saved, v.cost, wake)
}

// returnSpread is how much later than it did a return of demand is taken
// to come again: a gap of g seconds is read as a return anywhere in
// [g, (1+returnSpread)·g]. Demand that recurs is periodic only roughly,
// and the fitted hold ends at the longest gap seen, so a return a little
// later than any seen costs a cold start (on a trace of 20 s bursts every
// 140 s the controller released at its fitted 1m54s and 2m6s holds and
// re-bought 10 s and 4 s later; sim's TestAutoscaleSleepsAndCountsTheGPU).
const returnSpread = 0.25

// sleepVal is what sleeping a level further is worth: saved and cost in
// GPU-seconds over the best further sleep until, the returns caught
// within it and expected after idle, and the evidence they were read from.
type sleepVal struct {
	saved, cost, caught, longer float64
	until                       time.Duration
	basis                       string
}

// sleepEvidence is the gaps the sleep rule reads for level k: the level's
// recent returns; before its first return, the quiet before demand first
// reached it; failing both, the pool's returns, else the pool's levels'
// quiets. That quiet is one sample of how long the level's demand stays
// away: a level first needed after 100 s of quiet may be needed again
// about 100 s after it drops. The level's own evidence comes first: on a
// rise the lower levels return first and sooner (the quiet load alone
// needs them), and their return says little of the peak's. The quiet is
// read only here: a hold is fitted to returns alone (release.go), so the
// defaults never see it, and it stops counting at the level's first
// return.
func sleepEvidence(ps *poolState, k int) ([]gap, string) {
	if k >= 1 && k <= len(ps.levels) {
		lv := ps.levels[k-1]
		if len(lv.gaps) > 0 {
			return lv.gaps, fmt.Sprintf("the level's %d recent gaps", len(lv.gaps))
		}
		if lv.arrival.seconds > 0 {
			return []gap{lv.arrival}, "the quiet before the level's first demand"
		}
	}
	var gs []gap
	for _, lv := range ps.levels {
		gs = append(gs, lv.gaps...)
	}
	if len(gs) > 0 {
		return gs, fmt.Sprintf("the pool's %d recent gaps", len(gs))
	}
	for _, lv := range ps.levels {
		if lv.arrival.seconds > 0 {
			gs = append(gs, lv.arrival)
		}
	}
	return gs, "the quiets before the pool's levels' first demand"
}

// sleepValue prices sleeping level k further once it has been unneeded for
// idle, on its evidence (sleepEvidence), each gap read as a return spread
// over [g, (1+returnSpread)·g], of which the part after idle counts. For a
// further sleep until some end, saved is the re-buys the returns caught
// before the end would have cost (the cold start less the wake, plus a
// sudden return's misses at the miss price); cost the GPU-seconds asleep
// until each return or until the end, at SleepPrice. The end is the best
// of another hold and the edges of the returns still to come: the ski
// rental again, on the sleeping tier's prices, so a level whose returns
// come two holds later is slept through to them, not released one hold
// short of them.
func (c *Controller) sleepValue(ps *poolState, k int, idle, hold float64) sleepVal {
	gs, basis := sleepEvidence(ps, k)
	loadS, wake, perMiss := c.startSeconds(ps), ps.rep.LoadSeconds(schemas.WeightSleeping), c.missSeconds(ps)
	at := func(end float64) (v sleepVal) {
		for _, g := range gs {
			lo, hi := g.seconds, g.seconds*(1+returnSpread)
			if hi <= idle || hi <= lo {
				continue
			}
			from := max(lo, idle)
			after := (hi - from) / (hi - lo) // share of the return still to come
			in := max(0, (min(hi, end)-from)/(hi-lo))
			v.longer += after
			v.caught += in
			rebuy := loadS - wake
			if g.sudden {
				rebuy += g.misses * perMiss
			}
			v.saved += in * rebuy
			wait := 0.0 // mean time asleep until a caught return
			if in > 0 {
				wait = (from+min(hi, end))/2 - idle
			}
			v.cost += (in*wait + (after-in)*(end-idle)) * c.cfg.SleepPrice
		}
		v.until = time.Duration((end - idle) * float64(time.Second))
		return v
	}
	best := at(idle + hold)
	for _, g := range gs {
		for _, end := range []float64{g.seconds, g.seconds * (1 + returnSpread)} {
			if end <= idle {
				continue
			}
			if v := at(end); v.saved-v.cost > best.saved-best.cost+1e-9 {
				best = v
			}
		}
	}
	best.basis = basis
	return best
}
