package control

import (
	"fmt"
	"sort"
	"time"

	"github.com/switchyard-ai/switchyard/schemas"
)

// The sleeping tier for the planner baselines (issue 30).
//
// With Config.SleepOnRelease the Controller puts a replica past its
// release hold to sleep (weights to host memory, its GPU still held, a
// wake of about a second) instead of releasing it (sleep.go). A planner
// baseline (internal/core/baselines) has no such rule: its scale-down is a
// release, and its next rise a cold start from Config.StartTier. So that
// every planner is given the same tiers, WithSleepTier carries out a
// baseline's decisions through the sleeping tier: its scale-down puts the
// surplus replicas to sleep instead of draining them, its scale-up wakes
// sleepers before any cold replica is started, and a sleeper is released
// once the baseline's decision has stayed below its level for the pool's
// prior hold (priorHold: DownLeadTimes lead times, one cold start plus one
// interval; 32 s for llama-3.1-8b on an H100 from local NVMe).
//
// Why the prior hold. It is the span the Controller holds a replica its
// evidence says nothing about, and what the Controller's earlier sleep
// rule kept a sleeper for before any return was seen (one further hold,
// docs/benchmarks.md "The sleep rule on rise-fall-repeat"). A baseline has no evidence of returns to fit
// a longer sleep to — that fit is Switchyard's rule, not the tier — so the
// tier it is lent is the sleep a replica is worth on the cold start alone:
// asleep for one lead time, a return within it costs a wake instead of a
// cold start, and past it the baseline's own decision (which already held
// the replica as long as that baseline holds) stands. The sleep is read on
// the baseline's own signal: the level's clock starts when its decision
// drops below the level and restarts whenever the decision reaches it
// again, so a baseline that keeps asking for a level keeps it awake.
//
// The baseline is shown only its hot replicas (sleepers, and replicas put
// to sleep that have not confirmed it, are left out of its inputs), so its
// signals — per-replica load averages, the replicas it counts as current
// — are those of the fleet it decided for, as without the tier. A sleeper
// is provisioned: the shell is told the baseline's size plus the sleepers
// (Decision.Replicas' Desired), so Reconcile keeps them, and drains them
// first when one is released.

// WithSleepTier returns p with its decisions carried out through the
// sleeping tier when cfg.SleepOnRelease is set, and p itself otherwise.
// cfg is the configuration p was built over (as New fills it). Every
// shell that runs a planner baseline builds it through here
// (baselines.NewPlanner), so the simulator and the live controller act the
// same.
func WithSleepTier(p Planner, cfg Config) (Planner, error) {
	if !cfg.SleepOnRelease {
		return p, nil
	}
	c, err := New(cfg)
	if err != nil {
		return nil, err
	}
	t := &sleepTier{inner: p, pools: map[string]*tierPool{}, intents: map[string]tierIntent{}}
	for _, ps := range c.pools {
		t.pools[ps.Key()] = &tierPool{hold: c.priorHold(ps), wake: ps.rep.LoadSeconds(schemas.WeightSleeping), cold: c.startSeconds(ps)}
	}
	return t, nil
}

type sleepTier struct {
	inner Planner
	pools map[string]*tierPool
	// intents is, by worker, a warmth command sent and not yet confirmed
	// by a heartbeat (dropped after intentTTL, as the Controller does).
	intents map[string]tierIntent
}

type tierPool struct {
	hold       time.Duration
	wake, cold float64
	// kept is the replicas the tier holds provisioned: the baseline's size
	// and, above it, the levels asleep. below is, for each level above the
	// baseline's size (lowest first), when its decision dropped below it.
	// It is the baseline's signal alone: a sleeper that work placed on it
	// woke (the router prices the wake) and the tier puts back to sleep
	// keeps its level's clock. A level drops below no earlier than the
	// levels above it, so the times fall toward the top, released first.
	kept  int
	below []time.Time
}

type tierIntent struct {
	state string
	at    time.Time
}

// Name is the baseline's.
func (t *sleepTier) Name() string { return t.inner.Name() }

// Decide runs the baseline on its hot replicas and carries its sizes out
// through the sleeping tier.
func (t *sleepTier) Decide(in Inputs) Decision {
	hot, asleep := map[string][]*schemas.Heartbeat{}, map[string][]*schemas.Heartbeat{}
	shown := make([]schemas.Heartbeat, 0, len(in.Workers))
	for i := range in.Workers {
		hb := &in.Workers[i]
		key := HeartbeatPool(hb, func(k string) bool { return t.pools[k] != nil })
		if hb.Draining || len(hb.Models) == 0 || t.pools[key] == nil {
			shown = append(shown, *hb)
			continue
		}
		state := hb.Models[0].State
		if it, ok := t.intents[hb.WorkerID]; ok {
			var spent bool
			if state, spent = commandedState(state, it.state, it.at, in.Now); spent {
				delete(t.intents, hb.WorkerID)
			}
		}
		if state == schemas.WeightSleeping {
			asleep[key] = append(asleep[key], hb)
			continue
		}
		hot[key] = append(hot[key], hb)
		shown = append(shown, *hb)
	}
	for id, it := range t.intents {
		if in.Now.Sub(it.at) > intentTTL {
			delete(t.intents, id) // a worker gone before it confirmed
		}
	}
	inner := in
	inner.Workers = shown
	d := t.inner.Decide(inner)
	for i := range d.Replicas {
		rd := &d.Replicas[i]
		if tp := t.pools[rd.Pool]; tp != nil {
			t.carry(tp, rd, hot[rd.Pool], asleep[rd.Pool], in.Starting[rd.Pool], in.Now, &d)
		}
	}
	return d
}

// carry turns the baseline's size for one pool into wakes, sleeps and
// the provisioned size the shell reconciles to.
func (t *sleepTier) carry(tp *tierPool, rd *ReplicaDecision, hot, asleep []*schemas.Heartbeat, starting int, now time.Time, d *Decision) {
	want := rd.Desired
	// The levels: those the baseline needs again are dropped (woken, or
	// never asleep); those it has just dropped below start their clock.
	prev := tp.kept - len(tp.below) // the baseline's size at the last decision
	if want >= tp.kept {
		tp.kept, tp.below = want, tp.below[:0]
	} else {
		var below []time.Time
		for k := want + 1; k <= tp.kept; k++ {
			at := now
			if i := k - prev - 1; i >= 0 && i < len(tp.below) {
				at = tp.below[i]
			}
			below = append(below, at)
		}
		tp.below = below
	}
	released := 0
	for len(tp.below) > 0 && now.Sub(tp.below[len(tp.below)-1]) >= tp.hold {
		tp.below = tp.below[:len(tp.below)-1]
		tp.kept--
		released++
	}
	short := want - len(hot) - starting
	switch {
	case short > 0 && len(asleep) > 0:
		// Wake sleepers before any cold start: the rest of the shortfall
		// the shell starts cold.
		sort.Slice(asleep, func(i, j int) bool { return asleep[i].WorkerID < asleep[j].WorkerID })
		for _, hb := range asleep[:min(short, len(asleep))] {
			t.warm(d, now, hb, schemas.WeightSleeping, schemas.WeightHot,
				fmt.Sprintf("wake instead of a cold start: %s wants %d replicas, %d hot and %d starting; waking takes %.1fs, a cold start %.1fs",
					t.inner.Name(), want, len(hot), starting, tp.wake, tp.cold))
		}
	case short < 0:
		// The baseline's scale-down, as far as the levels held allow: the
		// least loaded hot replicas (the newest first among equals, as
		// Reconcile drains) sleep instead of draining. Surplus past the
		// levels held is drained by the shell, sleepers first.
		n := min(-short, len(tp.below)-len(asleep))
		byLoad := append([]*schemas.Heartbeat(nil), hot...)
		sort.SliceStable(byLoad, func(i, j int) bool {
			a, b := byLoad[i], byLoad[j]
			if la, lb := a.Running+a.Waiting, b.Running+b.Waiting; la != lb {
				return la < lb
			}
			return a.WorkerID > b.WorkerID
		})
		for _, hb := range byLoad {
			if n <= 0 {
				break
			}
			if hb.Models[0].State != schemas.WeightHot || t.intents[hb.WorkerID].state != "" {
				continue
			}
			n--
			t.warm(d, now, hb, schemas.WeightHot, schemas.WeightSleeping,
				fmt.Sprintf("sleep instead of release: %s wants %d replicas, %d hot; asleep in host memory it wakes in %.1fs, a cold start takes %.1fs; released after %s below its level; its GPU stays held",
					t.inner.Name(), want, len(hot), tp.wake, tp.cold, tp.hold))
		}
	}
	rd.Desired = tp.kept
	if len(tp.below) > 0 || released > 0 {
		rd.Reason = fmt.Sprintf("%s; sleeping tier: %d levels asleep instead of released, %d released after %s below their level",
			rd.Reason, len(tp.below), released, tp.hold)
	}
}

func (t *sleepTier) warm(d *Decision, now time.Time, hb *schemas.Heartbeat, from, to, reason string) {
	t.intents[hb.WorkerID] = tierIntent{state: to, at: now}
	d.warmth(hb.WorkerID, hb.Models[0].Name, from, to, reason)
}
