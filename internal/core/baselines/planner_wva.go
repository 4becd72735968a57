package baselines

// llm-d's Workload Variant Autoscaler (WVA), in its saturation-based
// mode, after the WVA "Saturation Analyzer" design
// (github.com/llm-d-incubation/workload-variant-autoscaler,
// docs/saturation-analyzer.md): every reconcile (60 s) it reads each
// replica's peak KV-cache usage and waiting requests over the last minute
// (max_over_time[1m]); a replica is saturated at KV ≥ kvCacheThreshold
// (0.80) or queue ≥ queueLengthThreshold (5); over the non-saturated ones
// it averages the spare KV (threshold − usage) and spare queue, and scales
// up when either falls below its trigger (kvSpareTrigger 0.10,
// queueSpareTrigger 3) — one replica more on the cheapest variant, from
// the ready replicas — and scales down one replica of the most expensive
// variant when the load spread over one replica fewer still leaves spare
// capacity above both triggers. Its cascade guard blocks a scale-up while
// any replica of the model is still starting. Variants are this fleet's
// pools of the model (one per GPU generation), priced by the catalog.
// Mapped here: vLLM's waiting count is the worker's waiting sequences
// plus its share of the router's queue, since llm-d's gateway holds no
// queue of its own and vLLM's counts everything not running.

import (
	"fmt"
	"time"

	"github.com/switchyard-ai/switchyard/internal/core/control"
)

// WVA defaults from its capacity-scaling ConfigMap.
const (
	wvaInterval       = 60 * time.Second
	wvaKVThreshold    = 0.80
	wvaQueueThreshold = 5.0
	wvaKVSpare        = 0.10
	wvaQueueSpare     = 3.0
)

type wva struct {
	cfg    control.Config
	pools  []*plannerPool
	peakKV map[string]float64 // per worker, since the last reconcile
	peakQ  map[string]float64
	pool   map[string]string // worker → pool key
	lastAt time.Time
}

func newWVA(cfg control.Config, pools []*plannerPool) *wva {
	return &wva{cfg: cfg, pools: pools, peakKV: map[string]float64{}, peakQ: map[string]float64{}, pool: map[string]string{}}
}

func (p *wva) Name() string { return PlannerWVA }

func (p *wva) Decide(in control.Inputs) control.Decision {
	v := newView(in, p.pools)
	var d control.Decision
	reasons := map[string]string{}
	ready := 0
	for _, pl := range p.pools {
		ready += len(v.workers[pl.key])
	}
	queued := 0
	for _, n := range in.Queued {
		queued += n
	}
	live := map[string]bool{}
	for _, pl := range p.pools {
		for _, hb := range v.workers[pl.key] {
			live[hb.WorkerID] = true
			p.pool[hb.WorkerID] = pl.key
			q := float64(hb.Waiting)
			if ready > 0 {
				q += float64(queued) / float64(ready)
			}
			p.peakKV[hb.WorkerID] = max(p.peakKV[hb.WorkerID], kvUsage(hb))
			p.peakQ[hb.WorkerID] = max(p.peakQ[hb.WorkerID], q)
		}
	}
	if p.lastAt.IsZero() {
		p.lastAt = in.Now
	}
	if in.Now.Sub(p.lastAt) < wvaInterval {
		return decision(in.Now, p.pools, v, &d, reasons)
	}
	p.lastAt = in.Now
	var nonSat int
	var spareKV, spareQ, loadKV, loadQ float64
	for id := range live {
		kv, q := p.peakKV[id], p.peakQ[id]
		if kv >= wvaKVThreshold || q >= wvaQueueThreshold {
			continue
		}
		nonSat++
		spareKV += wvaKVThreshold - kv
		spareQ += wvaQueueThreshold - q
		loadKV += kv
		loadQ += q
	}
	clear(p.peakKV)
	clear(p.peakQ)
	pending := 0
	for _, pl := range p.pools {
		pending += in.Starting[pl.key]
	}
	up := nonSat == 0 && ready > 0
	if nonSat > 0 {
		up = spareKV/float64(nonSat) < wvaKVSpare || spareQ/float64(nonSat) < wvaQueueSpare
	}
	if ready == 0 && queued > 0 {
		up = true
	}
	safeDown := false
	if nonSat >= 2 && nonSat == ready {
		rest := float64(nonSat - 1)
		safeDown = wvaKVThreshold-loadKV/rest >= wvaKVSpare && wvaQueueThreshold-loadQ/rest >= wvaQueueSpare
	}
	why := fmt.Sprintf("wva: %d of %d ready replicas non-saturated (peak KV < %.2f, queue < %.0f over the last minute)", nonSat, ready, wvaKVThreshold, wvaQueueThreshold)
	if nonSat > 0 {
		why += fmt.Sprintf(", mean spare KV %.2f (trigger %.2f), spare queue %.1f (trigger %.0f)", spareKV/float64(nonSat), wvaKVSpare, spareQ/float64(nonSat), wvaQueueSpare)
	}
	byPrice := sortedPools(p.pools)
	for _, pl := range p.pools {
		reasons[pl.key] = why
		// Ready replicas are the base of every target, and the desired
		// size follows the fleet between actions.
		pl.desired = clampInt(v.current[pl.key], pl.Min, pl.Max)
	}
	switch {
	case up && pending > 0:
		for _, pl := range p.pools {
			reasons[pl.key] = fmt.Sprintf("scale-up blocked: %d replicas still starting (cascade guard); %s", pending, why)
		}
	case up:
		for _, pl := range byPrice {
			if len(v.workers[pl.key])+1 <= pl.Max {
				pl.set(&d, len(v.workers[pl.key])+1, "scale up the cheapest variant: "+why)
				break
			}
		}
	case safeDown:
		for i := len(byPrice) - 1; i >= 0; i-- {
			pl := byPrice[i]
			if n := len(v.workers[pl.key]); n > pl.Min && n > 0 {
				pl.set(&d, n-1, "scale down the most expensive variant: "+why)
				break
			}
		}
	}
	return decision(in.Now, p.pools, v, &d, reasons)
}
