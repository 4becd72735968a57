package control

import (
	"fmt"
	"math"
	"sort"
	"strings"
)

// The cheapest generation that meets the SLO (issue 30).
//
// A fleet may serve one model from pools of several GPU generations — an
// H100 pool, an A100 pool, an L40S pool. Sized independently, each pool
// grows with what the router happens to send it, and the router sends to
// whatever is there: the fleet keeps the generation it started with,
// whatever it costs. Sized together, the pools of one model carry the
// model's whole demand on the cheapest fleet that serves it within the
// class targets.
//
// Each generation is priced per request at the current mix: its price per
// replica-hour (the catalog's PricePerHour × TP) over the requests a
// replica plans to serve within the targets — the same roofline capacity
// each pool is sized with (Capacity: the largest batch whose step keeps
// the TPOT target, less what SLO misses cut), capped by the rate its
// prefills keep the TTFT target at (PrefillCapacity). A generation whose
// single decode step or idle prefill already misses the target can carry
// none of the demand (it keeps its pool's minimum). The need is the
// pools' summed forecast with the headroom one pool is planned with
// (scale.go's recommend): Poisson noise and the burst rate for the high
// classes' share, the lower classes' mean, the backlog's drain. A fleet n
// serves it when, with C = Σ n·capacity and B = Σ n·start rate (a
// replica's prefills beside its batch, BurstCapacity),
//
//	max(share·forecast_q / C, share·burst / B) + (lower mean + drain) / C ≤ 1,
//
// which for one pool is exactly the single pool's ceil(need / capacity).
// The generation with the lowest $/request carries the demand first, up to
// what its pool may hold (Max); the rest goes to the generations that
// serve it cheapest. Replicas come whole, so the remainder the cheapest
// generation would round up to a whole replica may be cheaper on a
// smaller one: the sizes are the cheapest combination within [Min, Max]
// of every pool, not a greedy fill. The search is exact and small: a
// generation dearer per request than the cheapest never carries more than
// one replica of the cheapest's worth (more would cost more than that
// replica), so beyond its minimum each is tried up to the count that
// alone would carry the whole need.
//
// The split says what serves the demand now; what the group keeps for a
// return of demand is held for the group, not pool by pool (holdGroup).
// The pools are substitutes: when the split moves the demand from an A100
// to an H100, the A100's level falls and comes back as the split flips,
// which its own release levels read as returns of demand, so each pool
// held its replicas for their own holds and zero windows and the group
// paid for every generation at once (the ServeGen day: the split asked
// for $80 of the day, the pools held $153). The group keeps the release
// levels a single pool keeps (release.go), in units of its smallest
// replica's capacity, fed with the model's whole demand; the capacity of
// the levels still held is kept on the cheapest of the replicas already
// there (holding never starts one), the split's fleet included, and the
// pools release the rest at once. A replica is released only once the
// replicas serving — not those still loading — serve what is held without
// it. Scale-ups are damped per pool as any pool's (cooldowns, tolerance).

// genGroup is the pools of whole requests serving one model on more than
// one GPU generation (or TP), not shared by GPUs that change model.
type genGroup struct {
	model string
	idx   []int // into Controller.pools
	// arrivals are the group's summed arrivals per decision, for its
	// burst rate; fc the forecast of their rate. The group forecasts its
	// whole flow rather than adding its pools' forecasts: when the split
	// moves demand from one generation to another, the pool losing it
	// reads a fall and the one taking it a rise, and their summed trends
	// read a swing in demand that did not change (the split then
	// oscillated, the taking pool's trend overshooting to 7.2 req/s
	// against 5).
	arrivals []arrival
	fc       holt
	// chosen is the fleet the split last chose (nil before the first);
	// rent the saving accrued by the cheaper recomposition next, which is
	// adopted once the rent pays for its replicas' cold starts.
	chosen []int
	next   []int
	rent   float64
	// hold keeps the group's release levels (release.go) in units of
	// its smallest replica; held is the levels it still holds.
	hold *poolState
	held int
}

// buildGenGroups groups the pools of whole requests by model (and dtype);
// a group is pools of at least two GPU types or TPs.
func (c *Controller) buildGenGroups() {
	byModel := map[string]*genGroup{}
	var order []string
	for i, ps := range c.pools {
		if FixedRole(ps.Role) || ps.shift != nil {
			continue
		}
		k := ps.Model + "/" + ps.Dtype
		g := byModel[k]
		if g == nil {
			g = &genGroup{model: ps.Model}
			byModel[k] = g
			order = append(order, k)
		}
		g.idx = append(g.idx, i)
	}
	for _, k := range order {
		g := byModel[k]
		if len(g.idx) < 2 {
			continue
		}
		for _, i := range g.idx {
			c.pools[i].gen = g
		}
		c.gens = append(c.gens, g)
	}
}

// generation is one pool of a group as the split prices it.
type generation struct {
	ps *poolState
	// capU and burstCap are a replica's planned requests and starts a
	// second within the targets (0 when the generation cannot meet them);
	// price its $/h; perRequest $ per thousand requests.
	capU, burstCap, price, perRequest float64
	min, max                          int
	infeasible                        string
}

// groupNeed is the terms a fleet must serve: share·planQ and share·burst
// of the high classes, low the rest's mean, drain the backlog's.
type groupNeed struct {
	hiSteady, hiBurst, low, drain float64
	// atLeast is the least capacity (requests a second) asked for
	// outright: one more replica's worth on a miss episode.
	atLeast float64
	// anyLoad asks for at least one replica.
	anyLoad bool
}

// serves reports whether a fleet of capacity C and start rate B serves n.
func (n groupNeed) serves(C, B float64, replicas int) bool {
	if n.anyLoad && replicas < 1 {
		return false
	}
	if C < n.atLeast*(1-1e-9) {
		return false
	}
	if n.hiSteady+n.hiBurst+n.low+n.drain <= 0 {
		return true
	}
	if C <= 0 || B <= 0 {
		return false
	}
	return math.Max(n.hiSteady/C, n.hiBurst/B)+(n.low+n.drain)/C <= 1+1e-9
}

// sizeGenerations replaces the recommendation of each pool of g by its
// size in the cheapest fleet that serves the group's need, and the
// forecast-only size likewise.
func (c *Controller) sizeGenerations(g *genGroup, reads []poolRead, in Inputs) {
	gens := make([]generation, len(g.idx))
	var plan, backlog, lead, reqSeconds float64
	reqSeconds = math.Inf(1)
	var sum arrival
	measured, load, sloBump := false, false, false
	desiredC := 0.0
	var slowest *poolState
	for k, i := range g.idx {
		ps, r := c.pools[i], reads[i].r
		gens[k] = c.priceGeneration(ps, r, in.Mix)
		plan += r.plan
		backlog += r.backlog
		if slowest == nil || r.lead > lead {
			slowest, lead = ps, r.lead
		}
		if gens[k].capU > 0 {
			reqSeconds = min(reqSeconds, r.pm.requestSeconds)
		}
		if ps.arrivedOK {
			sum.n += ps.arrivedNow.n
			sum.dt = max(sum.dt, ps.arrivedNow.dt)
			measured = true
		}
		load = load || reads[i].load > 0
		sloBump = sloBump || r.sloBump
		desiredC += float64(ps.desired) * gens[k].capU
	}
	if measured {
		g.arrivals = append(g.arrivals, sum)
		if sum.dt > 0 {
			// Smoothed on the time scale of the group's longest lead:
			// the replica slowest to start is the one a forecast too
			// quick would order in vain.
			a := c.levelGain(slowest)
			g.fc.observe(sum.n/sum.dt, a, c.trendGain(a))
		}
	}
	if g.fc.init {
		_, plan = c.forecastAt(&g.fc, lead)
	}
	g.arrivals = trimArrivals(g.arrivals, lead)
	if math.IsInf(reqSeconds, 1) {
		reqSeconds = 0
	}
	r0 := reads[g.idx[0]].r // share is the controller's, the same in every pool
	share := r0.share
	planQ := poissonRate(plan, max(c.cfg.BurstWindow.Seconds(), reqSeconds), c.cfg.HeadroomZ)
	burst := burstRate(g.arrivals, c.cfg.QueueBudget.Seconds())
	need := groupNeed{hiSteady: share * planQ, hiBurst: share * burst, drain: backlog / c.cfg.DrainTarget.Seconds(), anyLoad: load}
	if !c.cfg.PlanHighOnly {
		need.low = (1 - share) * plan
	}
	primary := cheapestPerRequest(gens)
	if sloBump && primary >= 0 {
		// A miss episode asks for more than the fleet has: at least the
		// cheapest generation's replica more.
		need.atLeast = desiredC + gens[primary].capU
	}
	sizes, ok, how := c.chooseFleet(g, gens, need, reads)
	forecast := groupNeed{hiSteady: need.hiSteady, low: need.low}
	why := c.describeSplit(g, gens, sizes, ok, plan, planQ, burst, backlog, share) + "; " + how
	live := make([]int, len(g.idx))
	for k, i := range g.idx {
		live[k] = max(0, reads[i].current-in.Starting[c.pools[i].Key()])
	}
	sizes, held := c.holdGroup(g, gens, need, forecast, sizes, live, in, lead, share)
	if held != "" {
		why += "; " + held
	}
	fsizes, _ := cheapestFleet(gens, forecast, nil)
	for k := range fsizes {
		fsizes[k] = min(fsizes[k], sizes[k])
	}

	for k, i := range g.idx {
		r := &reads[i].r
		r.raw, r.forecastRaw = sizes[k], fsizes[k]
		if gens[k].capU > 0 {
			r.capU = gens[k].capU
		}
		if sloBump {
			why2 := fmt.Sprintf("high-priority SLO attainment below %.0f%%: at least one more %s replica's worth of capacity; ", c.cfg.SLOTarget*100, gens[primary].ps.GPU)
			r.why = why2 + why + "; this pool: " + r.why
		} else {
			r.why = why + "; this pool: " + r.why
		}
		r.short = c.groupShort(g, gens, sizes, k, share, need.low)
	}
}

// holdGroup is the fleet the group keeps at this decision: the split's
// fleet chosen, plus what the group's release levels still hold of the
// replicas already there (desired), on the cheapest of them; and why.
//
// The levels are those of one pool (observeLevels, holdFor) whose replica
// is the group's smallest (the feasible generation of least capacity at
// the mix): the model's demand in that unit is the fewest such replicas
// that alone would serve the need, and a level above it is released once
// it has been unneeded for its hold (the last also for ZeroWindow, as a
// single pool's last replica is). The held levels' capacity is asked of
// the fleet as a floor (atLeast), met by the cheapest sizes between the
// split's fleet and what each pool has; a replica above that is released.
// Replicas still loading serve nothing: while what would remain serving
// does not serve the held need, the pools that would shrink keep what
// they have.
func (c *Controller) holdGroup(g *genGroup, gens []generation, need, forecast groupNeed, chosen, live []int, in Inputs, lead, share float64) ([]int, string) {
	unit := -1
	for k, gen := range gens {
		if gen.capU > 0 && gen.burstCap > 0 && gen.max > 0 && (unit < 0 || gen.capU < gens[unit].capU) {
			unit = k
		}
	}
	if unit < 0 {
		return chosen, ""
	}
	u := gens[unit]
	if g.hold == nil {
		g.hold = &poolState{}
	}
	hp := g.hold
	hp.rep, hp.highPenalty = u.ps.rep, u.ps.highPenalty
	// units is the fewest of the unit's replicas that alone serve n.
	units := func(n groupNeed) int {
		total := n.hiSteady + n.hiBurst + n.low + n.drain + n.atLeast
		top := int(math.Ceil(total/math.Min(u.capU, u.burstCap)-1e-9)) + 2
		for m := 0; m < top; m++ {
			if n.serves(float64(m)*u.capU, float64(m)*u.burstCap, m) {
				return m
			}
		}
		return top
	}
	rawU, forecastU := units(need), units(forecast)
	budget := c.cfg.QueueBudget.Seconds()
	short := func(k int) float64 {
		mu := math.Max(0, float64(k-1)*u.capU-need.low) * u.burstCap / u.capU
		return shortMisses(g.arrivals, share, mu, budget)
	}
	hp.observeLevels(in.Now, rawU, forecastU, lead, short)
	switch {
	case rawU >= g.held:
		g.held = rawU
	default:
		hold, _ := c.holdFor(hp, g.held)
		if g.held == 1 {
			hold = max(hold, c.cfg.ZeroWindow)
		}
		if hp.idle(g.held, in.Now) >= hold {
			g.held--
		}
	}
	hn := need
	hn.atLeast = math.Max(hn.atLeast, float64(g.held)*u.capU)
	have := make([]int, len(gens))
	for k, gen := range gens {
		have[k] = max(chosen[k], clamp(gen.ps.desired, gen.min, gen.max))
	}
	if slicesEqual(have, chosen) {
		return chosen, ""
	}
	sizes, ok := cheapestFleetWithin(gens, hn, chosen, have)
	if !ok {
		sizes = have
	}
	// What stays serving after the releases must serve what is held.
	C, B, n := 0.0, 0.0, 0
	for k, gen := range gens {
		s := min(sizes[k], live[k])
		C += float64(s) * gen.capU
		B += float64(s) * gen.burstCap
		n += s
	}
	why := fmt.Sprintf("the group holds %d of %d levels of %.2f req/s (one %s replica's worth) for a return of the model's demand", g.held, max(g.held, rawU), u.capU, u.ps.GPU)
	if !hn.serves(C, B, n) && !slicesEqual(sizes, have) {
		return have, why + "; replicas it would keep are still loading: nothing released"
	}
	return sizes, why + ", on the cheapest of the replicas it has"
}

// groupDown shrinks a pool of a generation group toward its share of the
// fleet the group holds (holdGroup), one replica a decision: the group has
// held what a return of the model's demand asks for, so the pool's own
// release levels, which read the split's flips between generations as
// returns of demand, do not hold it again.
func (c *Controller) groupDown(ps *poolState, r recommendation, highMiss bool) (int, string) {
	if highMiss {
		return ps.desired, "scale-down held: high-priority SLO attainment below target"
	}
	return ps.desired - 1, "scale down: the group's fleet holds " + fmt.Sprint(r.raw) + " here; " + r.why
}

// priceGeneration is what one pool's replicas plan to serve within the
// targets at the mix, and its $/request.
func (c *Controller) priceGeneration(ps *poolState, r recommendation, mix Mix) generation {
	gen := generation{ps: ps, price: ps.rep.PricePerHour(), min: ps.Min, max: ps.Max, capU: r.capU, burstCap: r.burstCap}
	ctx := int(mix.PromptTokens + mix.OutputTokens/2)
	pc := PrefillCapacity(ps.rep, mix, c.cfg.TTFTTarget)
	switch {
	case ps.rep.DecodeStepSeconds(1, ctx) > c.cfg.ITLTarget.Seconds():
		gen.infeasible = fmt.Sprintf("one decode step %.0f ms > the %s TPOT target", ps.rep.DecodeStepSeconds(1, ctx)*1e3, c.cfg.ITLTarget)
	case pc.Slack <= 0:
		gen.infeasible = fmt.Sprintf("an idle prefill of the binding prompt takes %.2fs, past the TTFT target", pc.ServiceSeconds)
	}
	if gen.infeasible != "" {
		gen.capU, gen.burstCap, gen.perRequest = 0, 0, math.Inf(1)
		return gen
	}
	if ttft := pc.RequestsPerSec(Uncached(mix)) * c.cfg.TargetUtilization * ps.calib; ttft > 0 && ttft < gen.capU {
		gen.capU = ttft
	}
	gen.burstCap = max(gen.burstCap, gen.capU)
	if gen.capU > 0 {
		gen.perRequest = gen.price / 3600 / gen.capU * 1000
	} else {
		gen.perRequest = math.Inf(1)
	}
	return gen
}

// cheapestPerRequest is the index of the feasible generation with the
// lowest $/request that may hold a replica (-1 when none).
func cheapestPerRequest(gens []generation) int {
	best := -1
	for k, g := range gens {
		if g.capU <= 0 || g.max <= 0 {
			continue
		}
		if best < 0 || g.perRequest < gens[best].perRequest {
			best = k
		}
	}
	return best
}

// maxFleetCombos bounds the exact search; beyond it the fill is greedy.
const maxFleetCombos = 200_000

// cheapestFleet is the sizes within every pool's [floor, Max] (nil floor:
// the pools' minima) of the cheapest fleet that serves need (ties to fewer
// replicas, then more capacity), and whether one does; where none does,
// every generation that can serve at its Max and the others at their floor.
func cheapestFleet(gens []generation, need groupNeed, floor []int) ([]int, bool) {
	return cheapestFleetWithin(gens, need, floor, nil)
}

// cheapestFleetWithin is cheapestFleet with no pool below floor nor above
// ceiling (nil: the pools' bounds).
func cheapestFleetWithin(gens []generation, need groupNeed, floor, ceiling []int) ([]int, bool) {
	if floor != nil || ceiling != nil {
		gens = slicesClone(gens)
		for k := range gens {
			if ceiling != nil {
				gens[k].max = max(min(gens[k].max, ceiling[k]), gens[k].min)
			}
			if floor != nil {
				gens[k].min = min(max(gens[k].min, floor[k]), gens[k].max)
			}
		}
	}
	n := len(gens)
	sizes := make([]int, n)
	for k, g := range gens {
		sizes[k] = g.min
	}
	primary := cheapestPerRequest(gens)
	if primary < 0 {
		return sizes, need.serves(0, 0, sumInts(sizes))
	}
	// The dearer generations' ranges: Min up to the count that alone
	// would carry the whole need (none beyond Min for one that cannot
	// serve).
	total := need.hiSteady + need.hiBurst + need.low + need.drain + need.atLeast
	hi := make([]int, n)
	combos := 1.0
	for k, g := range gens {
		hi[k] = g.min
		if k != primary && g.capU > 0 {
			alone := int(math.Ceil(total/math.Min(g.capU, g.burstCap)-1e-9)) + 1
			hi[k] = min(g.max, g.min+max(alone, 1))
		}
		combos *= float64(hi[k] - g.min + 1)
	}
	if combos > maxFleetCombos {
		return greedyFleet(gens, need), true
	}
	best := make([]int, n)
	bestCost, bestN, bestC, found := 0.0, 0, 0.0, false
	cur := slices0(gens)
	var walk func(k int)
	walk = func(k int) {
		if k == n {
			// The cheapest per request fills what the others leave.
			C, B, cost, reps := 0.0, 0.0, 0.0, 0
			for j, g := range gens {
				if j == primary {
					continue
				}
				C += float64(cur[j]) * g.capU
				B += float64(cur[j]) * g.burstCap
				cost += float64(cur[j]) * g.price
				reps += cur[j]
			}
			p := gens[primary]
			for m := p.min; m <= p.max; m++ {
				Cm, Bm := C+float64(m)*p.capU, B+float64(m)*p.burstCap
				if !need.serves(Cm, Bm, reps+m) {
					continue
				}
				costM := cost + float64(m)*p.price
				if !found || costM < bestCost-1e-9 || (math.Abs(costM-bestCost) <= 1e-9 && (reps+m < bestN || (reps+m == bestN && Cm > bestC))) {
					copy(best, cur)
					best[primary] = m
					bestCost, bestN, bestC, found = costM, reps+m, Cm, true
				}
				break
			}
			return
		}
		if k == primary {
			walk(k + 1)
			return
		}
		for v := gens[k].min; v <= hi[k]; v++ {
			cur[k] = v
			walk(k + 1)
		}
		cur[k] = gens[k].min
	}
	walk(0)
	if found {
		return best, true
	}
	for k, g := range gens {
		if g.capU > 0 {
			sizes[k] = g.max
		}
	}
	return sizes, false
}

func slicesClone(gens []generation) []generation { return append([]generation(nil), gens...) }

func slices0(gens []generation) []int {
	out := make([]int, len(gens))
	for k, g := range gens {
		out[k] = g.min
	}
	return out
}

func sumInts(v []int) int {
	s := 0
	for _, x := range v {
		s += x
	}
	return s
}

// greedyFleet fills the need cheapest per request first, each generation
// up to its Max: for groups too many to search exactly.
func greedyFleet(gens []generation, need groupNeed) []int {
	order := make([]int, 0, len(gens))
	for k := range gens {
		order = append(order, k)
	}
	sort.SliceStable(order, func(a, b int) bool { return gens[order[a]].perRequest < gens[order[b]].perRequest })
	sizes := slices0(gens)
	C, B := 0.0, 0.0
	for k, g := range gens {
		C += float64(sizes[k]) * g.capU
		B += float64(sizes[k]) * g.burstCap
	}
	for _, k := range order {
		g := gens[k]
		for g.capU > 0 && sizes[k] < g.max && !need.serves(C, B, sumInts(sizes)) {
			sizes[k]++
			C += g.capU
			B += g.burstCap
		}
	}
	return sizes
}

// groupShort is, for pool k of the group, the high-priority misses of the
// group's fleet with that pool one replica short of level j (the others
// at their share): release.go's price of a sudden return.
func (c *Controller) groupShort(g *genGroup, gens []generation, sizes []int, k int, share, low float64) func(j int) float64 {
	arrivals := append([]arrival(nil), g.arrivals...)
	var C, B float64
	for m, gen := range gens {
		if m != k {
			C += float64(sizes[m]) * gen.capU
			B += float64(sizes[m]) * gen.burstCap
		}
	}
	capU, burstCap := gens[k].capU, gens[k].burstCap
	budget := c.cfg.QueueBudget.Seconds()
	return func(j int) float64 {
		Cj := C + float64(j-1)*capU
		Bj := B + float64(j-1)*burstCap
		mu := 0.0
		if Cj > 0 {
			mu = math.Max(0, Cj-low) * Bj / Cj
		}
		return shortMisses(arrivals, share, mu, budget)
	}
}

// describeSplit is the reason each pool of the group carries: every
// generation's $/request, the need and the fleet chosen.
func (c *Controller) describeSplit(g *genGroup, gens []generation, sizes []int, ok bool, plan, planQ, burst, backlog, share float64) string {
	order := make([]int, len(gens))
	for k := range order {
		order[k] = k
	}
	sort.SliceStable(order, func(a, b int) bool { return gens[order[a]].perRequest < gens[order[b]].perRequest })
	var priced, chosen []string
	cost := 0.0
	for _, k := range order {
		gen := gens[k]
		if gen.infeasible != "" {
			priced = append(priced, fmt.Sprintf("%s cannot meet the targets (%s)", gen.ps.GPU, gen.infeasible))
		} else {
			priced = append(priced, fmt.Sprintf("%s $%.3f per 1k requests (%.2f req/s per replica at $%.2f/h)", gen.ps.GPU, gen.perRequest, gen.capU, gen.price))
		}
		chosen = append(chosen, fmt.Sprintf("%s %d", gen.ps.GPU, sizes[k]))
		cost += float64(sizes[k]) * gen.price
	}
	verdict := "the cheapest fleet that serves it"
	if !ok {
		verdict = "no fleet within the pools' maxima serves it; every generation that can serve at its maximum"
	}
	return fmt.Sprintf("%s on %d generations: %s; the model's forecast %.2f req/s (%.2f with Poisson headroom, bursts of %.2f/s, headroom for the %.0f%% of traffic in %v), backlog %.0f; %s: %s ($%.2f/h)",
		g.model, len(gens), strings.Join(priced, ", "), plan, planQ, burst, share*100, c.cfg.HighClasses, backlog, verdict, strings.Join(chosen, ", "), cost)
}

// chooseFleet is the fleet the group is sized to, kept stable: the split
// changes the fleet's composition only when it pays. A fleet that no
// longer serves the need grows by the cheapest additions to it (no
// generation is given up to grow another); one that serves it shrinks to
// the cheapest fleet at once where that only removes replicas (the
// group's hold still paces it, holdGroup). A cheaper fleet of another
// composition — replicas started on one generation for others released —
// is a ski rental, as a switch of GPUs between models is (shift.go): its
// saving accrues each interval it stays the cheapest, and it is adopted
// once the saving pays the new replicas' cold starts plus a lead time each
// (the replicas it releases are paid meanwhile). (Accruing what the fleet
// chosen costs over whichever fleet is cheapest at each interval was
// tried: it recomposed more often and cost more, $130.00 against $121.01
// on the ServeGen day.) Without it, demand near the
// crossing of two compositions (one A100 against one H100) flipped the
// choice decision by decision and each flip held both.
func (c *Controller) chooseFleet(g *genGroup, gens []generation, need groupNeed, reads []poolRead) ([]int, bool, string) {
	if g.chosen == nil {
		g.chosen = make([]int, len(gens))
		for k, gen := range gens {
			g.chosen[k] = clamp(gen.ps.desired, gen.min, gen.max)
		}
	}
	var C, B, chosenCost float64
	for k, gen := range gens {
		C += float64(g.chosen[k]) * gen.capU
		B += float64(g.chosen[k]) * gen.burstCap
		chosenCost += float64(g.chosen[k]) * gen.price
	}
	keep := func(reason string) ([]int, bool, string) {
		return append([]int(nil), g.chosen...), true, reason
	}
	if !need.serves(C, B, sumInts(g.chosen)) {
		// It must grow. Replicas the group still holds beyond the fleet
		// chosen (holdGroup) are there: growing back onto them starts
		// nothing, where a cheaper composition would start replicas and
		// release them, and a return of demand onto the replicas held is
		// what they were held for (re-choosing the cheapest composition
		// at every rise churned cold starts between generations). A
		// cheaper composition is then a ski rental, as below.
		have := make([]int, len(gens))
		for k, gen := range gens {
			have[k] = max(g.chosen[k], clamp(gen.ps.desired, gen.min, gen.max))
		}
		if !slicesEqual(have, g.chosen) {
			if sizes, ok := cheapestFleetWithin(gens, need, nil, have); ok {
				g.chosen, g.next, g.rent = sizes, nil, 0
				return append([]int(nil), sizes...), true, "the fleet chosen before no longer serves the need: the cheapest part of the replicas the group still holds that does"
			}
		}
		// Replicas ordered now are cold starts whichever generation they
		// are: the cheapest fleet that serves, additions to the one chosen
		// on a tie.
		sizes, ok := cheapestFleet(gens, need, g.chosen)
		how := "the fleet chosen before no longer serves the need: the cheapest additions to it"
		if best, okB := cheapestFleet(gens, need, nil); okB && fleetCost(gens, best) < fleetCost(gens, sizes)-1e-9 {
			sizes, ok, how = best, okB, "the fleet chosen before no longer serves the need: the cheapest fleet that does"
		}
		g.chosen, g.next, g.rent = sizes, nil, 0
		return append([]int(nil), sizes...), ok, how
	}
	// Shrink within the fleet chosen: the cheapest part of it that serves.
	if sub, ok := cheapestFleetWithin(gens, need, nil, g.chosen); ok && !slicesEqual(sub, g.chosen) {
		g.chosen = sub
		chosenCost = 0
		for k, gen := range gens {
			chosenCost += float64(sub[k]) * gen.price
		}
	}
	best, _ := cheapestFleet(gens, need, nil)
	bestCost, below := 0.0, true
	price := 0.0 // of the cold starts the recomposition buys, in $
	for k, gen := range gens {
		bestCost += float64(best[k]) * gen.price
		if best[k] > g.chosen[k] {
			below = false
			r := reads[g.idx[k]].r
			price += float64(best[k]-g.chosen[k]) * (r.loadS + r.lead) / 3600 * gen.price
		}
	}
	switch {
	case bestCost >= chosenCost-1e-9:
		g.next, g.rent = nil, 0
		return keep("the cheapest fleet that serves the need is the fleet chosen before, or the part of it the need still asks for")
	case below:
		g.chosen, g.next, g.rent = best, nil, 0
		return keep("the need fell: the cheapest fleet that serves it keeps only replicas already chosen")
	}
	if !slicesEqual(best, g.next) {
		g.next, g.rent = best, 0
	}
	g.rent += (chosenCost - bestCost) * c.cfg.Interval.Seconds() / 3600
	if g.rent < price {
		return keep(fmt.Sprintf("a fleet of another composition would save $%.2f/h; its saving so far $%.4f has not paid its new replicas' cold starts ($%.4f)", chosenCost-bestCost, g.rent, price))
	}
	g.chosen, g.next, g.rent = best, nil, 0
	return keep(fmt.Sprintf("recomposed: the cheaper fleet's saving of $%.2f/h paid its new replicas' cold starts ($%.4f)", chosenCost-bestCost, price))
}

func slicesEqual(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// fleetCost is a fleet's $/h.
func fleetCost(gens []generation, sizes []int) float64 {
	cost := 0.0
	for k, gen := range gens {
		cost += float64(sizes[k]) * gen.price
	}
	return cost
}
