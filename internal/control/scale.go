package control

import (
	"fmt"
	"time"

	"github.com/switchyard-ai/switchyard/schemas"
)

// queueShares splits the router's queue (which does not say which pool a
// request will land on) over the pools in proportion to their provisioned
// capacity. With nothing provisioned anywhere the whole queue goes to the
// pool that serves the mix cheapest, which is the one scaled from zero.
func (c *Controller) queueShares(byPool map[string][]*schemas.Heartbeat, in Inputs, queued int) map[string]float64 {
	out := map[string]float64{}
	if queued == 0 {
		return out
	}
	caps := map[string]float64{}
	total := 0.0
	for _, ps := range c.pools {
		n := in.Starting[ps.Key()]
		for _, hb := range byPool[ps.Key()] {
			if !hb.Draining {
				n++
			}
		}
		caps[ps.Key()] = float64(n) * Capacity(ps.rep, in.Mix, c.cfg.ITLTarget)
		total += caps[ps.Key()]
	}
	if total > 0 {
		for k, v := range caps {
			out[k] = float64(queued) * v / total
		}
		return out
	}
	best, bestCost := "", 0.0
	for _, ps := range c.pools {
		if ps.Max == 0 {
			continue
		}
		cost := ps.rep.PricePerHour() / max(Capacity(ps.rep, in.Mix, c.cfg.ITLTarget), 1e-9)
		if best == "" || cost < bestCost {
			best, bestCost = ps.Key(), cost
		}
	}
	out[best] = float64(queued)
	return out
}

// scale decides one pool's desired replicas.
func (c *Controller) scale(ps *poolState, hbs []*schemas.Heartbeat, in Inputs, queued float64, highMiss bool, d *Decision) ReplicaDecision {
	now := in.Now
	live, inSystem, waiting, done := 0, 0, 0, 0.0
	for _, hb := range hbs {
		if !hb.Draining {
			live++
		}
		inSystem += hb.Running + hb.Waiting
		waiting += hb.Waiting
		st := c.workers[hb.WorkerID]
		if st == nil {
			st = &workerState{}
			c.workers[hb.WorkerID] = st
		}
		n := hb.CompletedTotal + hb.ErrorsTotal
		if st.seen && n >= st.counted {
			done += float64(n - st.counted)
		}
		st.counted, st.seen = n, true
	}
	current := live + in.Starting[ps.Key()]
	if !ps.started {
		ps.started, ps.desired, ps.firstAt = true, clamp(current, ps.Min, ps.Max), now
	}

	// Arrivals = completions + growth of what is in the system.
	load := float64(inSystem) + queued
	if ps.haveLast {
		if dt := now.Sub(ps.lastAt).Seconds(); dt > 0 {
			ps.fc.observe(max(0, (done+load-ps.lastSeen)/dt), c.cfg.LevelGain, c.cfg.TrendGain)
		}
	}
	ps.lastSeen, ps.lastAt, ps.haveLast = load, now, true

	// A replica added now serves only after its weights load: plan for the
	// demand forecast at that horizon.
	loadS := ps.rep.LoadSeconds(schemas.WeightCold)
	horizon := (loadS + c.cfg.Interval.Seconds()) / c.cfg.Interval.Seconds()
	rate := ps.fc.level
	plan := max(rate, ps.fc.at(horizon))
	capU := Capacity(ps.rep, in.Mix, c.cfg.ITLTarget) * c.cfg.TargetUtilization
	backlog := queued + float64(waiting)
	raw := ceilDiv(plan+backlog/c.cfg.DrainTarget.Seconds(), capU)
	why := fmt.Sprintf("arrivals %.2f/s (forecast %.2f/s at +%.0fs, the cold-load time %.1fs plus one interval), backlog %.0f, capacity %.2f req/s per replica at %.0f%% of modelled",
		rate, plan, horizon*c.cfg.Interval.Seconds(), loadS, backlog, capU, c.cfg.TargetUtilization*100)
	if load > 0 && raw < 1 {
		raw = 1
	}
	if highMiss && load > 0 && raw <= ps.desired {
		raw = ps.desired + 1
		why = fmt.Sprintf("high-priority SLO attainment below %.0f%%: one more replica than the model asks; %s", c.cfg.SLOTarget*100, why)
	}
	rd := ReplicaDecision{Pool: ps.Key(), GPU: ps.GPU, Model: ps.Model, Current: current, Raw: raw,
		ArrivalRate: rate, Forecast: plan, Capacity: capU, Backlog: int(backlog + 0.5)}

	ps.recs = append(ps.recs, rec{now, raw})
	keep := max(c.cfg.DownWindow, c.cfg.ZeroWindow)
	i := 0
	for i < len(ps.recs) && now.Sub(ps.recs[i].at) > keep {
		i++
	}
	ps.recs = ps.recs[i:]

	old := ps.desired
	next, reason := old, ""
	switch {
	case old < ps.Min:
		next, reason = ps.Min, fmt.Sprintf("raised to the pool minimum %d", ps.Min)
	case old > ps.Max:
		next, reason = ps.Max, fmt.Sprintf("lowered to the pool maximum %d", ps.Max)
	case raw > old && old == 0:
		// Nothing serves this pool: no cooldown or tolerance applies.
		next = min(raw, c.maxUp(0))
		reason = fmt.Sprintf("scale from zero: %d replicas for %.0f waiting requests; they serve after a %.1fs cold weight load; %s", next, load, loadS, why)
	case raw > old:
		switch {
		case float64(raw) <= float64(old)*(1+c.cfg.Tolerance) && !highMiss:
			reason = "within tolerance"
		case !ps.lastUp.IsZero() && now.Sub(ps.lastUp) < c.cfg.UpCooldown:
			reason = "scale-up cooldown"
		default:
			next = min(raw, old+c.maxUp(old))
			reason = "scale up: " + why
		}
	case raw < old:
		target, window := c.stabilized(ps, now)
		switch {
		case highMiss:
			reason = "scale-down held: high-priority SLO attainment below target"
		case now.Sub(ps.firstAt) < c.cfg.DownWindow:
			reason = "scale-down held until one stabilization window is observed"
		case target >= old:
			reason = fmt.Sprintf("scale-down held: %d recommended within the last %s", target, window)
		case float64(target) >= float64(old)*(1-c.cfg.Tolerance):
			reason = "within tolerance"
		case now.Sub(ps.lastAny) < c.cfg.DownCooldown:
			reason = "scale-down cooldown"
		default:
			next = max(target, old-c.cfg.MaxDownStep)
			reason = fmt.Sprintf("scale down: at most %d needed throughout the last %s; %s", target, window, why)
		}
	}
	next = clamp(next, ps.Min, ps.Max)
	if next != old {
		ps.desired, ps.lastAny = next, now
		if next > old {
			ps.lastUp = now
		} else {
			ps.lastDown = now
		}
		d.change(KindReplicas, ps.Key(), fmt.Sprint(old), fmt.Sprint(next), reason)
	}
	rd.Desired, rd.Reason = ps.desired, reason
	return rd
}

func (c *Controller) maxUp(cur int) int {
	if c.cfg.MaxUpStep > 0 {
		return c.cfg.MaxUpStep
	}
	return max(4, cur)
}

// stabilized is the highest recommendation of the scale-down window; going
// to zero needs the longer zero window to have been idle throughout.
func (c *Controller) stabilized(ps *poolState, now time.Time) (int, time.Duration) {
	hi := 0
	for _, r := range ps.recs {
		if now.Sub(r.at) <= c.cfg.DownWindow {
			hi = max(hi, r.n)
		}
	}
	if hi > 0 {
		return hi, c.cfg.DownWindow
	}
	for _, r := range ps.recs {
		if r.n > 0 {
			return 1, c.cfg.ZeroWindow
		}
	}
	if now.Sub(ps.firstAt) < c.cfg.ZeroWindow {
		return 1, c.cfg.ZeroWindow
	}
	return 0, c.cfg.ZeroWindow
}
