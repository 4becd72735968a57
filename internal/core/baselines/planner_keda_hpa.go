package baselines

// The Kubernetes Horizontal Pod Autoscaler driven by KEDA's NATS JetStream
// scaler, after KEDA's "NATS JetStream" scaler page (keda.sh/docs/
// scalers/nats-jetstream: the consumer's lag against lagThreshold as an
// average value per replica) and the Kubernetes HPA algorithm
// (kubernetes.io/docs/tasks/run-application/horizontal-pod-autoscale:
// desired = ceil(current × metric / target), skipped within the 0.1
// tolerance; scale-down to the highest recommendation of the 300 s
// stabilization window; default behavior scales up by at most
// max(100 %, 4 pods) and down by at most 100 % per 15 s sync period).
// For an AverageValue target the formula reduces to ceil(lag /
// lagThreshold). Mapped here: the lag is what deploy/k8s's ScaledObject
// watches, the admitted requests not yet dispatched (the router
// consumers' pending) plus those dispatched and waiting on a worker
// (un-acked dispatches). lagThreshold is 10, the value KEDA's example
// uses; minReplicaCount 1.

import (
	"fmt"
	"math"
	"time"

	"github.com/switchyard-ai/switchyard/internal/core/control"
)

const (
	hpaSyncPeriod   = 15 * time.Second
	hpaTolerance    = 0.1
	hpaDownWindow   = 300 * time.Second
	kedaLagPerPod   = 10.0
	hpaUpPods       = 4
	hpaUpPercent    = 1.0
	hpaDownPercent  = 1.0
	kedaMinReplicas = 1
)

type kedaHPA struct {
	cfg    control.Config
	pools  []*plannerPool
	recs   map[string][]hpaRec
	lastAt time.Time
}

type hpaRec struct {
	at time.Time
	n  int
}

func newKEDAHPA(cfg control.Config, pools []*plannerPool) *kedaHPA {
	return &kedaHPA{cfg: cfg, pools: pools, recs: map[string][]hpaRec{}}
}

func (p *kedaHPA) Name() string { return PlannerKEDAHPA }

func (p *kedaHPA) Decide(in control.Inputs) control.Decision {
	v := newView(in, p.pools)
	var d control.Decision
	reasons := map[string]string{}
	if !p.lastAt.IsZero() && in.Now.Sub(p.lastAt) < hpaSyncPeriod {
		return decision(in.Now, p.pools, v, &d, reasons)
	}
	p.lastAt = in.Now
	queued := 0
	for _, n := range in.Queued {
		queued += n
	}
	sh := shares(p.pools, v, p.cfg.ITLTarget)
	for _, pl := range p.pools {
		lag := float64(queued) * sh[pl.key]
		for _, hb := range v.workers[pl.key] {
			lag += float64(hb.Waiting)
		}
		cur := max(v.current[pl.key], 0)
		minR := max(pl.Min, kedaMinReplicas)
		var rec int
		ratio := 0.0
		if cur == 0 {
			rec = ceilPos(lag / kedaLagPerPod)
		} else {
			ratio = lag / float64(cur) / kedaLagPerPod
			rec = cur
			if math.Abs(ratio-1) > hpaTolerance {
				rec = ceilPos(float64(cur) * ratio)
			}
		}
		rec = clampInt(rec, minR, pl.Max)
		// Stabilization: scale-down goes only to the highest
		// recommendation of the window.
		rs := append(p.recs[pl.key], hpaRec{in.Now, rec})
		k := 0
		for k < len(rs) && in.Now.Sub(rs[k].at) > hpaDownWindow {
			k++
		}
		rs = rs[k:]
		p.recs[pl.key] = rs
		next := rec
		if rec < cur {
			hi := rec
			for _, r := range rs {
				hi = max(hi, r.n)
			}
			next = min(cur, hi)
			next = max(next, cur-int(math.Floor(float64(cur)*hpaDownPercent)))
		} else if rec > cur {
			next = min(rec, cur+max(hpaUpPods, int(math.Ceil(float64(cur)*hpaUpPercent))))
		}
		why := fmt.Sprintf("keda-hpa: lag %.0f over %d replicas against lagThreshold %.0f (ratio %.2f, tolerance %.1f) recommends %d; scale-down to the highest of the last %s",
			lag, cur, kedaLagPerPod, ratio, hpaTolerance, rec, hpaDownWindow)
		reasons[pl.key] = why
		pl.desired = clampInt(cur, pl.Min, pl.Max)
		pl.set(&d, next, why)
	}
	return decision(in.Now, p.pools, v, &d, reasons)
}
