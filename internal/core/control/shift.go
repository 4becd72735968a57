package control

import (
	"fmt"
	"math"
	"sort"
	"time"

	"github.com/switchyard-ai/switchyard/schemas"
)

// GPUs that change model (issue 30, Config.ShiftModels).
//
// On a fleet serving several models, the pools of one GPU type share that
// type's GPUs (Config.Inventory): a GPU holding one model can serve another
// once that model's weights are in its HBM, and from host memory that is a
// wake of about a second (the catalog's host tier: 1.1 s for an 8B model),
// against a 28–29 s engine start from the page cache or local disk. So when
// one model's demand falls as another's rises, moving a GPU between them
// buys the rising model capacity in seconds without buying a GPU.
//
// Each decision measures every model's demand over the time a switch
// takes (a fast level: arrivals seen on the model's workers and in the
// router's queue for it) against the capacity its replicas plan to serve,
// and prices, for each GPU type, the best switch: the GPU moved from the
// model it costs least to the model short of the most. A switch is paid
// for by the GPU's service for its duration — its drain (the requests it
// holds, finished first) plus the load from the tier the new model's
// weights sit in on that worker, read from its heartbeat (host when asleep
// there, else the page cache or disk at the catalog's speeds) — so a cold
// switch costs some 25 times a warm one. The decision is a ski rental: the
// rent is the requests the short model goes without (less those the donor
// would lose), accrued each interval the same switch stays the best one;
// the switch is bought once the rent paid reaches its price, which bounds
// what a switch made for a swing that ends at once can cost to the price
// itself. A model keeps at least one replica while it has demand (and one
// always: its requests have nowhere else to run).
//
// The old model is put to sleep in host memory, not dropped, so the way
// back is the cheap tier; the GPU stays provisioned throughout (it is
// counted in GPU-hours as any replica). Pools in a shift group are sized by
// the switches alone: their recommendations feed the forecast, but no
// replica is started or released for them.

// shiftGroup is the pools of one GPU type (and TP) that share its GPUs.
type shiftGroup struct {
	gpu   string
	tp    int
	n     int
	pools []*poolState
	// debt is the rent accrued (requests short) for the pair from → to
	// since it became the best switch; it resets when the pair changes or
	// the deficit ends.
	debt     float64
	from, to string
}

// modelFlow is one model's demand across every pool serving it.
type modelFlow struct {
	lastLoad float64
	haveLast bool
	fast     float64
}

// modelTally is one model's demand and capacity at a decision.
type modelTally struct {
	demand, capacity float64
	replicas         int
}

// buildShiftGroups groups the pools of whole requests by GPU type and TP
// (Config.ShiftModels); a group is pools of at least two models.
func (c *Controller) buildShiftGroups() error {
	if !c.cfg.ShiftModels {
		return nil
	}
	byGPU := map[string]*shiftGroup{}
	var order []string
	for _, ps := range c.pools {
		if FixedRole(ps.Role) {
			continue
		}
		k := fmt.Sprintf("%s/%d", ps.rep.GPU.Name, ps.TP)
		g := byGPU[k]
		if g == nil {
			g = &shiftGroup{gpu: ps.rep.GPU.Name, tp: ps.TP}
			byGPU[k] = g
			order = append(order, k)
		}
		g.pools = append(g.pools, ps)
	}
	for _, k := range order {
		g := byGPU[k]
		if len(g.pools) < 2 {
			continue
		}
		n, ok := c.cfg.Inventory[g.gpu]
		if !ok || n < 1 {
			return fmt.Errorf("control: shift models: GPU %s: no inventory (Config.Inventory[%q] = %d, want at least 1)", g.gpu, g.gpu, n)
		}
		g.n = n
		for _, ps := range g.pools {
			ps.shift = g
			ps.Min, ps.Max = 0, n
		}
		c.groups = append(c.groups, g)
	}
	if len(c.groups) == 0 {
		return fmt.Errorf("control: shift models: no GPU type has pools of two models to shift between")
	}
	return nil
}

// switchingIn counts, per pool, the workers commanded to switch into it
// whose heartbeats do not show it yet (they count as replicas on their way,
// as starting ones do), added to starting. A switch is confirmed when the
// worker heartbeats the new model first, and taken as lost after
// switchTTL past its priced duration.
func (c *Controller) switchingIn(byPool map[string][]*schemas.Heartbeat, in Inputs) map[string]int {
	out := make(map[string]int, len(in.Starting))
	for k, v := range in.Starting {
		out[k] = v
	}
	for _, hbs := range byPool {
		for _, hb := range hbs {
			st := c.workers[hb.WorkerID]
			if st == nil || st.switchTo == "" {
				continue
			}
			switch {
			case len(hb.Models) > 0 && hb.Models[0].Name == st.switchTo && !hb.Draining:
				st.switchTo = ""
			case in.Now.Sub(st.switchAt) > st.switchFor+switchTTL:
				st.switchTo = ""
			default:
				out[PoolKey(hb.GPU, st.switchTo)]++
			}
		}
	}
	return out
}

// Shifting reports whether pool is sized by the switches of GPUs that
// change model (a pool of a shift group): a scaler starts and releases no
// replica for it. Set at New and never changed, so safe to call anytime.
func (c *Controller) Shifting(pool string) bool {
	ps := c.byKey[pool]
	return ps != nil && ps.shift != nil
}

// switchTTL is how long past its priced duration a switch is trusted
// before a heartbeat confirms it.
const switchTTL = 15 * time.Second

// switching reports whether a worker has a switch under way.
func (c *Controller) switching(id string) bool {
	st := c.workers[id]
	return st != nil && st.switchTo != ""
}

// observeModels feeds each model's interval of arrivals into its fast
// level: completions on its workers, the growth of what is in the system
// on them, and of what the router holds queued for it (Inputs.QueuedByModel
// where the caller knows it, else the pools' shares of the queue).
func (c *Controller) observeModels(in Inputs, wake float64) {
	type flow struct{ done, load float64 }
	now := map[string]*flow{}
	for _, ps := range c.pools {
		f := now[ps.Model]
		if f == nil {
			f = &flow{}
			now[ps.Model] = f
		}
		f.done += ps.seenDone
		f.load += ps.seenInSystem
		if in.QueuedByModel == nil {
			f.load += ps.seenQueued
		}
	}
	iv := c.cfg.Interval.Seconds()
	gain := min(1, iv/(wake+iv))
	for m, f := range now {
		if in.QueuedByModel != nil {
			f.load += float64(in.QueuedByModel[m])
		}
		mf := c.flows[m]
		if mf == nil {
			mf = &modelFlow{}
			c.flows[m] = mf
		}
		if mf.haveLast {
			rate := max(0, f.done+f.load-mf.lastLoad) / iv
			mf.fast += gain * (rate - mf.fast)
		}
		mf.lastLoad, mf.haveLast = f.load, true
	}
}

// decideShifts prices and orders at most one switch per GPU type, and
// sizes the shift pools by the switches.
func (c *Controller) decideShifts(byPool map[string][]*schemas.Heartbeat, in Inputs, d *Decision) {
	if len(c.groups) == 0 {
		return
	}
	count := map[*poolState]int{}
	for _, ps := range c.pools {
		n := in.Starting[ps.Key()]
		for _, hb := range byPool[ps.Key()] {
			if !hb.Draining {
				n++
			}
		}
		count[ps] = n
	}
	c.observeModels(in, c.groups[0].pools[0].rep.TierSeconds(schemas.TierHost))
	models := map[string]*modelTally{}
	for _, ps := range c.pools {
		t := models[ps.Model]
		if t == nil {
			t = &modelTally{}
			models[ps.Model] = t
		}
		t.capacity += float64(count[ps]) * ps.capU
		t.replicas += count[ps]
	}
	for m, t := range models {
		queued := 0.0
		if in.QueuedByModel != nil {
			queued = float64(in.QueuedByModel[m])
		} else {
			for _, ps := range c.pools {
				if ps.Model == m {
					queued += ps.seenQueued
				}
			}
		}
		rate := c.flows[m].fast
		t.demand = poissonRate(rate, c.cfg.BurstWindow.Seconds(), c.cfg.HeadroomZ) + queued/c.cfg.DrainTarget.Seconds()
	}
	for _, g := range c.groups {
		c.shiftGroup(g, byPool, in, count, models, d)
	}
	for i := range d.Replicas {
		rd := &d.Replicas[i]
		ps := c.byKey[rd.Pool]
		if ps == nil || ps.shift == nil {
			continue
		}
		if n := count[ps]; n != ps.desired {
			d.change(KindReplicas, ps.Key(), fmt.Sprint(ps.desired), fmt.Sprint(n), "GPUs change model: sized by the switches")
			ps.desired = n
		}
		rd.Desired, rd.Max = ps.desired, ps.Max
		rd.Reason = fmt.Sprintf("GPUs change model: %d of the %d %s GPUs serve %s; %s", ps.desired, ps.shift.n, ps.shift.gpu, ps.Model, rd.Reason)
	}
}

// switchCandidate is one priced switch: worker w of pool from to the
// pool to of the same GPU type.
type switchCandidate struct {
	hb       *schemas.Heartbeat
	from, to *poolState
	rent     float64 // requests/s the switch serves more
	seconds  float64 // drain plus load
	tier     string  // where the new model's weights sit on the worker
	price    float64 // requests the GPU's service for the switch's duration
}

// shiftGroup accrues the rent of the group's best switch and orders it once
// the rent paid reaches its price.
func (c *Controller) shiftGroup(g *shiftGroup, byPool map[string][]*schemas.Heartbeat, in Inputs, count map[*poolState]int, models map[string]*modelTally, d *Decision) {
	best, ok := c.bestSwitch(g, byPool, models)
	if !ok || best.rent <= 0 {
		g.debt, g.from, g.to = 0, "", ""
		return
	}
	if best.from.Model != g.from || best.to.Model != g.to {
		g.debt, g.from, g.to = 0, best.from.Model, best.to.Model
	}
	g.debt += best.rent * c.cfg.Interval.Seconds()
	if g.debt < best.price {
		return
	}
	g.debt, g.from, g.to = 0, "", ""
	st := c.workers[best.hb.WorkerID]
	st.switchTo, st.switchAt, st.switchFor = best.to.Model, in.Now, time.Duration(best.seconds*float64(time.Second))
	count[best.from]--
	count[best.to]++
	ft, tt := models[best.from.Model], models[best.to.Model]
	ft.capacity -= best.from.capU
	ft.replicas--
	tt.capacity += best.to.capU
	tt.replicas++
	reason := fmt.Sprintf("switch %s from %s to %s: %s is short %.2f req/s (demand %.2f, capacity %.2f), %s would keep %.2f of its %.2f; the switch serves %.2f req/s more and takes %.1fs (drain, then %s's weights from %s); rent paid reached its price of %.0f requests (the GPU's service for the switch)",
		best.hb.WorkerID, best.from.Model, best.to.Model, best.to.Model, tt.demand-(tt.capacity-best.to.capU), tt.demand, tt.capacity-best.to.capU,
		best.from.Model, ft.capacity, ft.demand, best.rent, best.seconds, best.to.Model, best.tier, best.price)
	d.Switches = append(d.Switches, SwitchDecision{Worker: best.hb.WorkerID, GPU: g.gpu, From: best.from.Model, To: best.to.Model,
		FromTier: best.tier, Seconds: best.seconds, Reason: reason})
	d.change(KindSwitch, best.hb.WorkerID, best.from.Model, best.to.Model, reason)
}

// bestSwitch is the group's switch that serves the most requests more:
// to the model short of the most, from the one that loses least, on the
// donor's worker whose switch is quickest.
func (c *Controller) bestSwitch(g *shiftGroup, byPool map[string][]*schemas.Heartbeat, models map[string]*modelTally) (switchCandidate, bool) {
	var best switchCandidate
	found := false
	for _, to := range g.pools {
		tt := models[to.Model]
		short := tt.demand - tt.capacity
		if short <= 0 {
			continue
		}
		gain := min(to.capU, short)
		for _, from := range g.pools {
			ft := models[from.Model]
			if from == to || ft.replicas < 2 {
				// A model keeps one replica: its requests have nowhere
				// else to run.
				continue
			}
			loss := max(0, min(from.capU, ft.demand-(ft.capacity-from.capU)))
			hb, secs, tier, ok := c.quickestDonor(byPool[from.Key()], from, to)
			if !ok {
				continue
			}
			cand := switchCandidate{hb: hb, from: from, to: to, rent: gain - loss, seconds: secs, tier: tier,
				price: secs * max(from.capU, to.capU)}
			if !found || cand.rent > best.rent || (cand.rent == best.rent && cand.price < best.price) {
				best, found = cand, true
			}
		}
	}
	return best, found
}

// quickestDonor is the worker of pool from whose switch to pool to's model
// is quickest: its drain (a request's time in the system when it holds
// any) plus the load from the tier to's weights sit in on it.
func (c *Controller) quickestDonor(hbs []*schemas.Heartbeat, from, to *poolState) (*schemas.Heartbeat, float64, string, bool) {
	var best *schemas.Heartbeat
	bestS, bestTier := math.Inf(1), ""
	ws := append([]*schemas.Heartbeat(nil), hbs...)
	sort.Slice(ws, func(i, j int) bool { return ws[i].WorkerID < ws[j].WorkerID })
	for _, hb := range ws {
		if hb.Draining || len(hb.Models) == 0 || hb.Models[0].State != schemas.WeightHot || c.switching(hb.WorkerID) {
			continue
		}
		load, tier := c.loadOn(hb, to)
		drain := 0.0
		if hb.Running+hb.Waiting > 0 {
			drain = from.reqSeconds
		}
		if s := drain + load; s < bestS {
			best, bestS, bestTier = hb, s, tier
		}
	}
	return best, bestS, bestTier, best != nil
}

// loadOn is the time to bring pool to's model into HBM on the worker of
// hb, from the tier its heartbeat says the weights sit in (the worker's
// own estimate when it gives one), or from Config.StartTier where it does
// not list the model.
func (c *Controller) loadOn(hb *schemas.Heartbeat, to *poolState) (float64, string) {
	for _, m := range hb.Models[1:] {
		if m.Name != to.Model {
			continue
		}
		tier := m.Tier
		if tier == "" {
			tier = schemas.WeightTier(m.State)
		}
		if m.LoadSeconds > 0 {
			return m.LoadSeconds, tier
		}
		if s := to.rep.TierSeconds(tier); !math.IsInf(s, 1) {
			return s, tier
		}
	}
	return to.rep.TierSeconds(c.cfg.StartTier), c.cfg.StartTier
}
