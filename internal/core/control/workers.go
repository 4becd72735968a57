package control

import (
	"fmt"
	"math"
	"slices"
	"sort"
	"strconv"
	"time"

	"github.com/switchyard-ai/switchyard/internal/core/engine"
	"github.com/switchyard-ai/switchyard/internal/core/perf"
	"github.com/switchyard-ai/switchyard/schemas"
)

// decideSpec switches speculative decoding by modelled gain at the
// worker's batch: on at low load where the extra draft tokens ride on a
// memory-bound step, off when the step turns compute-bound.
func (c *Controller) decideSpec(hb *schemas.Heartbeat, st *workerState, rep perf.Replica, in Inputs, d *Decision) {
	batch := hb.Running
	if hb.MaxBatch > hb.Running {
		batch += min(hb.Waiting, hb.MaxBatch-hb.Running)
	}
	ctx := int(in.Mix.PromptTokens + in.Mix.OutputTokens/2)
	g := SpecGain(rep, c.cfg.Spec, max(batch, 1), ctx)
	cur := hb.SpecDecode
	want := cur
	switch {
	case !cur && g >= c.cfg.SpecOnGain:
		want = true
	case cur && g < c.cfg.SpecOffGain:
		want = false
	}
	if want == cur || (!st.specAt.IsZero() && in.Now.Sub(st.specAt) < c.cfg.SpecDwell) {
		return
	}
	st.specAt = in.Now
	verb := "on"
	if !want {
		verb = "off"
	}
	reason := fmt.Sprintf("spec decoding %s: modelled %.2f× plain decode tokens/s at batch %d, context %d; band [%.2f, %.2f]",
		verb, g, batch, ctx, c.cfg.SpecOffGain, c.cfg.SpecOnGain)
	d.Spec = append(d.Spec, SpecDecision{Worker: hb.WorkerID, On: want, Gain: g, Batch: batch, Reason: reason})
	d.change(KindSpec, hb.WorkerID, strconv.FormatBool(cur), strconv.FormatBool(want), reason)
}

// decideBudget picks latency-mode budgets while high-priority work is
// waiting or missing its SLO (a batch and a prefill chunk that keep the
// ITL target) and vLLM's throughput defaults otherwise.
func (c *Controller) decideBudget(hb *schemas.Heartbeat, st *workerState, rep perf.Replica, in Inputs, latency bool, d *Decision) {
	want := [2]int{engine.DefaultMaxBatch, engine.DefaultTokenBudget}
	reason := "throughput mode: no high-priority work waiting and SLOs met; vLLM's default budgets"
	if latency {
		want[0], want[1] = budgetFor(rep, in.Mix, c.cfg.ITLTarget)
		reason = fmt.Sprintf("latency mode: high-priority work waiting or missing its SLO; batch %d and %d-token prefill chunks keep decode steps within %s (chunk steps within 2×)",
			want[0], want[1], c.cfg.ITLTarget)
	}
	cur := st.budget
	if cur[0] == 0 {
		cur = [2]int{hb.MaxBatch, engine.DefaultTokenBudget}
	}
	if want == cur || (!st.budgetAt.IsZero() && in.Now.Sub(st.budgetAt) < c.cfg.BudgetDwell) {
		return
	}
	st.budget, st.budgetAt = want, in.Now
	d.Budgets = append(d.Budgets, BudgetDecision{Worker: hb.WorkerID, MaxBatch: want[0], TokenBudget: want[1], Reason: reason})
	d.change(KindBudget, hb.WorkerID, fmt.Sprintf("%d/%d", cur[0], cur[1]), fmt.Sprintf("%d/%d", want[0], want[1]), reason)
}

// decideWarmth keeps as many replicas hot as the undamped recommendation
// needs. Surplus hot workers that stay idle are put to sleep (their HBM is
// freed for other models, and waking costs about a second where a cold
// start costs tens); sleeping workers are woken before any cold replica is
// added; a worker asleep and unneeded for UnloadAfter drops its weights.
func (c *Controller) decideWarmth(ws []schemas.Heartbeat, byPool map[string][]*schemas.Heartbeat, d *Decision, in Inputs) {
	for _, rd := range d.Replicas {
		ps := c.byKey[rd.Pool]
		hot, asleep := c.warmthOf(ps, byPool[rd.Pool], in.Now)
		need := rd.Raw
		wake := math.MaxInt
		if need > len(hot) {
			wake = need - len(hot)
		}
		sort.Slice(asleep, func(i, j int) bool { return asleep[i].WorkerID < asleep[j].WorkerID })
		for _, hb := range asleep {
			st := c.workers[hb.WorkerID]
			model := hb.Models[0].Name
			switch {
			case wake != math.MaxInt && wake > 0:
				wake--
				st.sleepSince, st.sawAsleep = time.Time{}, false
				c.warm(d, st, in.Now, hb.WorkerID, model, schemas.WeightSleeping, schemas.WeightHot,
					fmt.Sprintf("wake: %d replicas needed, %d hot; waking takes %.1fs, a cold start %.1fs", need, len(hot), ps.rep.LoadSeconds(schemas.WeightSleeping), c.startSeconds(ps)))
			case in.Now.Sub(st.sleepSince) >= c.cfg.UnloadAfter:
				st.sleepSince = time.Time{}
				c.warm(d, st, in.Now, hb.WorkerID, model, schemas.WeightSleeping, schemas.WeightCold,
					fmt.Sprintf("unload: asleep and unneeded for %s", c.cfg.UnloadAfter))
			}
		}
		c.sleepSurplus(ps, rd, hot, d, in.Now)
		c.sleepKept(ps, rd, hot, asleep, d, in.Now)
	}
}

// warmthOf sorts a pool's serving workers into hot (or loading) and
// asleep, as commanded or reported (commandedState), and keeps each
// worker's idle and asleep clocks. A worker reported hot after a heartbeat
// reported it asleep, with no wake commanded, was woken by demand: the
// router placed work on it.
func (c *Controller) warmthOf(ps *poolState, hbs []*schemas.Heartbeat, now time.Time) (hot, asleep []*schemas.Heartbeat) {
	for _, hb := range hbs {
		if hb.Draining || len(hb.Models) == 0 {
			continue
		}
		st := c.workers[hb.WorkerID]
		state, spent := commandedState(hb.Models[0].State, st.intent, st.intentAt, now)
		if spent {
			st.intent = ""
		}
		switch state {
		case schemas.WeightHot, schemas.WeightLoading:
			hot = append(hot, hb)
			if st.sawAsleep && st.intent == "" {
				st.demandWoke, ps.demandWokeAt = true, now
			}
			st.sleepSince, st.sawAsleep = time.Time{}, false
			switch {
			case hb.Running+hb.Waiting > 0:
				st.idleSince = time.Time{}
			case st.idleSince.IsZero():
				st.idleSince = now
			}
			if st.demandWoke && !st.idleSince.IsZero() && now.Sub(st.idleSince) >= c.cfg.SleepAfter {
				st.demandWoke = false
			}
		case schemas.WeightSleeping:
			st.demandWoke = false
			st.sawAsleep = st.sawAsleep || hb.Models[0].State == schemas.WeightSleeping
			asleep = append(asleep, hb)
			if st.sleepSince.IsZero() {
				st.sleepSince = now
			}
		}
	}
	return hot, asleep
}

// sleepSurplus puts to sleep the hot replicas beyond what the damped
// fleet size keeps, once idle SleepAfter. Only those may sleep: a sleeping
// replica still holds its GPU, and any request placed on it waits for the
// wake, so sleeping one the fleet still counts on trades latency for
// nothing (in a one-model pool, the HBM it frees has no other use). And
// while the pool can still shrink, the scaler releases surplus replicas
// instead: sleeping them would keep paying for GPUs the drain is about to
// give back, and requests placed on them meanwhile would wait for a wake.
// Sleep is for a pool held at its floor.
func (c *Controller) sleepSurplus(ps *poolState, rd ReplicaDecision, hot []*schemas.Heartbeat, d *Decision, now time.Time) {
	keep := max(rd.Raw, rd.Desired, 1)
	surplus := len(hot) - keep
	if rd.Desired > ps.Min {
		surplus = 0
	}
	sort.Slice(hot, func(i, j int) bool { return hot[i].WorkerID > hot[j].WorkerID })
	for _, hb := range hot {
		if surplus <= 0 {
			break
		}
		st := c.workers[hb.WorkerID]
		if st.idleSince.IsZero() || now.Sub(st.idleSince) < c.cfg.SleepAfter || hb.Models[0].State != schemas.WeightHot || st.intent != "" {
			continue
		}
		surplus--
		st.idleSince = time.Time{}
		c.warm(d, st, now, hb.WorkerID, hb.Models[0].Name, schemas.WeightHot, schemas.WeightSleeping,
			fmt.Sprintf("sleep: idle %s while %d hot replicas exceed the %d kept", c.cfg.SleepAfter, len(hot), keep))
	}
}

// sleepKept puts to sleep the replicas the scaler keeps asleep instead of
// releasing them (sleep.go): the least loaded hot ones (a worker with
// sequences running sleeps once they finish, placement meanwhile sees it
// hot; the command is repeated if no heartbeat confirms it within
// intentTTL). A demand wake says the hot replicas were too few: for
// SleepAfter after one no other replica sleeps in its place, and the
// scaler keeps asleep only those still asleep; the woken worker itself
// stays awake until it has idled SleepAfter.
func (c *Controller) sleepKept(ps *poolState, rd ReplicaDecision, hot, asleep []*schemas.Heartbeat, d *Decision, now time.Time) {
	if !ps.demandWokeAt.IsZero() && now.Sub(ps.demandWokeAt) < c.cfg.SleepAfter {
		still := 0
		for _, hb := range asleep {
			if c.workers[hb.WorkerID].intent != schemas.WeightHot {
				still++
			}
		}
		ps.sleepWant = min(ps.sleepWant, still)
		return
	}
	n := len(asleep)
	byLoad := slices.Clone(hot)
	sort.SliceStable(byLoad, func(i, j int) bool { return byLoad[i].Running+byLoad[i].Waiting < byLoad[j].Running+byLoad[j].Waiting })
	for _, hb := range byLoad {
		if n >= ps.sleepWant {
			break
		}
		st := c.workers[hb.WorkerID]
		if hb.Models[0].State != schemas.WeightHot || st.intent != "" || st.demandWoke {
			continue
		}
		n++
		st.idleSince = time.Time{}
		c.warm(d, st, now, hb.WorkerID, hb.Models[0].Name, schemas.WeightHot, schemas.WeightSleeping,
			fmt.Sprintf("sleep instead of release: %d replicas kept, %d needed; asleep in host memory it wakes in %.1fs, a cold start takes %.1fs; its GPU stays held",
				rd.Desired, rd.Raw, ps.rep.LoadSeconds(schemas.WeightSleeping), c.startSeconds(ps)))
	}
}

// intentTTL is how long a warmth command is assumed in effect before a
// heartbeat confirms it; after that the command is considered lost.
const intentTTL = 15 * time.Second

// commandedState is the weight state a worker is taken to be in: intent,
// the state last commanded at at, until its heartbeat reports it or
// intentTTL passes (spent: the intent is done with), else the reported
// one. The Controller and the baselines' sleeping tier both read it.
func commandedState(reported, intent string, at, now time.Time) (state string, spent bool) {
	switch {
	case intent == "":
		return reported, false
	case reported == intent || now.Sub(at) > intentTTL:
		return reported, true
	}
	return intent, false
}

func (c *Controller) warm(d *Decision, st *workerState, now time.Time, worker, model, from, to, reason string) {
	st.intent, st.intentAt = to, now
	d.warmth(worker, model, from, to, reason)
}

// warmth records a warmth command and its change.
func (d *Decision) warmth(worker, model, from, to, reason string) {
	d.Warmth = append(d.Warmth, WarmthDecision{Worker: worker, Model: model, State: to, Reason: reason})
	d.change(KindWarmth, worker, from, to, reason)
}

// decideShed tightens the lower classes' shedding margins while the high
// classes miss their SLO and scaling cannot help (a pool is at its
// maximum), and relaxes them once attainment has held for ShedRecover.
func (c *Controller) decideShed(now time.Time, highMiss, atMax bool, high Attainment, d *Decision) {
	var want map[string]float64
	reason := ""
	switch {
	case highMiss && atMax:
		c.okSince = time.Time{}
		if !c.tight {
			c.tight, want = true, c.cfg.ShedTightened
			reason = fmt.Sprintf("high-priority attainment %.1f%% < %.0f%% with a pool at its maximum: shed lower classes earlier", high.Ratio()*100, c.cfg.SLOTarget*100)
		}
	case highMiss:
		c.okSince = time.Time{}
	default:
		if c.okSince.IsZero() {
			c.okSince = now
		}
		if c.tight && now.Sub(c.okSince) >= c.cfg.ShedRecover {
			c.tight, want = false, c.cfg.ShedMargins
			reason = fmt.Sprintf("high-priority SLO held for %s: default margins", c.cfg.ShedRecover)
		}
	}
	for _, cl := range schemas.Priorities {
		m, ok := want[cl]
		if !ok || m == c.shed[cl] {
			continue
		}
		d.Shed = append(d.Shed, ShedDecision{Class: cl, Margin: m, Reason: reason})
		d.change(KindShed, cl, ftoa(c.shed[cl]), ftoa(m), reason)
		c.shed[cl] = m
	}
}
