// Package admitter is the admitter service shell. It consumes SUBMIT,
// decodes each submission (internal/adapter/intake), gathers what the admission
// core needs — the tenant's profile, the workflow's registry state, a
// cache lookup, the queue depth per class and the fleet's throughput from
// heartbeats — asks admission.Decide, and carries the decision out:
// publish the admitted envelope on sy.admitted.<class>.<bucket>.<tenant>
// (now, or at a trough through a JetStream message schedule), replay a
// cached answer, or publish the specific error result. It also follows
// RESULTS to record workflow steps, cancel the running steps of doomed
// workflows, fill the cache and reconcile budgets. Every submission it
// acknowledges has produced its outcome durably first.
package admitter

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/VictoriaMetrics/metrics"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/switchyard-ai/switchyard/internal/adapter/cachestore"
	"github.com/switchyard-ai/switchyard/internal/adapter/intake"
	"github.com/switchyard-ai/switchyard/internal/adapter/workflowstore"
	"github.com/switchyard-ai/switchyard/internal/core/admission"
	"github.com/switchyard-ai/switchyard/internal/core/catalog"
	"github.com/switchyard-ai/switchyard/internal/core/perf"
	"github.com/switchyard-ai/switchyard/internal/core/workflow"
	"github.com/switchyard-ai/switchyard/schemas"
	"github.com/switchyard-ai/switchyard/services/svc"
	"github.com/switchyard-ai/switchyard/subjects"
)

// Config configures the admitter.
type Config struct {
	// ModelKnown validates model names against the catalog.
	ModelKnown schemas.ModelLookup
	// ContextWindow gives a model's context window in tokens (0 when
	// unknown); nil means what a live worker reports for it in its
	// heartbeats, else the Catalog's max_context.
	ContextWindow func(model string) int
	Limits        schemas.Limits
	// Tenants are the tenant profiles; nil means Permissive().
	Tenants *admission.Tenants
	// Catalog is the GPU and model catalog (catalog.Default() when nil):
	// context windows, and the default Service's roofline figures.
	Catalog *catalog.Catalog
	// Estimate predicts latency and GPU work; nil means the ladder
	// estimator over the tenants' model ladder.
	Estimate admission.Estimator
	// Service predicts prefill and decode seconds on a replica kind
	// (internal/core/perf's roofline model when nil): the estimate admission
	// sheds and defers on is the request alone on the fastest kind of
	// replica the live fleet serves its model on, as the simulator's is;
	// Estimate is the fallback while no worker has been heard from. One
	// that is also an admission.ColdLoader (the roofline model is) prices
	// the cold start of a controller's pool whose replicas message gives
	// none.
	Service admission.ServiceModel
	Shedder admission.Shedder
	Defer   admission.DeferPolicy
	// Cache configures the response cache bucket; NoCache turns the cache
	// off for every tenant.
	Cache    cachestore.Config
	NoCache  bool
	Workflow workflowstore.Config
	// LoadInterval is how often the router consumers' pending counts are
	// read; 0 means 500 ms.
	LoadInterval    time.Duration
	MaxMessageBytes int
	// AckWait bounds how long a crashed admitter holds a message.
	AckWait time.Duration
	// Concurrency is how many submissions are decided at once; 0 means 16.
	// Each waits on KV reads and a stored publish, so a handful in flight
	// keeps one admitter busy without reordering anything that matters:
	// every request is decided on its own.
	Concurrency int
	// Tokenizers are the models' own tokenizers (LoadTokenizers): an
	// admitted prompt's token count and block hashes come from its model's,
	// so they meet a real engine's KV events; a model without one keeps
	// the built-in approximate tokenizer (tokenize.go).
	Tokenizers map[string]PromptTokenizer
}

// Permissive is the tenant configuration used when none is given: every
// tenant gets a profile that may use any class (standard by default), any
// model and "auto", with no quota and no cache — the walking skeleton's
// behaviour, with shedding and workflows still on.
func Permissive() *admission.Tenants {
	t, err := admission.NewTenants(admission.Config{
		UnknownTenants: admission.UnknownDefault,
		Default: admission.Profile{
			Priority:        schemas.PriorityCritical,
			DefaultPriority: schemas.PriorityStandard,
			AllowAuto:       true,
		},
	})
	if err != nil {
		panic(fmt.Sprintf("admitter: permissive tenants: %v", err))
	}
	return t
}

// Admitter is one admitter replica.
type Admitter struct {
	sh     *svc.Shell
	cfg    Config
	quotas *admission.Quotas
	store  *cachestore.Store
	reg    *workflowstore.Registry

	mu    sync.Mutex
	fleet admission.FleetView
	// polled is the router consumers' pending count at the last poll;
	// since counts what this replica admitted after it, so a burst is seen
	// before the next poll.
	polled map[string]int
	since  map[string]int

	inflight   *inflight
	shed       shedControl  // the controller's margins (control.go)
	move       moveState    // scalable pools and requests waiting for a model (move.go)
	tokenizers tokenizerUse // models reported as on the built-in tokenizer (tokenize.go)
	handles    admitterMetrics
}

// admitterMetrics are the metric handles named per request, looked up by
// label values instead of a fmt.Sprintf each time (svc.Handles).
type admitterMetrics struct {
	admissions    svc.Handles[*metrics.Counter]             // action, class, code
	warming       svc.Handles[*metrics.Gauge]               // class
	waitError     svc.Handles[*metrics.PrometheusHistogram] // class
	waitPredicted svc.Handles[*metrics.FloatCounter]        // class
	waitMeasured  svc.Handles[*metrics.FloatCounter]        // class
}

// New builds an admitter over a shell.
func New(sh *svc.Shell, cfg Config) *Admitter {
	if cfg.Tenants == nil {
		cfg.Tenants = Permissive()
	}
	if cfg.MaxMessageBytes == 0 {
		cfg.MaxMessageBytes = schemas.MaxPayload
	}
	if cfg.AckWait == 0 {
		cfg.AckWait = 4 * time.Second
	}
	if cfg.LoadInterval <= 0 {
		cfg.LoadInterval = 500 * time.Millisecond
	}
	if cfg.Concurrency <= 0 {
		cfg.Concurrency = 16
	}
	if cfg.Estimate == nil {
		cfg.Estimate = admission.LadderEstimator(cfg.Tenants.Ladder(), nil)
	}
	if cfg.Service == nil {
		cfg.Service = perf.NewPredictor(cfg.Catalog)
	}
	a := &Admitter{sh: sh, cfg: cfg, quotas: admission.NewQuotas(),
		polled: map[string]int{}, since: map[string]int{}, inflight: newInflight(100000)}
	if a.cfg.ContextWindow == nil {
		a.cfg.ContextWindow = a.contextWindow
	}
	return a
}

// contextWindow is the window a live worker reports for model in its
// heartbeats — the engine's own figure, and the only one for a model the
// catalog does not know — else the catalog's max_context, 0 when neither
// knows the model.
func (a *Admitter) contextWindow(model string) int {
	a.mu.Lock()
	w := a.fleet.ContextWindow(model, a.sh.Now())
	a.mu.Unlock()
	if w > 0 {
		return w
	}
	if a.cfg.Catalog != nil {
		if m, ok := a.cfg.Catalog.Model(model); ok {
			return m.MaxContext
		}
	}
	return 0
}

// Run consumes submissions until ctx ends.
func (a *Admitter) Run(ctx context.Context) error {
	// Events held for a batch go out before the connection closes.
	defer a.sh.FlushEvents()
	var err error
	if !a.cfg.NoCache {
		if a.store, err = cachestore.Open(ctx, a.sh.JS, a.cfg.Cache); err != nil {
			return err
		}
	}
	if a.reg, err = workflowstore.Open(ctx, a.sh.JS, a.cfg.Workflow); err != nil {
		return err
	}
	hb, err := a.sh.NC.Subscribe(subjects.HeartbeatAll, a.onHeartbeat)
	if err != nil {
		return fmt.Errorf("admitter heartbeats: %w", err)
	}
	defer hb.Unsubscribe()
	// Until it has listened for a staleness bound the view may lack live
	// workers it has not heard yet, and refuses nothing unplaceable: a
	// restarted admitter must not refuse a backlog of submissions for
	// models whose workers have not beaten since it subscribed.
	a.mu.Lock()
	a.fleet.Listen(a.sh.Now())
	a.mu.Unlock()
	unshed, err := a.shed.follow(a.sh.NC, a.sh.Log)
	if err != nil {
		return err
	}
	defer unshed()
	unpools, err := a.move.followPools(a.sh.NC, a.sh.Now, a.sh.Log)
	if err != nil {
		return err
	}
	defer unpools()
	var bg sync.WaitGroup
	bgCtx, stopBg := context.WithCancel(ctx)
	defer func() { stopBg(); bg.Wait() }()
	bg.Add(1)
	go func() { defer bg.Done(); a.pollPending(bgCtx) }()
	results, err := a.followResults(ctx)
	if err != nil {
		return err
	}
	defer func() { results.Drain(); <-results.Closed() }()

	var handlers sync.WaitGroup
	var ccs []jetstream.ConsumeContext
	var queues []chan jetstream.Msg
	defer func() {
		for _, cc := range ccs {
			cc.Drain()
			<-cc.Closed()
		}
		for _, q := range queues {
			close(q)
		}
		handlers.Wait()
	}()
	// Two lanes, each its own durable consumer shared by the replicas: the
	// batch lane's depth never delays an interactive submission.
	for _, lane := range []struct {
		name, filter string
		concurrency  int
	}{
		{subjects.AdmitterConsumer, subjects.SubmitAll, a.cfg.Concurrency},
		{subjects.AdmitterBatchConsumer, subjects.BatchSubmitAll, max(1, a.cfg.Concurrency/4)},
	} {
		cons, err := a.sh.JS.CreateOrUpdateConsumer(ctx, subjects.StreamSubmit, jetstream.ConsumerConfig{
			Durable:       lane.name,
			Description:   "admitter replicas share this consumer",
			FilterSubject: lane.filter,
			AckPolicy:     jetstream.AckExplicitPolicy,
			AckWait:       a.cfg.AckWait,
			MaxAckPending: 512,
			DeliverPolicy: jetstream.DeliverAllPolicy,
		})
		if err != nil {
			return fmt.Errorf("admitter consumer %s: %w", lane.name, err)
		}
		// A fixed set of deciders rather than a goroutine per message: a
		// fresh goroutine grows its stack anew for every submission.
		q := make(chan jetstream.Msg)
		queues = append(queues, q)
		for range lane.concurrency {
			handlers.Add(1)
			go func() {
				defer handlers.Done()
				for m := range q {
					a.handle(ctx, m)
				}
			}()
		}
		cc, err := cons.Consume(func(m jetstream.Msg) { q <- m },
			jetstream.PullMaxMessages(64), svc.PullExpiry,
			jetstream.ConsumeErrHandler(func(_ jetstream.ConsumeContext, err error) {
				if !errors.Is(err, jetstream.ErrNoHeartbeat) {
					a.sh.Log.Debug("consume", "err", err)
				}
			}))
		if err != nil {
			return fmt.Errorf("admitter consume %s: %w", lane.name, err)
		}
		ccs = append(ccs, cc)
	}
	a.logTokenizers()
	a.sh.Log.Info("admitter running")
	<-ctx.Done()
	return nil
}

func (a *Admitter) handle(ctx context.Context, m jetstream.Msg) {
	now := a.sh.Now()
	h := m.Headers()
	sub, fail := intake.Decode(m.Subject(), h.Get(schemas.HeaderContentType), h.Get(schemas.HeaderMsgID), m.Data(), a.cfg.MaxMessageBytes)
	if fail != nil {
		a.reject(ctx, m, fail, now)
		return
	}
	if a.answerReused(ctx, m, sub) {
		return
	}
	req := &sub.Request
	in := admission.Input{Now: now, Tenant: sub.Tenant, Request: req, Tenants: a.cfg.Tenants,
		Known: a.cfg.ModelKnown, ContextWindow: a.cfg.ContextWindow, Limits: a.cfg.Limits, Quotas: a.quotas, Estimate: a.cfg.Estimate,
		Shedder: a.shed.shedder(a.cfg.Shedder), Defer: a.cfg.Defer}
	// The lookups below only matter for a request the tenant may send at
	// all; Decide refuses the others on its own.
	if p, e := a.cfg.Tenants.Lookup(sub.Tenant); e == nil {
		if req.Workflow != nil && req.Workflow.ID != "" && subjects.ValidToken(req.Workflow.ID) {
			st, err := a.reg.Get(ctx, sub.Tenant, req.Workflow.ID)
			if err != nil {
				a.retry(m, "workflow get", sub.ID, err)
				return
			}
			in.Workflow = st
		}
		if a.store != nil && p.Cache.Enabled() && req.Validate(now, a.cfg.ModelKnown, a.cfg.Limits) == nil {
			hit, err := a.store.Lookup(ctx, sub.Tenant, req.Model, req, p.Cache, now)
			if err != nil {
				// A cache outage costs GPU time, not correctness.
				a.sh.Log.Warn("cache lookup", "id", sub.ID, "err", err)
			}
			in.CacheHit = hit
		}
	}
	a.mu.Lock()
	in.Load = a.fleet.Load(a.excludeWarming(a.pendingLocked(), now), now)
	in.PricePerGPUHour = a.fleet.MeanPrice(now)
	load, _ := a.cfg.Service.(admission.ColdLoader)
	offers := a.fleet.Offers(now, a.move.scalable(now), load)
	a.mu.Unlock()
	in.Estimate = a.estimator(now)
	in.Offers = &offers

	d := admission.Decide(in)
	switch d.Action {
	case admission.ActionAdmit, admission.ActionDefer:
		if err := a.admit(ctx, sub, d, now); err != nil {
			a.quotas.Refund(d.Profile, d.Charged, now) // charged again when it comes back
			a.retry(m, "publish admitted", sub.ID, err)
			return
		}
		a.holdIfWarming(sub.ID, d, offers)
	case admission.ActionCacheHit:
		if err := a.sh.PublishResult(ctx, d.CacheHit.Result, sub.Format); err != nil {
			a.quotas.Refund(d.Profile, d.Charged, now)
			a.retry(m, "publish cached result", sub.ID, err)
			return
		}
	default:
		if err := a.refuse(ctx, sub, d, now); err != nil {
			a.retry(m, "publish refusal", sub.ID, err)
			return
		}
	}
	ev := d.Event(sub.ID, sub.Tenant, now)
	a.sh.Emit(ev)
	code := ""
	if d.Error != nil {
		code = d.Error.Code
	}
	a.handles.admissions.Get(svc.Labels{d.Action, d.Priority, code}, func() *metrics.Counter {
		return a.sh.Metrics.GetOrCreateCounter(fmt.Sprintf(`switchyard_admission_total{action=%q,class=%q,code=%q}`, d.Action, d.Priority, code))
	}).Inc()
	m.Ack()
}

// EventDuplicateID is the event kind of a submission whose request id
// already has a final result.
const EventDuplicateID = "duplicate_id"

// answerReused handles a submission whose id already has a final result in
// RESULTS: the id was reused after SUBMIT's duplicate window, which alone
// drops a second submission inside it. One id keeps one result, so the
// request is not served again; the stored result is re-sent on the result
// subject (marked Sy-Reused-Id) so a client listening on the reused id is
// answered at once, and the submission is acked. A redelivery of a
// submission this admitter already handled (its ack was lost, and the
// request finished since) re-sends nothing: the live subscriber had its
// result. It reports whether it handled the message.
func (a *Admitter) answerReused(ctx context.Context, m jetstream.Msg, sub intake.Submission) bool {
	if a.sh.Ledger == nil || sub.IDGenerated {
		return false // an id intake generated just now cannot have been used before
	}
	stored, found, err := a.sh.Ledger.Stored(ctx, sub.Tenant, sub.ID)
	if err != nil {
		a.retry(m, "look up an earlier result", sub.ID, err)
		return true
	}
	if !found {
		return false
	}
	redelivered := false
	if md, err := m.Metadata(); err == nil && md.NumDelivered > 1 {
		redelivered = true
	}
	if !redelivered {
		out := nats.NewMsg(subjects.Result(sub.Tenant, sub.ID))
		out.Data = stored.Data
		out.Header.Set(schemas.HeaderContentType, stored.Header.Get(schemas.HeaderContentType))
		out.Header.Set(schemas.HeaderMsgID, sub.ID)
		out.Header.Set(subjects.HeaderReusedID, strconv.FormatUint(stored.Sequence, 10))
		if err := a.sh.NC.PublishMsg(out); err != nil {
			a.retry(m, "re-send the stored result", sub.ID, err)
			return true
		}
	}
	a.sh.Emit(schemas.Event{Kind: EventDuplicateID, RequestID: sub.ID, Tenant: sub.Tenant,
		Reason: "this request id already has a final result (submitted again after the 2-minute duplicate window); the stored result is the answer and the request is not served again",
		Fields: map[string]any{"stored_seq": stored.Sequence, "stored_at": stored.Time, "redelivered": redelivered}})
	a.sh.Metrics.GetOrCreateCounter(`switchyard_admission_total{action="duplicate_id",class="",code="duplicate_id"}`).Inc()
	m.Ack()
	return true
}

// retry leaves a submission unacked so JetStream redelivers it, to this or
// another replica: nothing acknowledged is lost.
func (a *Admitter) retry(m jetstream.Msg, what, id string, err error) {
	a.sh.Log.Warn(what, "id", id, "err", err)
	m.NakWithDelay(time.Second)
}

// estimator predicts a request alone on the fastest kind of replica the
// live fleet serves its model on (admission.RooflineEstimate, the
// simulator's estimate too), falling back to the configured estimator
// while no worker serving anything has been heard from.
func (a *Admitter) estimator(now time.Time) admission.Estimator {
	return func(model string, promptTokens, maxTokens int) admission.Estimate {
		a.mu.Lock()
		kinds := a.fleet.Kinds(now, model, nil)
		a.mu.Unlock()
		if e, ok := admission.RooflineEstimate(a.cfg.Service, kinds, model, promptTokens, maxTokens); ok {
			return e
		}
		return a.cfg.Estimate(model, promptTokens, maxTokens)
	}
}

// admit publishes the admitted envelope — or, for a deferral, a schedule
// that JetStream turns into it at d.DeferUntil — and records a workflow
// step's start. The envelope carries the request id as Nats-Msg-Id, and so
// does the schedule: if a redelivered submission is decided differently
// the second time (admit after defer, or defer after admit), the stream
// drops it as a duplicate and the request still runs once.
func (a *Admitter) admit(ctx context.Context, sub intake.Submission, d admission.Decision, now time.Time) error {
	adm := intake.Admit(sub, d.Priority, d.Model, now, d.Deadline)
	a.promptBlocks(ctx, &adm)
	d.Profile.SLO.FillTargets(&adm)
	if d.Workflow != nil {
		adm.WorkflowStartedAt = d.Workflow.StartedAt
	}
	target := subjects.Admitted(d.Priority, subjects.DeadlineBucket(d.Deadline.Sub(now)), sub.Tenant)
	var out *nats.Msg
	var err error
	if d.Action == admission.ActionDefer {
		out, err = svc.Encode(subjects.Schedule(sub.Tenant, sub.ID), schemas.Msgpack, adm, sub.ID)
		if err == nil {
			SetSchedule(out, d.DeferUntil, target)
		}
	} else {
		out, err = svc.Encode(target, schemas.Msgpack, adm, sub.ID)
	}
	if err != nil {
		return err
	}
	// Known before the publish: an instant backend can answer before
	// PublishMsg returns, and the results loop skips the workflow lookup
	// only for requests it finds here.
	var deferred time.Duration
	if d.Action == admission.ActionDefer {
		deferred = d.DeferUntil.Sub(now)
	}
	a.inflight.put(sub.Tenant, sub.ID, pendingReq{model: sub.Request.Model, req: sub.Request, profile: d.Profile,
		estUSD: d.EstimatedCostUSD, expires: d.Deadline.Add(time.Minute),
		class: d.Priority, predictedWait: d.PredictedWait, deferred: deferred}, now)
	if wf := sub.Request.Workflow; wf != nil && wf.ID != "" {
		// Recorded before the step can run: a router may dispatch it the
		// moment ADMITTED holds it, and a later step judged doomed must
		// find this one running to cancel it (recorded after the publish,
		// a step dispatched at once was missed and ran to its end).
		// StartStep is idempotent per request, so the redelivery that
		// follows a failed publish records nothing twice.
		if _, err := a.reg.StepStart(ctx, sub.Tenant, *wf, sub.ID, now, d.Predicted+d.PredictedWait, d.GPUSeconds, d.Profile.StepRetries()); err != nil {
			a.inflight.take(sub.Tenant, sub.ID)
			return fmt.Errorf("workflow step start: %w", err)
		}
	}
	ack, err := a.sh.JS.PublishMsg(ctx, out)
	if err != nil {
		a.inflight.take(sub.Tenant, sub.ID)
		return err
	}
	if ack.Duplicate {
		// ADMITTED already holds this request (an earlier delivery's ack
		// was lost): it was charged then, and runs once.
		a.quotas.Refund(d.Profile, d.Charged, now)
	}
	a.mu.Lock()
	a.since[d.Priority]++
	a.mu.Unlock()
	if d.Moved {
		a.sh.Emit(schemas.Event{Kind: "moved", RequestID: sub.ID, Tenant: sub.Tenant, Reason: d.MoveReason,
			Fields: map[string]any{"from": sub.Request.Model, "to": d.Model, "priority": d.Priority}})
	}
	return nil
}

// refuse publishes a reject or shed result. A workflow_doomed refusal also
// marks the workflow doomed in the registry, which hands back — once — the
// running steps to cancel.
func (a *Admitter) refuse(ctx context.Context, sub intake.Submission, d admission.Decision, now time.Time) error {
	if w := d.Workflow; w != nil && w.Doomed && sub.Request.Workflow != nil {
		out, err := a.reg.Refuse(ctx, sub.Tenant, *sub.Request.Workflow, sub.ID, d.Error.Message, now, w.GPUSecondsSaved)
		if err != nil {
			return err
		}
		if err := a.cancelSteps(ctx, sub.Tenant, sub.Request.Workflow.ID, out, d.Error.Message); err != nil {
			return err
		}
		if !out.NewlyDoomed && out.GPUSecondsSaved > 0 {
			a.sh.Emit(schemas.Event{Kind: "workflow_step_refused", RequestID: sub.ID, Tenant: sub.Tenant, Reason: d.Error.Message,
				Fields: map[string]any{"workflow": sub.Request.Workflow.ID, "gpu_seconds_saved": out.GPUSecondsSaved}})
		}
	}
	return a.sh.PublishResult(ctx, d.Result(sub.ID, sub.Tenant, now), sub.Format)
}

// cancelSteps carries out a registry outcome that doomed a workflow: a
// cancel per running step (workers abort on it, the router drops it if
// still queued) and one workflow_cancelled event with the GPU-seconds the
// doom saved so far.
func (a *Admitter) cancelSteps(ctx context.Context, tenant, wfID string, out workflow.Outcome, reason string) error {
	if !out.NewlyDoomed {
		return nil
	}
	now := a.sh.Now()
	ids := make([]string, 0, len(out.Cancel))
	for _, st := range out.Cancel {
		c := schemas.Cancel{V: schemas.Version, RequestID: st.RequestID, Tenant: tenant, Reason: "workflow doomed: " + reason, At: now}
		m, err := svc.Encode(subjects.Cancel(tenant), schemas.Msgpack, c, "")
		if err != nil {
			return err
		}
		if _, err := a.sh.JS.PublishMsg(ctx, m); err != nil {
			return fmt.Errorf("publish cancel %s: %w", st.RequestID, err)
		}
		ids = append(ids, st.RequestID)
	}
	a.sh.Emit(schemas.Event{Kind: "workflow_cancelled", Tenant: tenant, Reason: reason,
		Fields: map[string]any{"workflow": wfID, "cancelled_steps": ids, "gpu_seconds_saved": out.GPUSecondsSaved}})
	return nil
}

// SetSchedule turns m into a one-shot JetStream message schedule that the
// server republishes on target at `at` (nats-server 2.12+: header
// Nats-Schedule "@at <RFC 3339>", which has second resolution, and
// Nats-Schedule-Target in the same stream).
func SetSchedule(m *nats.Msg, at time.Time, target string) {
	m.Header.Set(subjects.HeaderSchedule, "@at "+at.UTC().Format(time.RFC3339))
	m.Header.Set(subjects.HeaderScheduleTarget, target)
}

// reject answers a submission that could not be decoded with its specific
// error and, for unusable bytes, keeps the original in the DLQ. The
// message is acked only once the answer is stored.
func (a *Admitter) reject(ctx context.Context, m jetstream.Msg, f *intake.Failure, now time.Time) {
	if f.DeadLetter {
		raw := &nats.Msg{Subject: m.Subject(), Header: m.Headers(), Data: m.Data()}
		if err := a.sh.DeadLetter(ctx, raw, f.Err.Error()); err != nil {
			a.retry(m, "dead-letter", f.ID, err)
			return
		}
	}
	a.sh.Emit(schemas.Event{Kind: "rejected", RequestID: f.ID, Tenant: f.Tenant, Reason: f.Err.Code,
		Fields: map[string]any{"message": f.Err.Message, "field": f.Err.Field}})
	a.sh.Metrics.GetOrCreateCounter(fmt.Sprintf(`switchyard_rejected_total{code=%q}`, f.Err.Code)).Inc()
	if !f.NoReply {
		res := svc.ErrorResult(f.ID, f.Tenant, "", f.Err, now)
		if err := a.sh.PublishResult(ctx, res, f.Format); err != nil {
			a.retry(m, "publish error result", f.ID, err)
			return
		}
	}
	m.Ack()
}
