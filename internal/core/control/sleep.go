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
// its hold is put to sleep instead of released when its level's recent
// gaps in demand (release.go's, the ski rental's own evidence, each read
// as a return up to returnSpread later than it came) say the returns a
// further hold asleep would catch save more than it costs: each
// caught return saves a cold re-buy and, for a sudden one, the misses of a
// fleet one replica short; the sleep costs its GPU-seconds at SleepPrice.
// It is woken — before any cold replica is started, as decideWarmth always
// does — when its level is needed, and released once it has slept through
// that further hold unneeded. A sleeping replica stays provisioned and is
// counted in GPU-hours as a hot one is.
//
// In a pool of one model SleepPrice is 1 (the GPU is held), and then the
// GPU-seconds of sleeping are those of holding hot: the hold the ski
// rental fitted already minimises the gaps' cost over every longer hold,
// so past it sleeping pays only on returns later than those the fit has
// seen — it hedges the fitted hold's edge, buying returns in a second at
// the price of holding.
// It pays by design only where the freed HBM has another use (SleepPrice
// below 1: another model's weights on the same GPU), which the simulator's
// one-model pools do not model.

// sleepInstead decides, for level old of a pool past its release hold,
// between releasing the replica (false) and keeping it asleep (true, with
// the reason).
func (c *Controller) sleepInstead(ps *poolState, old int, idle, hold time.Duration) (string, bool) {
	wake, cold := ps.rep.LoadSeconds(schemas.WeightSleeping), c.startSeconds(ps)
	if ps.sleepWant > 0 {
		// The top replica already sleeps: release it once it has slept
		// through a further hold unneeded.
		if idle >= 2*hold {
			ps.sleepWant--
			return "", false
		}
		return fmt.Sprintf("release held: replica %d asleep (its level unneeded for %s; released after another %s hold asleep, woken in %.1fs if needed; its GPU still held)",
			old, idle.Round(time.Second), hold.Round(time.Second), wake), true
	}
	saved, cost, caught, longer := c.sleepValue(ps, old, idle.Seconds(), hold.Seconds())
	if saved <= cost {
		return "", false
	}
	ps.sleepWant++
	return fmt.Sprintf("sleep instead of release: replica %d unneeded for %s, past its %s hold; of the %.1f returns of the level's recent gaps still to come, %.1f within another hold, whose re-buys (%.1fs cold start from %s, and misses) save %.0f GPU-s against %.0f asleep; asleep it returns in %.1fs, its GPU still held",
		old, idle.Round(time.Second), hold.Round(time.Second), caught, longer, cold, c.cfg.StartTier, saved, cost, wake), true
}

// returnSpread is how much later than it did a return of demand is taken
// to come again: a gap of g seconds is read as a return anywhere in
// [g, (1+returnSpread)·g]. Demand that recurs is periodic only roughly,
// and the fitted hold ends at the longest gap seen, so a return a little
// later than any seen costs a cold start (on a trace of 20 s bursts every
// 140 s the controller released at its fitted 1m54s and 2m6s holds and
// re-bought 10 s and 4 s later; sim's TestAutoscaleSleepsAndCountsTheGPU).
const returnSpread = 0.25

// sleepValue prices sleeping level k through a further hold of hold
// seconds once it has been unneeded for idle, on the level's recent gaps
// (the pool's when the level has none), each read as a return spread over
// [g, (1+returnSpread)·g], of which the part after idle counts: saved is
// the re-buys the returns caught within the further hold would have cost
// (the cold start less the wake, plus a sudden return's misses at the miss
// price); cost the GPU-seconds asleep until each return or for the whole
// hold, at SleepPrice. caught and longer are the returns (in gaps) caught
// and expected after idle.
func (c *Controller) sleepValue(ps *poolState, k int, idle, hold float64) (saved, cost, caught, longer float64) {
	var gs []gap
	if k >= 1 && k <= len(ps.levels) {
		gs = ps.levels[k-1].gaps
	}
	if len(gs) == 0 {
		for _, lv := range ps.levels {
			gs = append(gs, lv.gaps...)
		}
	}
	loadS, wake, perMiss := c.startSeconds(ps), ps.rep.LoadSeconds(schemas.WeightSleeping), c.missSeconds(ps)
	end := idle + hold
	for _, g := range gs {
		lo, hi := g.seconds, g.seconds*(1+returnSpread)
		if hi <= idle || hi <= lo {
			continue
		}
		from := max(lo, idle)
		after := (hi - from) / (hi - lo) // share of the return still to come
		in := max(0, (min(hi, end)-from)/(hi-lo))
		longer += after
		caught += in
		rebuy := loadS - wake
		if g.sudden {
			rebuy += g.misses * perMiss
		}
		saved += in * rebuy
		wait := 0.0 // mean time asleep until a caught return
		if in > 0 {
			wait = (from+min(hi, end))/2 - idle
		}
		cost += (in*wait + (after-in)*hold) * c.cfg.SleepPrice
	}
	return saved, cost, caught, longer
}
