package admitter

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/VictoriaMetrics/metrics"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/switchyard-ai/switchyard/internal/core/admission"
	"github.com/switchyard-ai/switchyard/schemas"
	"github.com/switchyard-ai/switchyard/services/svc"
	"github.com/switchyard-ai/switchyard/subjects"
)

// pendingReq is what the results loop needs of a request this replica
// admitted: the request as asked (the cache is keyed on the requested
// model and prompt, which a Result does not carry) and the budget charge
// to reconcile.
type pendingReq struct {
	model   string
	req     schemas.Request
	profile admission.Profile
	estUSD  float64
	expires time.Time
	// class, predictedWait and deferred are what admission predicted, to
	// check against the queue wait the result measures.
	class         string
	predictedWait time.Duration
	deferred      time.Duration
}

// inflight is a bounded id → request map with expiry. It is kept in
// memory rather than in a KV bucket on purpose: it is needed only to fill
// the cache and reconcile spend, both of which tolerate a loss on a crash
// (a cache miss later, a budget estimate left as charged), while a KV write
// per admitted request would sit on every request's path.
type inflight struct {
	mu    sync.Mutex
	max   int
	m     map[string]pendingReq
	sweep time.Time
}

func newInflight(max int) *inflight { return &inflight{max: max, m: map[string]pendingReq{}} }

func key(tenant, id string) string { return tenant + "\x00" + id }

func (f *inflight) put(tenant, id string, p pendingReq, now time.Time) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if now.Sub(f.sweep) > 10*time.Second || len(f.m) >= f.max {
		for k, v := range f.m {
			if now.After(v.expires) {
				delete(f.m, k)
			}
		}
		f.sweep = now
	}
	if len(f.m) >= f.max {
		return // full of live requests: lose a cache fill, not memory
	}
	f.m[key(tenant, id)] = p
}

func (f *inflight) get(tenant, id string) (pendingReq, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	p, ok := f.m[key(tenant, id)]
	return p, ok
}

func (f *inflight) take(tenant, id string) (pendingReq, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	p, ok := f.m[key(tenant, id)]
	delete(f.m, key(tenant, id))
	return p, ok
}

// followResults consumes RESULTS on this replica's own durable consumer:
// every replica must see the results of the requests it admitted (only it
// holds them in inflight), and workflow updates are compare-and-set and
// idempotent, so several replicas applying the same result do no harm.
func (a *Admitter) followResults(ctx context.Context) (jetstream.ConsumeContext, error) {
	cons, err := a.sh.JS.CreateOrUpdateConsumer(ctx, subjects.StreamResults, jetstream.ConsumerConfig{
		Durable:           subjects.AdmitterResultsConsumer(a.sh.Instance),
		Description:       "admitter " + a.sh.Instance + ": workflow steps, cache fills, budget reconciliation",
		FilterSubject:     subjects.ResultAll,
		AckPolicy:         jetstream.AckExplicitPolicy,
		AckWait:           10 * time.Second,
		MaxAckPending:     1024,
		DeliverPolicy:     jetstream.DeliverNewPolicy,
		InactiveThreshold: time.Hour,
	})
	if err != nil {
		return nil, fmt.Errorf("admitter results consumer: %w", err)
	}
	cc, err := cons.Consume(func(m jetstream.Msg) { a.onResult(ctx, m) },
		jetstream.PullMaxMessages(128), svc.PullExpiry,
		jetstream.ConsumeErrHandler(func(_ jetstream.ConsumeContext, err error) {
			if !errors.Is(err, jetstream.ErrNoHeartbeat) {
				a.sh.Log.Debug("results consume", "err", err)
			}
		}))
	if err != nil {
		return nil, fmt.Errorf("admitter results consume: %w", err)
	}
	return cc, nil
}

func (a *Admitter) onResult(ctx context.Context, m jetstream.Msg) {
	var res schemas.Result
	if err := svc.Decode(m.Headers(), m.Data(), &res); err != nil || res.ID == "" {
		m.Ack() // not ours to repair; the ledger and DLQ own bad results
		return
	}
	now := a.sh.Now()
	// A request this replica admitted outside any workflow has no registry
	// entry: skip the lookup, a round trip per result. Anything else —
	// a workflow step, or a request another replica (or this one before a
	// restart) admitted — is looked up.
	if p, mine := a.inflight.get(res.Tenant, res.ID); !mine || p.req.Workflow != nil {
		out, err := a.reg.RecordResult(ctx, res, now)
		if err != nil {
			a.sh.Log.Warn("workflow record result", "id", res.ID, "err", err)
			m.NakWithDelay(time.Second)
			return
		}
		if out.NewlyDoomed && out.State != nil {
			if err := a.cancelSteps(ctx, res.Tenant, out.State.ID, out, out.State.DoomedReason); err != nil {
				// The registry already holds the doom; cancels are best
				// effort from here (the router sheds the steps at their
				// deadline).
				a.sh.Log.Warn("cancel doomed steps", "workflow", out.State.ID, "err", err)
			}
		}
	}
	a.move.done(res.ID)
	if p, ok := a.inflight.take(res.Tenant, res.ID); ok {
		if a.store != nil && res.Status == schemas.StatusOK && res.FromCache == "" && p.profile.Cache.Enabled() {
			if _, err := a.store.Put(ctx, res.Tenant, p.model, &p.req, p.profile.Cache, res, now); err != nil {
				a.sh.Log.Warn("cache put", "id", res.ID, "err", err)
			}
		}
		a.quotas.Reconcile(p.profile, p.estUSD, res.CostUSD, now)
		if c, ok := admission.CheckWait(p.class, p.predictedWait, p.deferred, res); ok {
			a.recordWaitCheck(res, c, now)
		}
	}
	m.Ack()
}

// recordWaitCheck publishes how far the predicted queue wait was from the
// measured one: a wait_checked event per request and, per class, the
// absolute error as a histogram and the predicted and measured seconds as
// counters, whose ratio is the estimator's bias.
func (a *Admitter) recordWaitCheck(res schemas.Result, c admission.WaitCheck, now time.Time) {
	abs := c.Error()
	if abs < 0 {
		abs = -abs
	}
	class := svc.Labels{c.Class}
	a.handles.waitError.Get(class, func() *metrics.PrometheusHistogram {
		return a.sh.Metrics.GetOrCreatePrometheusHistogramExt(fmt.Sprintf(`switchyard_admission_wait_error_seconds{class=%q}`, c.Class), waitErrorBuckets)
	}).Update(abs.Seconds())
	a.handles.waitPredicted.Get(class, func() *metrics.FloatCounter {
		return a.sh.Metrics.GetOrCreateFloatCounter(fmt.Sprintf(`switchyard_admission_wait_predicted_seconds_total{class=%q}`, c.Class))
	}).Add(c.Predicted.Seconds())
	a.handles.waitMeasured.Get(class, func() *metrics.FloatCounter {
		return a.sh.Metrics.GetOrCreateFloatCounter(fmt.Sprintf(`switchyard_admission_wait_measured_seconds_total{class=%q}`, c.Class))
	}).Add(c.Measured.Seconds())
	// The event goes last: whoever reads it (a test, an operator's
	// dashboard) finds the metrics already counting it.
	a.sh.Emit(schemas.Event{Kind: "wait_checked", At: now, RequestID: res.ID, Tenant: res.Tenant, WorkerID: res.WorkerID,
		Reason: fmt.Sprintf("predicted wait %s, measured %s", c.Predicted.Round(time.Millisecond), c.Measured.Round(time.Millisecond)),
		Fields: map[string]any{"class": c.Class, "predicted_wait_s": c.Predicted.Seconds(), "measured_wait_s": c.Measured.Seconds(),
			"error_s": c.Error().Seconds()}})
}

// waitErrorBuckets (Prometheus le bounds, seconds): a good prediction is
// off by milliseconds; the reported failures were off by a minute.
var waitErrorBuckets = []float64{1e-3, 5e-3, 10e-3, 25e-3, 50e-3, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60, 300}
