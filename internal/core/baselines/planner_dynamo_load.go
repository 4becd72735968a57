package baselines

// Dynamo's planner in load-based mode, after NVIDIA Dynamo's "Planner
// Design" (docs.nvidia.com/dynamo, design-docs/component-design/
// planner-design, "Load-Based Scaling"): every 5 s (its default load
// adjustment interval) it fits an online linear regression of each
// forward pass's duration on the worker's load from ForwardPassMetrics,
// predicts every worker's TTFT and ITL at its current load, scales up by
// one when the workers' load would miss the SLA and down by one when one
// worker fewer would still meet it, and makes no change while an earlier
// scaling is still in progress. Mapped here: a forward pass's duration is
// read from the heartbeat as running sequences over output tokens per
// busy second (one decode step), its load as the KV tokens in use; the TTFT of
// a worker's queued prefill (its queued prompt tokens plus its share of
// the router's queue) uses the same roofline prefill rate the engines run.
// The SLA is the controller's: ITL target (50 ms, the critical class's
// TPOT) and QueueBudget (1 s, the critical class's base TTFT). Scale-down
// needs the load redistributed over one worker fewer to stay under 80 %
// of both (our reading of the doc's scale-down check; Dynamo does not
// publish the margin as a default).

import (
	"fmt"
	"math"
	"time"

	"github.com/switchyard-ai/switchyard/internal/core/control"
	"github.com/switchyard-ai/switchyard/internal/core/perf"
)

// DynamoLoadInterval is the load mode's default adjustment interval.
const DynamoLoadInterval = 5 * time.Second

// dynamoRegressionWindow is how many recent forward passes the fit keeps.
const dynamoRegressionWindow = 200

// dynamoDownMargin is the share of the SLA the load must stay under with
// one worker fewer before scaling down.
const dynamoDownMargin = 0.8

type dynamoLoad struct {
	cfg    control.Config
	pools  []*plannerPool
	fits   map[string]*regression
	lastAt time.Time
}

func newDynamoLoad(cfg control.Config, pools []*plannerPool) *dynamoLoad {
	return &dynamoLoad{cfg: cfg, pools: pools, fits: map[string]*regression{}}
}

func (p *dynamoLoad) Name() string { return PlannerDynamoLoad }

func (p *dynamoLoad) Decide(in control.Inputs) control.Decision {
	v := newView(in, p.pools)
	var d control.Decision
	reasons := map[string]string{}
	// Forward-pass samples accumulate every call; decisions every 5 s.
	for _, pl := range p.pools {
		f := p.fits[pl.key]
		if f == nil {
			f = &regression{}
			p.fits[pl.key] = f
		}
		for _, hb := range v.workers[pl.key] {
			// One forward pass per output token of each running
			// sequence: the pass's wall time is the running sequences
			// over the tokens per busy second (the heartbeat's rate is
			// averaged over wall time, idle spells included).
			if hb.Running > 0 && hb.TokensPerSec > 0 && hb.Utilization > 0 {
				f.add(float64((hb.KVBlocksTotal-hb.KVBlocksFree)*max(hb.BlockSize, 1)), float64(hb.Running)*min(hb.Utilization, 1)/hb.TokensPerSec)
			}
		}
	}
	if !p.lastAt.IsZero() && in.Now.Sub(p.lastAt) < DynamoLoadInterval {
		return decision(in.Now, p.pools, v, &d, reasons)
	}
	p.lastAt = in.Now
	queued := 0
	for _, n := range in.Queued {
		queued += n
	}
	sh := shares(p.pools, v, p.cfg.ITLTarget)
	m := v.mix()
	itlT, ttftT := p.cfg.ITLTarget.Seconds(), p.cfg.QueueBudget.Seconds()
	for _, pl := range p.pools {
		ws := v.workers[pl.key]
		n := len(ws)
		if in.Starting[pl.key] > 0 {
			reasons[pl.key] = "dynamo load: scaling in progress"
			continue
		}
		if n == 0 {
			if queued > 0 && sh[pl.key] > 0 {
				pl.set(&d, pl.desired+1, "dynamo load: requests queued and no worker")
			}
			continue
		}
		f := p.fits[pl.key]
		kv, prefill := 0.0, float64(queued)*sh[pl.key]*m.PromptTokens
		for _, hb := range ws {
			kv += float64((hb.KVBlocksTotal - hb.KVBlocksFree) * max(hb.BlockSize, 1))
			prefill += float64(hb.QueuedTokens)
		}
		itl := func(workers int) float64 { return f.predict(kv/float64(workers), pl.rep, m) }
		ttft := func(workers int) float64 { return prefillSeconds(pl.rep, prefill/float64(workers)) }
		why := fmt.Sprintf("dynamo load: predicted ITL %.1f ms (target %.0f), queued-prefill TTFT %.2f s (target %.1f) over %d workers; regression on %d forward passes",
			itl(n)*1e3, itlT*1e3, ttft(n), ttftT, n, f.n())
		reasons[pl.key] = why
		switch {
		case itl(n) > itlT || ttft(n) > ttftT:
			pl.set(&d, n+1, "scale up: "+why)
		case n > 1 && itl(n-1) < dynamoDownMargin*itlT && ttft(n-1) < dynamoDownMargin*ttftT:
			pl.set(&d, n-1, "scale down: "+why)
		default:
			pl.desired = clampInt(n, pl.Min, pl.Max)
		}
	}
	return decision(in.Now, p.pools, v, &d, reasons)
}

// prefillSeconds is the roofline time to prefill tokens in 8k chunks.
func prefillSeconds(rep perf.Replica, tokens float64) float64 {
	if tokens <= 0 {
		return 0
	}
	return rep.PrefillSeconds(int(tokens), 0)
}

// regression is least squares of y on x over a sliding window.
type regression struct {
	xs, ys []float64
}

func (r *regression) add(x, y float64) {
	r.xs, r.ys = append(r.xs, x), append(r.ys, y)
	if len(r.xs) > dynamoRegressionWindow {
		r.xs, r.ys = r.xs[len(r.xs)-dynamoRegressionWindow:], r.ys[len(r.ys)-dynamoRegressionWindow:]
	}
}

func (r *regression) n() int { return len(r.xs) }

// predict is the fitted forward-pass time at load x; with too few or
// degenerate samples, the roofline decode step of the mix at that load
// (the bootstrap a profile would give).
func (r *regression) predict(x float64, rep perf.Replica, m control.Mix) float64 {
	n := float64(len(r.xs))
	var sx, sy, sxx, sxy float64
	for i := range r.xs {
		sx += r.xs[i]
		sy += r.ys[i]
		sxx += r.xs[i] * r.xs[i]
		sxy += r.xs[i] * r.ys[i]
	}
	den := n*sxx - sx*sx
	if n < 10 || den <= 1e-9*math.Max(1, sxx) {
		ctx := m.PromptTokens + m.OutputTokens/2
		return rep.DecodeStepSeconds(max(1, int(x/math.Max(ctx, 1))), int(ctx))
	}
	b := (n*sxy - sx*sy) / den
	a := (sy - b*sx) / n
	return math.Max(0, a+b*x)
}
