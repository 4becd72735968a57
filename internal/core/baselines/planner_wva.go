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
	lastAt time.Time
}

func newWVA(cfg control.Config, pools []*plannerPool) *wva {
	return &wva{cfg: cfg, pools: pools, peakKV: map[string]float64{}, peakQ: map[string]float64{}}
}

func (p *wva) Name() string { return PlannerWVA }

func (p *wva) Decide(in control.Inputs) control.Decision {
	v := newView(in, p.pools)
	var d control.Decision
	reasons := map[string]string{}
	ready, queued, live := p.observe(in, v)
	if p.lastAt.IsZero() {
		p.lastAt = in.Now
	}
	if in.Now.Sub(p.lastAt) < wvaInterval {
		return decision(in.Now, p.pools, v, &d, reasons)
	}
	p.lastAt = in.Now
	sat := p.saturation(live)
	pending := 0
	for _, pl := range p.pools {
		pending += in.Starting[pl.key]
	}
	why := sat.why(ready)
	for _, pl := range p.pools {
		reasons[pl.key] = why
		// Ready replicas are the base of every target, and the desired
		// size follows the fleet between actions.
		pl.desired = clampInt(v.current[pl.key], pl.Min, pl.Max)
	}
	up := sat.scaleUp(ready, queued)
	switch {
	case up && pending > 0:
		for _, pl := range p.pools {
			reasons[pl.key] = fmt.Sprintf("scale-up blocked: %d replicas still starting (cascade guard); %s", pending, why)
		}
	case up:
		p.addCheapest(&d, v, why)
	case sat.safeDown(ready):
		p.removeDearest(&d, v, why)
	}
	return decision(in.Now, p.pools, v, &d, reasons)
}

// observe records each ready replica's peak KV usage and waiting requests
// since the last reconcile, its waiting count including its share of the
// router's queue. It returns the ready replicas, the router's queue and
// the live workers.
func (p *wva) observe(in control.Inputs, v view) (ready, queued int, live map[string]bool) {
	for _, pl := range p.pools {
		ready += len(v.workers[pl.key])
	}
	for _, n := range in.Queued {
		queued += n
	}
	live = map[string]bool{}
	for _, pl := range p.pools {
		for _, hb := range v.workers[pl.key] {
			live[hb.WorkerID] = true
			q := float64(hb.Waiting)
			if ready > 0 {
				q += float64(queued) / float64(ready)
			}
			p.peakKV[hb.WorkerID] = max(p.peakKV[hb.WorkerID], kvUsage(hb))
			p.peakQ[hb.WorkerID] = max(p.peakQ[hb.WorkerID], q)
		}
	}
	return ready, queued, live
}

// wvaSaturation is the Saturation Analyzer's reading of one reconcile:
// how many replicas are below both thresholds, and their summed spare
// capacity and load.
type wvaSaturation struct {
	nonSaturated    int
	spareKV, spareQ float64
	loadKV, loadQ   float64
}

// saturation reads the live replicas' peaks since the last reconcile and
// starts the next minute's peaks afresh.
func (p *wva) saturation(live map[string]bool) wvaSaturation {
	var s wvaSaturation
	for id := range live {
		kv, q := p.peakKV[id], p.peakQ[id]
		if kv >= wvaKVThreshold || q >= wvaQueueThreshold {
			continue
		}
		s.nonSaturated++
		s.spareKV += wvaKVThreshold - kv
		s.spareQ += wvaQueueThreshold - q
		s.loadKV += kv
		s.loadQ += q
	}
	clear(p.peakKV)
	clear(p.peakQ)
	return s
}

// scaleUp is WVA's scale-up verdict: every ready replica saturated, or the
// mean spare KV or queue below its trigger, or no replica at all with
// requests waiting.
func (s wvaSaturation) scaleUp(ready, queued int) bool {
	if ready == 0 && queued > 0 {
		return true
	}
	if s.nonSaturated == 0 {
		return ready > 0
	}
	n := float64(s.nonSaturated)
	return s.spareKV/n < wvaKVSpare || s.spareQ/n < wvaQueueSpare
}

// safeDown is WVA's scale-down verdict: every ready replica non-saturated,
// at least two of them, and the load spread over one fewer still leaves
// spare capacity above both triggers.
func (s wvaSaturation) safeDown(ready int) bool {
	if s.nonSaturated < 2 || s.nonSaturated != ready {
		return false
	}
	rest := float64(s.nonSaturated - 1)
	return wvaKVThreshold-s.loadKV/rest >= wvaKVSpare && wvaQueueThreshold-s.loadQ/rest >= wvaQueueSpare
}

// why explains the reading for every pool's reason.
func (s wvaSaturation) why(ready int) string {
	why := fmt.Sprintf("wva: %d of %d ready replicas non-saturated (peak KV < %.2f, queue < %.0f over the last minute)", s.nonSaturated, ready, wvaKVThreshold, wvaQueueThreshold)
	if s.nonSaturated > 0 {
		n := float64(s.nonSaturated)
		why += fmt.Sprintf(", mean spare KV %.2f (trigger %.2f), spare queue %.1f (trigger %.0f)", s.spareKV/n, wvaKVSpare, s.spareQ/n, wvaQueueSpare)
	}
	return why
}

// addCheapest adds one replica to the cheapest variant with room for it.
func (p *wva) addCheapest(d *control.Decision, v view, why string) {
	for _, pl := range sortedPools(p.pools) {
		if len(v.workers[pl.key])+1 <= pl.Max {
			pl.set(d, len(v.workers[pl.key])+1, "scale up the cheapest variant: "+why)
			return
		}
	}
}

// removeDearest removes one replica from the most expensive variant above
// its minimum.
func (p *wva) removeDearest(d *control.Decision, v view, why string) {
	byPrice := sortedPools(p.pools)
	for i := len(byPrice) - 1; i >= 0; i-- {
		pl := byPrice[i]
		if n := len(v.workers[pl.key]); n > pl.Min && n > 0 {
			pl.set(d, n-1, "scale down the most expensive variant: "+why)
			return
		}
	}
}
