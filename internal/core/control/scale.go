package control

import (
	"fmt"
	"math"
	"strings"
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
		caps[ps.Key()] = float64(n) * c.queueWeight(ps, in.Mix)
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
		if ps.Max == 0 || ps.Role == schemas.RoleDecode {
			continue
		}
		cost := ps.rep.PricePerHour() / max(c.queueWeight(ps, in.Mix), 1e-9)
		if best == "" || cost < bestCost {
			best, bestCost = ps.Key(), cost
		}
	}
	out[best] = float64(queued)
	return out
}

// poolRead is one pool's recommendation at a decision, before damping:
// what a pool of several GPU generations of one model (generations.go)
// replaces with its share of the group's cheapest fleet.
type poolRead struct {
	r       recommendation
	current int
	load    float64
}

// readPool reads a pool's workers, feeds the interval's arrivals into its
// forecast and recommends its undamped size.
func (c *Controller) readPool(ps *poolState, hbs []*schemas.Heartbeat, in Inputs, queued, unserved float64, highMiss bool) poolRead {
	now := in.Now
	live, inSystem, waiting, done := c.countWorkers(hbs, in.Booked)
	current := live + in.Starting[ps.Key()]
	if !ps.started {
		ps.started, ps.desired, ps.firstAt = true, clamp(current, ps.Min, ps.Max), now
	}
	load := float64(inSystem) + queued
	c.observeArrivals(ps, now, done, load, unserved)
	r := c.recommend(ps, in, live, load, queued+float64(waiting), highMiss)
	ps.capU, ps.reqSeconds = r.capU, r.pm.requestSeconds
	ps.seenDone, ps.seenInSystem, ps.seenQueued = done, float64(inSystem), queued
	return poolRead{r: r, current: current, load: load}
}

// finishPool records a pool's recommendation in its release levels and
// stabilization window and damps its size toward it.
func (c *Controller) finishPool(ps *poolState, pr poolRead, in Inputs, highMiss bool, d *Decision) ReplicaDecision {
	now, r := in.Now, pr.r
	ps.observeLevels(now, r.raw, r.forecastRaw, r.lead, r.short)
	ps.highShareSeen, ps.highPenalty = r.share, c.highPenalty(in.SLO)
	rd := ReplicaDecision{Pool: ps.Key(), GPU: ps.GPU, Model: ps.Model, Current: pr.current, Raw: r.raw,
		ArrivalRate: r.rate, Forecast: r.plan, Capacity: r.capU, Backlog: int(r.backlog + 0.5)}
	if FixedRole(ps.Role) {
		rd.Role, rd.TokenRate, rd.TokenCapacity = ps.Role, r.plan*r.pm.tokensPerRequest, r.pm.tokenCapacity*c.cfg.TargetUtilization*ps.calib
	}

	// Replicas kept asleep instead of released wake as their levels are
	// needed again: the scaler keeps asleep at most those above the
	// recommendation.
	ps.sleepWant = clamp(ps.sleepWant, 0, max(0, ps.desired-max(r.raw, 1)))

	ps.recs = append(ps.recs, rec{now, r.raw})
	keep := max(c.downWindow(ps), c.cfg.ZeroWindow)
	i := 0
	for i < len(ps.recs) && now.Sub(ps.recs[i].at) > keep {
		i++
	}
	ps.recs = ps.recs[i:]

	if ps.shift != nil {
		// Sized by the switches (shift.go), not by starts and releases.
		rd.Desired, rd.Reason = ps.desired, r.why
		return rd
	}
	next, reason := c.damp(ps, r, now, pr.load, highMiss)
	c.commit(ps, next, reason, now, d)
	rd.Desired, rd.Reason = ps.desired, reason
	if ps.gen != nil && !strings.Contains(reason, r.why) {
		// The split of the model's demand over its generations is every
		// decision's reason, change or not.
		rd.Reason = strings.TrimPrefix(reason+"; ", "; ") + r.why
	}
	return rd
}

// countWorkers reads a pool's heartbeats: the replicas serving (not
// draining), the requests in the system and waiting on them, and those
// completed or failed since the last decision. A request booked on a
// worker since its heartbeat (booked) is in the system, so the arrivals
// count it at once; it is not backlog: the router placed it where there
// was room, and the next heartbeat says whether it waits there. Counted as
// backlog too, the drain term bought replicas for work already being
// served: the autoscaled Azure code 1×, Azure 4× and Mooncake conversation
// runs cost 16-17 % more GPU-hours than without bookings, against 4-7 %
// counted in the system only, for the same attainment.
func (c *Controller) countWorkers(hbs []*schemas.Heartbeat, booked map[string]int) (live, inSystem, waiting int, done float64) {
	for _, hb := range hbs {
		if !hb.Draining {
			live++
		}
		b := booked[hb.WorkerID]
		inSystem += hb.Running + hb.Waiting + b
		waiting += hb.Waiting + hb.Prefilling
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
	return live, inSystem, waiting, done
}

// observeArrivals feeds the interval's arrivals into the pool's forecast:
// completions + growth of what is in the system + what was turned away
// for lack of capacity.
func (c *Controller) observeArrivals(ps *poolState, now time.Time, done, load, unserved float64) {
	ps.arrivedOK = false
	if ps.haveLast {
		if dt := now.Sub(ps.lastAt).Seconds(); dt > 0 {
			arrived := max(0, done+load-ps.lastSeen) + unserved
			if FixedRole(ps.Role) {
				// Measured over the role pools' flow (phases.go).
				arrived = ps.phase.arrived
			}
			a := c.levelGain(ps)
			ps.fc.observe(arrived/dt, a, c.trendGain(a))
			ps.arrivals = append(ps.arrivals, arrival{n: arrived, dt: dt})
			ps.arrivedNow, ps.arrivedOK = arrival{n: arrived, dt: dt}, true
		}
	}
	ps.lastSeen, ps.lastAt, ps.haveLast = load, now, true
}

// recommendation is a pool's undamped size at one decision and what it
// was read from.
type recommendation struct {
	raw int
	// rate and plan are the arrival rate now and forecast at the lead
	// time; capU one replica's planned requests per second; backlog the
	// requests waiting.
	rate, plan, capU, backlog float64
	// loadS is a started replica's cold load, lead that plus an interval.
	loadS, lead float64
	// sloBump: a miss episode judged at size asked for one more replica.
	sloBump bool
	why     string
	pm      phaseModel
	// forecastRaw is the size the forecast alone asks for (no burst term,
	// no backlog); short the high-priority misses of a fleet one replica
	// short of a level (release.go's pricing of a sudden return).
	forecastRaw int
	short       func(k int) float64
	// The terms of the need, for a pool of several generations
	// (generations.go): share is the traffic headroom is bought for,
	// planQ the forecast with Poisson headroom, burst the burst rate (in
	// requests a second, before conversion to capU's units), burstCap a
	// replica's planned start rate, lowMean the rest of the traffic's
	// mean.
	share, planQ, burst, burstCap, lowMean float64
}

// recommend is a pool's undamped size: the demand forecast over the lead
// time with noise and burst headroom for the high classes' share, plus
// the backlog's drain, at the capacity per replica its SLO misses leave.
func (c *Controller) recommend(ps *poolState, in Inputs, live int, load, backlog float64, highMiss bool) recommendation {
	// A replica ordered now serves only after its weights load: plan for the
	// demand forecast at that lead time. The trend is damped (Gardner's
	// damped Holt): a burst's onset is not a ramp that goes on for the
	// whole lead time, and extrapolating it undamped ordered replicas for
	// bursts that were over before they loaded.
	loadS := c.startSeconds(ps)
	lead := loadS + c.cfg.Interval.Seconds()
	rate, plan := c.forecastAt(&ps.fc, lead)
	// Headroom for arrival noise: plan for the HeadroomZ quantile of a
	// Poisson rate over the burst window rather than its mean, so a small
	// fleet keeps proportionally more spare capacity than a large one.
	// A replica carries the requests in flight, so arrival noise averages
	// over a request's time in the system: over BurstWindow for short
	// requests, over their decode for long ones (a reasoning model's
	// answers decode for a minute; ten seconds of Poisson noise would buy
	// a replica for a spike the batch absorbs).
	pm := c.model(ps, in.Mix)
	planQ := poissonRate(plan, max(c.cfg.BurstWindow.Seconds(), pm.requestSeconds), c.cfg.HeadroomZ)
	// Bursts shorter than a lead time are over before a replica ordered
	// for them serves, so the fleet must already hold them: the burst rate
	// is the least capacity that would have served every arrival of the
	// last lead time within QueueBudget of its arrival.
	ps.arrivals = trimArrivals(ps.arrivals, lead)
	burst := burstRate(ps.arrivals, c.cfg.QueueBudget.Seconds())
	sloBump := c.calibrate(ps, in, live, load, lead, highMiss)
	capU := pm.capacity * c.cfg.TargetUtilization * ps.calib
	// A burst is held to the SLO by starting its requests in time, not by
	// finishing them: what a replica must keep up with through a burst is
	// its prefills alongside the decodes it is running, which for long
	// outputs is many times the steady-state completion rate capU (a
	// reasoning model's 1,400-token answers decode for a minute each; the
	// batch absorbs the burst). The burst rate is planned against that
	// start rate, expressed in capU's units.
	burstCap := max(capU, pm.burst*c.cfg.TargetUtilization*ps.calib)
	burstReq := burst
	burst *= capU / burstCap
	// Headroom — the Poisson quantile and the burst rate — is bought only
	// for the share of traffic held to the SLO: the lower classes' latency
	// budgets (seconds to minutes) absorb a burst in the router's class
	// queue, which serves the high classes first, so for them the mean
	// forecast is enough.
	share := c.highShare(in.SLO)
	need := share*max(planQ, burst) + (1-share)*plan
	if c.cfg.PlanHighOnly {
		// The lower classes' arrivals and backlog are planned for only as
		// far as the router's weighted class queue gives them starts while
		// the high classes wait: the high classes' share of the traffic,
		// grown to the share the fleet must serve for them to be served in
		// full (queueshare.go).
		share = c.queueShare(in.SLO)
		need, backlog = share*max(planQ, burst), share*backlog
	}
	raw := ceilDiv(need+backlog/c.cfg.DrainTarget.Seconds(), capU)
	why := fmt.Sprintf("arrivals %.2f/s (forecast %.2f/s at +%.0fs, the cold-load time %.1fs plus one interval; %.2f/s with Poisson headroom over %s; bursts of the last lead time need %.2f/s to queue at most %s; headroom for the %.0f%% of traffic in %v), backlog %.0f, capacity %.2f req/s per replica at %.0f%% of modelled (%.2f of it after SLO misses)",
		rate, plan, lead, loadS, planQ, c.cfg.BurstWindow, burst, c.cfg.QueueBudget, share*100, c.cfg.HighClasses, backlog, capU, c.cfg.TargetUtilization*100, ps.calib)
	if FixedRole(ps.Role) {
		why = fmt.Sprintf("%s; %.0f tokens/s arriving (forecast %.0f), %s", why, rate*pm.tokensPerRequest, plan*pm.tokensPerRequest, pm.why)
	}
	if load > 0 && raw < 1 {
		raw = 1
	}
	// A miss episode asks for at least one more replica than the fleet has.
	if sloBump && raw <= ps.desired {
		raw = ps.desired + 1
		why = fmt.Sprintf("high-priority SLO attainment below %.0f%%: one more replica than the model asks; %s", c.cfg.SLOTarget*100, why)
	}
	// What the forecast alone (no burst term) asks for: a return of demand
	// it drives is gradual and can be re-bought in time; one only the burst
	// term asks for is sudden (release.go).
	forecastNeed := share*planQ + (1-share)*plan
	if c.cfg.PlanHighOnly {
		forecastNeed = share * planQ
	}
	// The backlog is left out: a burst that queues is exactly what the
	// forecast did not see coming.
	forecastRaw := ceilDiv(forecastNeed, capU)
	// A fleet one replica short serves the high classes' burst with what
	// the lower classes' mean leaves of it, at the start rate a burst is
	// planned against (burstCap per replica).
	lowMean := (1 - share) * plan
	if c.cfg.PlanHighOnly {
		lowMean = 0
	}
	short := func(k int) float64 {
		mu := max(0, float64(k-1)*capU-lowMean) * burstCap / capU
		return shortMisses(ps.arrivals, share, mu, c.cfg.QueueBudget.Seconds())
	}
	return recommendation{raw: raw, rate: rate, plan: plan, capU: capU, backlog: backlog, loadS: loadS, lead: lead, sloBump: sloBump, why: why, pm: pm,
		forecastRaw: forecastRaw, short: short, share: share, planQ: planQ, burst: burstReq, burstCap: burstCap, lowMean: lowMean}
}

// calibrate cuts the capacity planned per replica on a high-priority miss
// episode judged at the size the model asked for (reporting it), and lets
// it recover toward the model while the SLO holds.
//
// The roofline's capacity is a model: high-priority misses at the size
// it asked for say the replicas serve this traffic slower than modelled
// (placement spread, prefill bursts, preemption). Each miss episode
// cuts the capacity planned per replica by MissCapacityCut — once per
// lead time plus attainment window, so the misses already counted do
// not cut it again before a replica ordered for them has been judged —
// and it recovers toward the model while the SLO holds.
//
// Only misses judged at the size the model asked for say that: while
// replicas ordered are still loading, or within an attainment window
// of the last that was, the fleet is short by the cold start, not by
// the model — a fleet started from one replica under full load misses
// for its first lead time whatever the model says, and a cut taken
// then would over-provision it for the half hour the cut takes to
// recover. Those misses still hold a scale-down (highMiss).
func (c *Controller) calibrate(ps *poolState, in Inputs, live int, load, lead float64, highMiss bool) bool {
	now := in.Now
	if ps.calib == 0 {
		ps.calib = 1
	}
	if in.Starting[ps.Key()] > 0 || live < ps.desired {
		ps.shortAt = now
	}
	atSize := ps.shortAt.IsZero() || now.Sub(ps.shortAt) >= c.cfg.SLOWindow
	sloBump := highMiss && load > 0 && atSize && c.missesBeyondChance(in.SLO) &&
		(ps.sloUpAt.IsZero() || now.Sub(ps.sloUpAt).Seconds() >= lead+c.cfg.SLOWindow.Seconds())
	switch {
	case sloBump:
		ps.calib = max(minCalibration, ps.calib*c.cfg.MissCapacityCut)
		ps.sloUpAt = now
	case !highMiss:
		ps.calib += (1 - ps.calib) * min(1, c.cfg.Interval.Seconds()/c.cfg.CalibrationRecover.Seconds())
	}
	return sloBump
}

// damp moves a pool's size toward its recommendation within its bounds,
// cooldowns, tolerance and release holds: the size to commit and why.
func (c *Controller) damp(ps *poolState, r recommendation, now time.Time, load float64, highMiss bool) (int, string) {
	old, raw := ps.desired, r.raw
	switch {
	case old < ps.Min:
		return ps.Min, fmt.Sprintf("raised to the pool minimum %d", ps.Min)
	case old > ps.Max:
		return ps.Max, fmt.Sprintf("lowered to the pool maximum %d", ps.Max)
	case raw > old && old == 0:
		// Nothing serves this pool: no cooldown or tolerance applies.
		next := min(raw, c.maxUp(0))
		return next, fmt.Sprintf("scale from zero: %d replicas for %.0f waiting requests; they serve after a %.1fs cold weight load; %s", next, load, r.loadS, r.why)
	case raw > old:
		return c.dampUp(ps, r, now)
	case raw < old && ps.gen != nil && c.cfg.DownWindow <= 0:
		return c.groupDown(ps, r, highMiss) // the group held it (generations.go)
	case raw < old && c.cfg.DownWindow <= 0 && old > 1:
		return c.releaseDown(ps, r, now, highMiss)
	case raw < old:
		return c.windowDown(ps, r, now, highMiss)
	}
	return old, ""
}

// dampUp grows a pool unless the gap is within tolerance or a scale-up
// was made within the cooldown.
func (c *Controller) dampUp(ps *poolState, r recommendation, now time.Time) (int, string) {
	old := ps.desired
	switch {
	case float64(r.raw) <= float64(old)*(1+c.cfg.Tolerance) && !r.sloBump:
		return old, "within tolerance"
	case !ps.lastUp.IsZero() && now.Sub(ps.lastUp) < c.cfg.UpCooldown:
		return old, "scale-up cooldown"
	}
	return min(r.raw, old+c.maxUp(old)), "scale up: " + r.why
}

// releaseDown releases the pool's top replica once it has been unneeded
// for the hold its level's returns of demand ask for (release.go), or
// keeps it asleep instead (sleep.go).
func (c *Controller) releaseDown(ps *poolState, r recommendation, now time.Time, highMiss bool) (int, string) {
	old := ps.desired
	hold, fitted := c.holdFor(ps, old)
	idle := ps.idle(old, now)
	basis := fmt.Sprintf("fitted to %d recent returns of demand", fitted)
	if fitted == 0 {
		basis = "the prior: no return of demand seen yet"
	}
	switch {
	case highMiss:
		return old, "scale-down held: high-priority SLO attainment below target"
	case idle < hold:
		return old, fmt.Sprintf("scale-down held: replica %d unneeded for %s of its %s hold (%s)", old, idle.Round(time.Second), hold.Round(time.Second), basis)
	}
	if c.cfg.SleepOnRelease {
		if reason, ok := c.sleepInstead(ps, old, idle, hold); ok {
			return old, reason
		}
	}
	return old - 1, fmt.Sprintf("scale down: replica %d unneeded for %s, past its %s hold (%s); %s", old, idle.Round(time.Second), hold.Round(time.Second), basis, r.why)
}

// windowDown shrinks a pool to the highest recommendation of a fixed
// stabilization window (Config.DownWindow), as the HPA does.
func (c *Controller) windowDown(ps *poolState, r recommendation, now time.Time, highMiss bool) (int, string) {
	old := ps.desired
	target, window := c.stabilized(ps, now)
	switch {
	case highMiss:
		return old, "scale-down held: high-priority SLO attainment below target"
	case now.Sub(ps.firstAt) < c.downWindow(ps):
		return old, "scale-down held until one stabilization window is observed"
	case target >= old:
		return old, fmt.Sprintf("scale-down held: %d recommended within the last %s", target, window)
	case float64(target) >= float64(old)*(1-c.cfg.Tolerance):
		return old, "within tolerance"
	case now.Sub(ps.lastAny) < c.cfg.DownCooldown:
		return old, "scale-down cooldown"
	}
	return max(target, old-c.cfg.MaxDownStep), fmt.Sprintf("scale down: at most %d needed throughout the last %s; %s", target, window, r.why)
}

// commit records a pool's new size (clamped to its bounds) as a change.
func (c *Controller) commit(ps *poolState, next int, reason string, now time.Time, d *Decision) {
	old := ps.desired
	next = clamp(next, ps.Min, ps.Max)
	if next == old {
		return
	}
	ps.desired, ps.lastAny = next, now
	if next > old {
		ps.lastUp = now
	} else {
		ps.lastDown = now
	}
	d.change(KindReplicas, ps.Key(), fmt.Sprint(old), fmt.Sprint(next), reason)
}

func (c *Controller) maxUp(cur int) int {
	if c.cfg.MaxUpStep > 0 {
		return c.cfg.MaxUpStep
	}
	return max(4, cur)
}

// levelGain is the forecast's level gain per interval: LevelGain when
// set, else one interval over the pool's lead time, so the level follows
// demand on the time scale a replica ordered now can act on. Faster swings
// are the burst term's: they are over before such a replica serves.
func (c *Controller) levelGain(ps *poolState) float64 {
	if c.cfg.LevelGain > 0 {
		return c.cfg.LevelGain
	}
	iv := c.cfg.Interval.Seconds()
	return min(1, iv/(c.startSeconds(ps)+iv))
}

// forecastAt is a forecast's rate now and its plan at lead seconds ahead,
// the trend damped over the lead (never below the rate now).
func (c *Controller) forecastAt(fc *holt, lead float64) (rate, plan float64) {
	rate = max(0, fc.level)
	return rate, max(rate, fc.damped(lead/c.cfg.Interval.Seconds(), c.cfg.TrendDamping))
}

// trendGain is the forecast's trend gain for level gain a: TrendGain when
// set, else the critically damped one (criticalTrendGain).
func (c *Controller) trendGain(a float64) float64 {
	if c.cfg.TrendGain > 0 {
		return c.cfg.TrendGain
	}
	return criticalTrendGain(a)
}

// downWindow is the pool's scale-down stabilization window: DownWindow
// when set, else DownLeadTimes times the pool's lead time (cold load plus
// one interval). A replica released now takes a lead time to get back, so
// the window is sized in lead times: demand that recurs within a few of
// them is cheaper to keep serving than to re-order and wait for.
func (c *Controller) downWindow(ps *poolState) time.Duration {
	if c.cfg.DownWindow > 0 {
		return c.cfg.DownWindow
	}
	lead := c.startSeconds(ps) + c.cfg.Interval.Seconds()
	return time.Duration(c.cfg.DownLeadTimes * lead * float64(time.Second)).Round(c.cfg.Interval)
}

// stabilized is the highest recommendation of the scale-down window; going
// to zero needs the longer zero window to have been idle throughout.
func (c *Controller) stabilized(ps *poolState, now time.Time) (int, time.Duration) {
	window := c.downWindow(ps)
	hi := 0
	for _, r := range ps.recs {
		if now.Sub(r.at) <= window {
			hi = max(hi, r.n)
		}
	}
	if hi > 0 {
		return hi, window
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

// highPenalty is the high classes' miss penalty weighted by their recent
// results (their largest penalty when none were judged).
func (c *Controller) highPenalty(slo map[string]Attainment) float64 {
	w, n, hi := 0.0, 0, 0.0
	for _, cl := range c.cfg.HighClasses {
		p := c.cfg.MissPenalty[cl]
		hi = max(hi, p)
		w += p * float64(slo[cl].Total)
		n += slo[cl].Total
	}
	if n == 0 {
		return hi
	}
	return w / float64(n)
}

// highShare is the high classes' share of the results judged in the SLO
// window; 1 (plan headroom for everything) until MinSLOSamples results
// have been seen, or with HeadroomForAll set.
func (c *Controller) highShare(slo map[string]Attainment) float64 {
	if c.cfg.HeadroomForAll && !c.cfg.PlanHighOnly {
		return 1
	}
	all := 0
	for _, a := range slo {
		all += a.Total
	}
	if all < c.cfg.MinSLOSamples || all == 0 {
		return 1
	}
	return float64(c.highAttainment(slo).Total) / float64(all)
}

// missesBeyondChance reports whether the high classes' misses in the SLO
// window are more than a fleet that meets SLOTarget would miss by chance:
// at 99 % a window of 110 results misses two or more about one time in
// three, so cutting the model on any window below target reads noise as
// a slow fleet. The test is one-sided binomial at missSignificance.
func (c *Controller) missesBeyondChance(slo map[string]Attainment) bool {
	a := c.highAttainment(slo)
	return binomialTail(a.Total, a.Total-a.Met, 1-c.cfg.SLOTarget) < missSignificance
}

// missSignificance is the chance of a miss count at least as high, in a
// fleet that meets its SLO exactly, below which misses cut the model.
const missSignificance = 0.05

// binomialTail is P(X ≥ k) for X ~ Binomial(n, p).
func binomialTail(n, k int, p float64) float64 {
	if k <= 0 {
		return 1
	}
	if p <= 0 {
		return 0
	}
	if k > n {
		return 0
	}
	below := 0.0
	lp, lq := math.Log(p), math.Log1p(-p)
	ln, _ := math.Lgamma(float64(n + 1))
	for i := 0; i < k; i++ {
		li, _ := math.Lgamma(float64(i + 1))
		lr, _ := math.Lgamma(float64(n - i + 1))
		below += math.Exp(ln - li - lr + float64(i)*lp + float64(n-i)*lq)
	}
	return math.Max(0, 1-below)
}

// minCalibration bounds how far SLO misses may cut the planned capacity of
// a replica below the model's.
const minCalibration = 0.4

// startSeconds is how long a replica the scaler starts takes to serve:
// the load from Config.StartTier (the catalog's weight tier; local disk by
// default).
func (c *Controller) startSeconds(ps *poolState) float64 {
	return ps.rep.TierSeconds(c.cfg.StartTier)
}
