package baselines

// Dynamo's planner in throughput-based mode, after NVIDIA Dynamo's "Planner
// Design" (docs.nvidia.com/dynamo, design-docs/component-design/
// planner-design; the 180 s default adjustment interval is from the
// planner overview): every adjustment_interval it reads the interval's
// request count and mean input and output lengths, forecasts the next
// interval's with a load predictor (Constant, ARIMA, Kalman or Prophet;
// the Kalman local-linear-trend filter, the one the doc recommends for
// bursty traffic, is used here), and sets the replicas to the predicted
// load over the per-GPU throughput its pre-deployment profile gives at the
// SLA (the roofline model's capacity at the ITL target stands in for the
// profile, as it does for every planner here). The correction factors
// (observed over expected TTFT and ITL) are left off, as --no-correction
// does: the profile here is the model the simulated engines run, so there
// is nothing to correct. Decisions apply at once, with no stabilization
// window: the long interval is the damping.

import (
	"fmt"
	"math"
	"time"

	"github.com/switchyard-ai/switchyard/internal/core/control"
)

// DynamoAdjustmentInterval is the throughput mode's default interval.
const DynamoAdjustmentInterval = 180 * time.Second

type dynamoThroughput struct {
	cfg      control.Config
	pools    []*plannerPool
	arr      control.Arrivals
	count    float64
	lastAt   time.Time
	kf       kalmanTrend
	interval time.Duration
}

func newDynamoThroughput(cfg control.Config, pools []*plannerPool) *dynamoThroughput {
	return &dynamoThroughput{cfg: cfg, pools: pools, interval: DynamoAdjustmentInterval}
}

func (p *dynamoThroughput) Name() string { return PlannerDynamoThroughput }

func (p *dynamoThroughput) Decide(in control.Inputs) control.Decision {
	v := newView(in, p.pools)
	var d control.Decision
	reasons := map[string]string{}
	p.count += p.arr.Observe(in)
	if p.lastAt.IsZero() {
		p.lastAt = in.Now
	}
	if dt := in.Now.Sub(p.lastAt); dt >= p.interval {
		rate := p.count / dt.Seconds()
		p.kf.observe(rate, dt.Seconds())
		pred := p.kf.forecast()
		p.count, p.lastAt = 0, in.Now
		sh := shares(p.pools, v, p.cfg.ITLTarget)
		m := v.mix()
		for _, pl := range p.pools {
			perReplica := control.Capacity(pl.rep, m, p.cfg.ITLTarget)
			need := max(1, ceilPos(pred*sh[pl.key]/math.Max(perReplica, 1e-9)))
			why := fmt.Sprintf("dynamo throughput: %.2f req/s over the last %s, Kalman forecast %.2f req/s for the next; %.2f req/s per replica at ITL %s (ISL %.0f, OSL %.0f)",
				rate, dt.Round(time.Second), pred, perReplica, p.cfg.ITLTarget, m.PromptTokens, m.OutputTokens)
			reasons[pl.key] = why
			pl.set(&d, need, why)
		}
	}
	return decision(in.Now, p.pools, v, &d, reasons)
}

// kalmanTrend is a local-linear-trend Kalman filter on the request rate:
// state (level, trend per interval), observed level plus noise. Its
// noises are set relative to the rate (our choice; Dynamo exposes them as
// configuration): the observation's is the Poisson variance of a rate
// counted over the interval, the level's and trend's a tenth and a
// hundredth of the level per interval.
type kalmanTrend struct {
	x    [2]float64
	p    [2][2]float64
	init bool
}

func (k *kalmanTrend) observe(z, seconds float64) {
	if !k.init {
		k.x = [2]float64{z, 0}
		k.p = [2][2]float64{{z + 1, 0}, {0, z + 1}}
		k.init = true
		return
	}
	lvl := math.Max(k.x[0], 1e-3)
	ql, qt := math.Pow(0.1*lvl, 2), math.Pow(0.01*lvl, 2)
	r := math.Max(z, lvl)/math.Max(seconds, 1) + 1e-6
	// Predict: x = F x, P = F P Fᵀ + Q with F = [[1 1] [0 1]].
	x0, x1 := k.x[0]+k.x[1], k.x[1]
	p00 := k.p[0][0] + k.p[0][1] + k.p[1][0] + k.p[1][1] + ql
	p01 := k.p[0][1] + k.p[1][1]
	p10 := k.p[1][0] + k.p[1][1]
	p11 := k.p[1][1] + qt
	// Update with H = [1 0].
	s := p00 + r
	g0, g1 := p00/s, p10/s
	y := z - x0
	k.x = [2]float64{x0 + g0*y, x1 + g1*y}
	k.p = [2][2]float64{{(1 - g0) * p00, (1 - g0) * p01}, {p10 - g1*p00, p11 - g1*p01}}
}

// forecast is the next interval's rate, never below zero.
func (k *kalmanTrend) forecast() float64 { return math.Max(0, k.x[0]+k.x[1]) }
