package baselines

// Planner baselines: the autoscalers Switchyard's controller is measured
// against, each a control.Planner over the same inputs the controller
// reads (worker heartbeats, the router's queue per class, recent SLO
// attainment, the request mix), so the simulator's autoscaler and the
// live scaler run any of them on the same fleet with the same cold-start
// costs. Each planner_*.go cites the public design it follows and says
// what signal of theirs was mapped to what signal here.

import (
	"fmt"
	"math"
	"sort"
	"time"

	"github.com/switchyard-ai/switchyard/internal/core/control"
	"github.com/switchyard-ai/switchyard/internal/core/perf"
	"github.com/switchyard-ai/switchyard/schemas"
)

// Planner names, as --planner takes them.
const (
	PlannerDynamoThroughput = "dynamo-throughput"
	PlannerDynamoLoad       = "dynamo-load"
	PlannerWVA              = "llm-d-wva"
	PlannerKEDAHPA          = "keda-hpa"
)

// PlannerNames lists the planner baselines.
func PlannerNames() []string {
	return []string{PlannerDynamoThroughput, PlannerDynamoLoad, PlannerWVA, PlannerKEDAHPA}
}

// NewPlanner builds a planner baseline by name over cfg's pools (cfg as
// control.New fills it: its Interval is how often Decide is called, its
// Catalog prices and models the pools; with SleepOnRelease its sizes are
// carried out through the sleeping tier, control.WithSleepTier).
func NewPlanner(name string, cfg control.Config) (control.Planner, error) {
	pools, err := newPlannerPools(cfg)
	if err != nil {
		return nil, fmt.Errorf("baselines: planner %s: %w", name, err)
	}
	var p control.Planner
	switch name {
	case PlannerDynamoThroughput:
		p = newDynamoThroughput(cfg, pools)
	case PlannerDynamoLoad:
		p = newDynamoLoad(cfg, pools)
	case PlannerWVA:
		p = newWVA(cfg, pools)
	case PlannerKEDAHPA:
		p = newKEDAHPA(cfg, pools)
	default:
		return nil, fmt.Errorf("baselines: unknown planner %q (want one of %v)", name, PlannerNames())
	}
	// Every baseline is lent the tiers Switchyard's controller has: with
	// cfg.SleepOnRelease its scale-down sleeps and its scale-up wakes
	// (control.WithSleepTier), in every shell that builds it here.
	p, err = control.WithSleepTier(p, cfg)
	if err != nil {
		return nil, fmt.Errorf("baselines: planner %s: %w", name, err)
	}
	return p, nil
}

// plannerPool is one configured pool with its modelled replica and the
// planner's current desired size.
type plannerPool struct {
	control.Pool
	key     string
	rep     perf.Replica
	desired int
	started bool
}

func newPlannerPools(cfg control.Config) ([]*plannerPool, error) {
	if len(cfg.Pools) == 0 {
		return nil, fmt.Errorf("no pools")
	}
	var out []*plannerPool
	for _, p := range cfg.Pools {
		if p.Max <= 0 || p.Min < 0 || p.Min > p.Max {
			return nil, fmt.Errorf("pool %s: bounds min %d max %d", p.Key(), p.Min, p.Max)
		}
		rep, err := perf.NewReplica(cfg.Catalog, p.GPU, p.Model, p.Dtype, max(p.TP, 1))
		if err != nil {
			return nil, fmt.Errorf("pool %s: %w", p.Key(), err)
		}
		out = append(out, &plannerPool{Pool: p, key: p.Key(), rep: rep})
	}
	return out, nil
}

// view is one decision's inputs grouped by pool.
type view struct {
	in      control.Inputs
	workers map[string][]*schemas.Heartbeat // live, not draining
	current map[string]int                  // live plus starting
}

func newView(in control.Inputs, pools []*plannerPool) view {
	v := view{in: in, workers: map[string][]*schemas.Heartbeat{}, current: map[string]int{}}
	for i := range in.Workers {
		hb := &in.Workers[i]
		if hb.Draining || len(hb.Models) == 0 {
			continue
		}
		// A worker of a fixed role belongs to its role's pool, as the
		// controller keys it (control.HeartbeatPool).
		k := control.HeartbeatPool(hb, nil)
		v.workers[k] = append(v.workers[k], hb)
	}
	for _, p := range pools {
		v.current[p.key] = len(v.workers[p.key]) + in.Starting[p.key]
		if !p.started {
			p.started, p.desired = true, clampInt(v.current[p.key], p.Min, p.Max)
		}
	}
	return v
}

// mix is the request mix with the controller's defaults for an empty one.
func (v view) mix() control.Mix {
	m := v.in.Mix
	if m.PromptTokens <= 0 {
		m.PromptTokens = 1024
	}
	if m.OutputTokens <= 0 {
		m.OutputTokens = 256
	}
	return m
}

// shares splits fleet-wide demand over the pools in proportion to their
// provisioned modelled capacity (all of it to the cheapest pool per
// request when nothing is provisioned), as the router spreads it.
func shares(pools []*plannerPool, v view, itl time.Duration) map[string]float64 {
	out := map[string]float64{}
	total := 0.0
	m := v.mix()
	for _, p := range pools {
		c := float64(v.current[p.key]) * control.Capacity(p.rep, m, itl)
		out[p.key] = c
		total += c
	}
	if total > 0 {
		for k := range out {
			out[k] /= total
		}
		return out
	}
	best, bestCost := "", math.Inf(1)
	for _, p := range pools {
		if c := p.rep.PricePerHour() / math.Max(control.Capacity(p.rep, m, itl), 1e-9); c < bestCost {
			best, bestCost = p.key, c
		}
	}
	out[best] = 1
	return out
}

// set records a pool's new desired size (clamped to its bounds) and the
// change with its reason.
func (p *plannerPool) set(d *control.Decision, n int, reason string) {
	n = clampInt(n, p.Min, p.Max)
	if n == p.desired {
		return
	}
	d.Changes = append(d.Changes, control.Change{Kind: control.KindReplicas, Target: p.key,
		From: fmt.Sprint(p.desired), To: fmt.Sprint(n), Reason: reason})
	p.desired = n
}

// decision reports every pool's desired size.
func decision(now time.Time, pools []*plannerPool, v view, d *control.Decision, reasons map[string]string) control.Decision {
	d.At = now
	for _, p := range pools {
		d.Replicas = append(d.Replicas, control.ReplicaDecision{Pool: p.key, GPU: p.GPU, Model: p.Model,
			Desired: p.desired, Current: v.current[p.key], Raw: p.desired, Reason: reasons[p.key]})
	}
	return *d
}

// sortedPools orders pools by price per hour (cheapest first), then key.
func sortedPools(pools []*plannerPool) []*plannerPool {
	out := append([]*plannerPool(nil), pools...)
	sort.SliceStable(out, func(i, j int) bool {
		pi, pj := out[i].rep.PricePerHour(), out[j].rep.PricePerHour()
		if pi != pj {
			return pi < pj
		}
		return out[i].key < out[j].key
	})
	return out
}

func clampInt(v, lo, hi int) int { return max(lo, min(v, hi)) }

func ceilPos(x float64) int {
	if x <= 0 || math.IsNaN(x) {
		return 0
	}
	return int(math.Ceil(x - 1e-9))
}

// kvUsage is a heartbeat's KV cache utilisation in [0, 1].
func kvUsage(hb *schemas.Heartbeat) float64 {
	if hb.KVBlocksTotal <= 0 {
		return 0
	}
	return float64(hb.KVBlocksTotal-hb.KVBlocksFree) / float64(hb.KVBlocksTotal)
}
