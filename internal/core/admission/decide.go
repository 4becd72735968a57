package admission

import (
	"fmt"
	"strings"
	"time"

	"github.com/switchyard-ai/switchyard/internal/core/cache"
	"github.com/switchyard-ai/switchyard/internal/core/tokens"
	"github.com/switchyard-ai/switchyard/internal/core/workflow"
	"github.com/switchyard-ai/switchyard/schemas"
)

// Actions.
const (
	ActionAdmit    = "admit"     // publish on sy.admitted.<class>.<bucket>.<tenant>
	ActionReject   = "reject"    // publish the error result (status rejected or failed)
	ActionShed     = "shed"      // publish the error result (status shed)
	ActionDefer    = "defer"     // publish admitted with Nats-Schedule: @DeferUntil
	ActionCacheHit = "cache_hit" // publish CacheHit.Result; no GPU is touched
)

// Input is everything one admission decision depends on. The shell reads
// the tenant from the subject, decodes the request, looks the cache and
// the workflow registry up, and reads the queue depth; Decide does the rest.
type Input struct {
	Now     time.Time
	Tenant  string
	Request *schemas.Request
	Tenants *Tenants
	// Known reports catalog models; nil accepts every name.
	Known schemas.ModelLookup
	// ContextWindow is a model's context window in tokens (the catalog's
	// max_context, or what a worker serving it reports), 0 when unknown;
	// nil skips the check.
	ContextWindow func(model string) int
	Limits        schemas.Limits
	// Quotas is the mutable quota state; nil disables quotas and budgets.
	// Decide charges it only for admitted, deferred and cache-hit requests.
	Quotas *Quotas
	// Workflow is the registry's state of the request's workflow, nil when
	// the request is not a workflow step or its workflow is new.
	Workflow *workflow.State
	// CacheHit is the shell's cache.Store.Lookup result (nil on a miss),
	// looked up with the tenant's Profile.Cache and the requested model.
	CacheHit *cache.Hit
	Load     Load
	// Offers is which models the live fleet serves and how soon
	// (FleetView.Offers, with the controller's scalable pools at their
	// own cold starts); nil, or an uninformed view, constrains nothing.
	// With it, a request no worker can ever take is refused unplaceable at
	// once, and the move step picks only models the fleet serves within
	// the deadline.
	Offers *FleetOffers
	// Estimate predicts latency and GPU-seconds; nil means a
	// LadderEstimator over the configured ladder.
	Estimate Estimator
	// PricePerGPUHour prices the budget estimate; 0 means requests are
	// estimated as free (budgets then only see reconciled actual spend).
	PricePerGPUHour float64
	Shedder         Shedder
	Defer           DeferPolicy
}

// WorkflowDecision is the workflow part of a decision.
type WorkflowDecision struct {
	Doomed bool
	// Cancel lists running steps the verdict would cancel; the shell's
	// workflowstore.Registry.Refuse (workflow.Refuse) returns the authoritative list (once).
	Cancel []workflow.Step
	// GPUSecondsSaved is the predicted GPU work of this refused step.
	GPUSecondsSaved float64
	// StepDeadline is this step's share of the workflow's remaining
	// budget (zero when the workflow has no deadline).
	StepDeadline time.Time
	MaxRetries   int
	// StartedAt is when the workflow began (its first step's admission):
	// the router splits the workflow's remaining budget from it.
	StartedAt time.Time
}

// Decision is the outcome of Decide.
type Decision struct {
	Action string
	Error  *schemas.Error
	// Profile is the tenant's profile (zero when the tenant was refused).
	Profile  Profile
	Priority string
	// Model is the effective model after Move; Moved says it changed.
	Model string
	Moved bool
	// MoveReason explains a Moved model (empty otherwise).
	MoveReason   string
	Deadline     time.Time
	PromptTokens int
	// Predicted is the request's predicted service latency, PredictedWait
	// the queueing ahead of it, GPUSeconds its predicted GPU work and
	// EstimatedCostUSD the budget charge (reconcile with Quotas.Reconcile).
	Predicted        time.Duration
	PredictedWait    time.Duration
	GPUSeconds       float64
	EstimatedCostUSD float64
	DeferUntil       time.Time
	CacheHit         *cache.Hit
	Workflow         *WorkflowDecision
	// Reasons explain the decision, one line per step that mattered; the
	// shell publishes them as the event's reason.
	Reasons []string
	// Charged is what Decide took from the tenant's quota and budget. It
	// is taken inside Decide, so concurrent decisions cannot both pass a
	// quota one of them exhausts; the shell gives it back (Quotas.Refund)
	// when what it decided never took effect — the publish failed and the
	// submission will be redelivered, or the stream answered it as a
	// duplicate of one already charged.
	Charged Charge
}

// Charge is one decision's take from a tenant's quota and budget.
type Charge struct {
	Requests int
	Tokens   int
	CostUSD  float64
}

// Decide runs the admission checks in this order, stopping at the first
// refusal:
//
//  1. validate the request (schemas.Request.Validate)
//  2. tenant: unknown/invalid tenant, model allowlist, "auto" permission,
//     priority class; then the live fleet (Input.Offers): a model no
//     worker can ever serve is refused unplaceable; then the context
//     window of the model that will run
//  3. quota: requests/min, tokens/min, spend budget
//  4. workflow: refuse steps of a doomed workflow
//  5. cache: serve a hit
//  6. move: a smaller model, among those the fleet serves in time
//  7. delay: shed when the predicted completion misses the deadline, defer
//     batch work when the fleet is busy and the deadline allows
//
// then admits. The model choice (6) is computed before the quota check so
// that tokens and cost are estimated on the model that will run, but a
// quota refusal still wins over everything after it.
//
// The cheaper GPU pool is not admission's to pick: the router's placer
// prices every worker for the request (gpu_usd at the worker's own price
// against the class's value of time and the deadline's miss cost), with
// the live queues admission cannot see.
func Decide(in Input) Decision {
	s := &decider{in: in, r: in.Request}
	if e := s.tenant(); e != nil {
		return s.reject(e)
	}
	known, e := s.fleet()
	if e != nil {
		return s.reject(e)
	}
	if e := s.model(known); e != nil {
		return s.reject(e)
	}
	if e := s.quota(); e != nil {
		return s.reject(e)
	}
	if e := s.workflow(); e != nil {
		return s.reject(e)
	}
	if s.cacheHit() {
		return s.d
	}
	if e := s.delay(); e != nil {
		return s.reject(e)
	}
	return s.d
}

// decider is one Decide call's state: each step reads what the earlier
// ones set and returns the refusal, if any, that ends the decision.
type decider struct {
	in   Input
	r    *schemas.Request
	d    Decision
	p    Profile
	mv   ModelMove
	es   Estimate
	est  Estimator
	wait time.Duration
	need int
}

func (s *decider) reject(e *schemas.Error) Decision {
	s.d.Error = e
	s.d.Action = ActionReject
	if e != nil && e.Code == schemas.CodeShed {
		s.d.Action = ActionShed
	}
	if e != nil {
		s.d.Reasons = append(s.d.Reasons, e.Code+": "+e.Message)
	}
	return s.d
}

// tenant is steps 1 and 2 up to the fleet: the request is valid, the
// tenant known, the model and class its to ask for.
func (s *decider) tenant() *schemas.Error {
	in, r := s.in, s.r
	if r == nil {
		return schemas.Errf(schemas.CodeMalformed, "", "no request")
	}
	if e := r.Validate(in.Now, in.Known, in.Limits); e != nil {
		return e
	}
	if in.Tenants == nil {
		return schemas.Errf(schemas.CodeInternal, "", "no tenant configuration loaded")
	}
	p, e := in.Tenants.Lookup(in.Tenant)
	if e != nil {
		return e
	}
	s.p, s.d.Profile = p, p
	if p.Default {
		s.d.Reasons = append(s.d.Reasons, fmt.Sprintf("tenant %q not configured: default profile", in.Tenant))
	}
	if r.Model != "auto" && !p.ModelAllowed(r.Model) {
		return schemas.Errf(schemas.CodeModelNotAllowed, "model", "tenant %q may not use model %q", p.Name, r.Model)
	}
	prio, e := p.ResolvePriority(r.Priority)
	if e != nil {
		return e
	}
	s.d.Priority = prio
	s.d.PromptTokens = tokens.Count(r.PromptText())
	s.d.Deadline = r.EffectiveDeadline(in.Now, p.DefaultDeadline())
	s.est = in.Estimate
	if s.est == nil {
		s.est = LadderEstimator(in.Tenants.Ladder(), nil)
	}
	return nil
}

// fleet is step 2's look at the live fleet: a request no worker can ever
// take is refused unplaceable, naming what the fleet serves, rather than
// held until its deadline; otherwise it returns the model lookup the move
// step picks from — the models the fleet serves within the deadline
// (FleetOffers.MoveCandidates), or, when "auto" finds none that fast,
// every model it serves, for the shedder to judge the deadline rather
// than refuse work a load may yet serve. An "auto" request of a tenant
// that may not send one is left to the move step's refusal.
func (s *decider) fleet() (schemas.ModelLookup, *schemas.Error) {
	in, r, o := s.in, s.r, s.in.Offers
	if o == nil || !o.Informed() || (r.Model == "auto" && !s.p.AllowAuto) {
		return in.Known, nil
	}
	ladder := in.Tenants.Ladder()
	if ue := o.Unplaceable(r.Model, UsableLadder(s.p, ladder, in.Known)); ue != nil {
		if o.Partial {
			// A view still hearing the fleet for the first time cannot
			// tell an absent worker from one it has not heard yet: it
			// constrains nothing, as an uninformed one.
			return in.Known, nil
		}
		s.d.Model = r.Model
		return nil, ue
	}
	budget := s.d.Deadline.Sub(in.Now)
	cands := o.MoveCandidates(in.Known, r.Model, s.est, s.d.PromptTokens, r.MaxTokens, budget)
	if r.Model == "auto" && len(UsableLadder(s.p, ladder, cands)) == 0 {
		cands = o.MoveCandidates(in.Known, r.Model, s.est, s.d.PromptTokens, r.MaxTokens, 0)
	}
	return cands, nil
}

// model picks the model that will run (among known), checks its context
// window, and predicts the request on it.
func (s *decider) model(known schemas.ModelLookup) *schemas.Error {
	in, r := s.in, s.r
	ladder := in.Tenants.Ladder()
	cx := EstimateComplexity(r, s.d.PromptTokens)
	// A move never lands on a model whose window cannot hold the request:
	// "auto" picks the smallest adequate model that fits. When none fits,
	// the pick without the window filter is refused below with
	// context_too_long, which says why, rather than "no model allowed".
	mv := ChooseModel(s.p, ladder, fitsWindow(known, in.ContextWindow, r.Model, s.d.PromptTokens+r.MaxTokens), r, cx)
	if mv.Error != nil && in.ContextWindow != nil {
		if unfiltered := ChooseModel(s.p, ladder, known, r, cx); unfiltered.Error == nil {
			mv = unfiltered
		}
	}
	if mv.Error != nil {
		return mv.Error
	}
	s.mv = mv
	s.d.Model, s.d.Moved = mv.Model, mv.Moved
	if e := checkContext(in.ContextWindow, s.d.Model, s.d.PromptTokens, r); e != nil {
		return e
	}
	s.es = s.est(s.d.Model, s.d.PromptTokens, r.MaxTokens)
	s.d.Predicted, s.d.GPUSeconds = s.es.Latency, s.es.GPUSeconds
	s.d.EstimatedCostUSD = s.es.GPUSeconds * in.PricePerGPUHour / 3600
	s.wait, _ = in.Shedder.Wait(s.d.Priority, in.Load)
	s.d.PredictedWait = s.wait
	s.need = s.d.PromptTokens + r.MaxTokens
	return nil
}

// quota is step 3.
func (s *decider) quota() *schemas.Error {
	if s.in.Quotas == nil {
		return nil
	}
	return s.in.Quotas.Check(s.p, s.need, s.d.EstimatedCostUSD, s.in.Now)
}

// workflow is step 4: a step of a workflow that can no longer finish is
// refused; one that can gets its share of the workflow's remaining budget
// as its deadline.
func (s *decider) workflow() *schemas.Error {
	in, r := s.in, s.r
	if r.Workflow == nil {
		return nil
	}
	wd := &WorkflowDecision{MaxRetries: s.p.StepRetries(), StartedAt: in.Now}
	s.d.Workflow = wd
	ahead := s.wait + s.es.Latency
	st, field, budget := in.Workflow, "workflow.id", "remaining budget"
	if st != nil {
		if !st.StartedAt.IsZero() {
			wd.StartedAt = st.StartedAt
		}
	} else if r.Workflow.DeadlineMs > 0 && r.Workflow.Of > 0 {
		// First step seen: the workflow's whole budget splits across
		// all its steps.
		st = &workflow.State{Of: r.Workflow.Of, StartedAt: in.Now,
			Deadline: in.Now.Add(time.Duration(r.Workflow.DeadlineMs) * time.Millisecond)}
		field, budget = "workflow.deadline_ms", "budget"
	} else {
		return nil
	}
	if v := workflow.Assess(st, in.Now, ahead); v.Doomed {
		wd.Doomed, wd.GPUSecondsSaved = true, s.es.GPUSeconds
		if in.Workflow != nil {
			wd.Cancel = v.Cancel
			return schemas.Errf(schemas.CodeWorkflowDoomed, field, "workflow %q is doomed: %s", r.Workflow.ID, v.Reason)
		}
		return schemas.Errf(schemas.CodeWorkflowDoomed, field, "workflow %q cannot finish: %s", r.Workflow.ID, v.Reason)
	}
	if sd, ok := workflow.StepDeadline(st, in.Now, ahead, ahead); ok && sd.Before(s.d.Deadline) {
		wd.StepDeadline, s.d.Deadline = sd, sd
		s.d.Reasons = append(s.d.Reasons, fmt.Sprintf("workflow step %d: deadline %s from the workflow's %s", r.Workflow.Step, sd.Sub(in.Now).Round(time.Millisecond), budget))
	}
	return nil
}

// cacheHit is step 5: it reports whether the request is answered from the
// cache. The hit was looked up by the shell with this tenant's policy; it
// is checked again here so a shell bug cannot replay another tenant's
// answer.
func (s *decider) cacheHit() bool {
	in, r := s.in, s.r
	h := in.CacheHit
	if h == nil || !s.p.Cache.Enabled() || r.NoCache || h.Result.Tenant != in.Tenant {
		return false
	}
	s.d.Action = ActionCacheHit
	s.d.CacheHit = h
	s.d.CacheHit.Result.Priority = s.d.Priority
	s.d.Reasons = append(s.d.Reasons, h.Reason)
	if in.Quotas != nil {
		// A replay uses a request slot but no GPU tokens or spend.
		in.Quotas.Charge(s.p, 0, 0, in.Now)
		s.d.Charged = Charge{Requests: 1}
	}
	return true
}

// delay is steps 6 and 7: the move's reason, then shed, defer or admit,
// and the quota charge of what goes ahead.
func (s *decider) delay() *schemas.Error {
	in := s.in
	if s.mv.Moved {
		s.d.MoveReason = s.mv.Reason
		s.d.Reasons = append(s.d.Reasons, s.mv.Reason)
	}
	sv := in.Shedder.Check(s.d.Priority, in.Now, s.d.Deadline, s.es.Latency, in.Load)
	if sv.Shed {
		return sv.Error
	}
	if until, ok, why := in.Defer.Defer(s.d.Priority, in.Now, s.d.Deadline, s.es.Latency, s.wait, in.Load); ok {
		s.d.Action = ActionDefer
		s.d.DeferUntil = until
		s.d.Reasons = append(s.d.Reasons, why)
	} else {
		s.d.Action = ActionAdmit
		s.d.Reasons = append(s.d.Reasons, sv.Reason)
	}
	if in.Quotas != nil {
		in.Quotas.Charge(s.p, s.need, s.d.EstimatedCostUSD, in.Now)
		s.d.Charged = Charge{Requests: 1, Tokens: s.need, CostUSD: s.d.EstimatedCostUSD}
	}
	return nil
}

// fitsWindow narrows known to the models whose context window holds need
// tokens (a model with no known window passes), for the move step's
// candidates; the requested model itself is left to checkContext.
func fitsWindow(known schemas.ModelLookup, window func(string) int, requested string, need int) schemas.ModelLookup {
	if window == nil {
		return known
	}
	return func(m string) bool {
		if m != requested {
			if w := window(m); w > 0 && need > w {
				return false
			}
		}
		return known == nil || known(m)
	}
}

// checkContext refuses a request whose prompt plus max_tokens does not fit
// the model's context window, as vLLM does (it answers 400
// context_length_exceeded): the engine could not hold the sequence, and
// would truncate or fail it after the request had queued and prefilled.
func checkContext(window func(string) int, model string, promptTokens int, r *schemas.Request) *schemas.Error {
	if window == nil {
		return nil
	}
	w := window(model)
	if w <= 0 || promptTokens+r.MaxTokens <= w {
		return nil
	}
	field := "messages"
	if r.Prompt != "" {
		field = "prompt"
	}
	if promptTokens < w {
		field = "max_tokens"
	}
	return schemas.Errf(schemas.CodeContextTooLong, field,
		"model %q has a context window of %d tokens, but the request needs %d (%d in the prompt, %d in max_tokens); shorten the prompt or lower max_tokens",
		model, w, promptTokens+r.MaxTokens, promptTokens, r.MaxTokens)
}

// Result builds the final Result of a refused (reject/shed) decision.
func (d Decision) Result(requestID, tenant string, now time.Time) schemas.Result {
	res := schemas.Result{V: schemas.Version, ID: requestID, Tenant: tenant, Error: d.Error,
		Status: schemas.StatusRejected, Priority: d.Priority, Model: d.Model, FinishedAt: now}
	if d.Error != nil {
		res.Status = schemas.StatusForCode(d.Error.Code)
	}
	if !d.Deadline.IsZero() {
		dl := d.Deadline
		res.Deadline = &dl
	}
	return res
}

// Event is the decision as a schemas.Event for sy.event.admitter.<action>.
func (d Decision) Event(requestID, tenant string, now time.Time) schemas.Event {
	f := map[string]any{"priority": d.Priority, "model": d.Model, "prompt_tokens": d.PromptTokens,
		"predicted_s": d.Predicted.Seconds(), "predicted_wait_s": d.PredictedWait.Seconds(), "gpu_s": d.GPUSeconds}
	if d.Moved {
		f["moved"] = true
	}
	if d.Error != nil {
		f["code"] = d.Error.Code
	}
	if !d.DeferUntil.IsZero() {
		f["defer_until"] = d.DeferUntil
	}
	if d.CacheHit != nil {
		f["from_cache"] = d.CacheHit.Kind
		f["similarity"] = d.CacheHit.Similarity
	}
	if w := d.Workflow; w != nil && w.Doomed {
		f["workflow_doomed"] = true
		f["gpu_seconds_saved"] = w.GPUSecondsSaved
	}
	return schemas.Event{V: schemas.Version, At: now, Service: "admitter", Kind: d.Action,
		RequestID: requestID, Tenant: tenant, Reason: strings.Join(d.Reasons, "; "), Fields: f}
}
