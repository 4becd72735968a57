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
	// Pools are the live fleet's pools (FleetView.Pools), candidates for a
	// cheaper-pool hint. With Service set, each is priced for this request
	// on its own replica kinds by the roofline model the estimate uses;
	// otherwise by its Speed.
	Pools   []Pool
	Service ServiceModel
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
	MoveReason string
	// PoolHint is a preferred (cheaper) GPU pool, empty for none.
	PoolHint     string
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
//     priority class; then the context window of the model that will run
//  3. quota: requests/min, tokens/min, spend budget
//  4. workflow: refuse steps of a doomed workflow
//  5. cache: serve a hit
//  6. move: smaller model, cheaper pool
//  7. delay: shed when the predicted completion misses the deadline, defer
//     batch work when the fleet is busy and the deadline allows
//
// then admits. The model choice (6) is computed before the quota check so
// that tokens and cost are estimated on the model that will run, but a
// quota refusal still wins over everything after it.
func Decide(in Input) Decision {
	d := Decision{}
	r := in.Request
	reject := func(e *schemas.Error) Decision {
		d.Error = e
		d.Action = ActionReject
		if e != nil && e.Code == schemas.CodeShed {
			d.Action = ActionShed
		}
		if e != nil {
			d.Reasons = append(d.Reasons, e.Code+": "+e.Message)
		}
		return d
	}
	if r == nil {
		return reject(schemas.Errf(schemas.CodeMalformed, "", "no request"))
	}
	if e := r.Validate(in.Now, in.Known, in.Limits); e != nil {
		return reject(e)
	}

	// 2. Tenant.
	if in.Tenants == nil {
		return reject(schemas.Errf(schemas.CodeInternal, "", "no tenant configuration loaded"))
	}
	p, e := in.Tenants.Lookup(in.Tenant)
	if e != nil {
		return reject(e)
	}
	d.Profile = p
	if p.Default {
		d.Reasons = append(d.Reasons, fmt.Sprintf("tenant %q not configured: default profile", in.Tenant))
	}
	if r.Model != "auto" && !p.ModelAllowed(r.Model) {
		return reject(schemas.Errf(schemas.CodeModelNotAllowed, "model", "tenant %q may not use model %q", p.Name, r.Model))
	}
	prio, e := p.ResolvePriority(r.Priority)
	if e != nil {
		return reject(e)
	}
	d.Priority = prio
	d.PromptTokens = tokens.Count(r.PromptText())
	d.Deadline = r.EffectiveDeadline(in.Now, p.DefaultDeadline())

	ladder := in.Tenants.Ladder()
	cx := EstimateComplexity(r, d.PromptTokens)
	// A move never lands on a model whose window cannot hold the request:
	// "auto" picks the smallest adequate model that fits. When none fits,
	// the pick without the window filter is refused below with
	// context_too_long, which says why, rather than "no model allowed".
	mv := ChooseModel(p, ladder, fitsWindow(in.Known, in.ContextWindow, r.Model, d.PromptTokens+r.MaxTokens), r, cx)
	if mv.Error != nil && in.ContextWindow != nil {
		if unfiltered := ChooseModel(p, ladder, in.Known, r, cx); unfiltered.Error == nil {
			mv = unfiltered
		}
	}
	if mv.Error != nil {
		return reject(mv.Error)
	}
	d.Model, d.Moved = mv.Model, mv.Moved
	if e := checkContext(in.ContextWindow, d.Model, d.PromptTokens, r); e != nil {
		return reject(e)
	}
	est := in.Estimate
	if est == nil {
		est = LadderEstimator(ladder, nil)
	}
	es := est(d.Model, d.PromptTokens, r.MaxTokens)
	d.Predicted, d.GPUSeconds = es.Latency, es.GPUSeconds
	d.EstimatedCostUSD = es.GPUSeconds * in.PricePerGPUHour / 3600
	wait, _ := in.Shedder.Wait(prio, in.Load)
	d.PredictedWait = wait

	// 3. Quota.
	need := d.PromptTokens + r.MaxTokens
	if in.Quotas != nil {
		if e := in.Quotas.Check(p, need, d.EstimatedCostUSD, in.Now); e != nil {
			return reject(e)
		}
	}

	// 4. Workflow.
	if r.Workflow != nil {
		wd := &WorkflowDecision{MaxRetries: p.StepRetries()}
		d.Workflow = wd
		wd.StartedAt = in.Now
		if st := in.Workflow; st != nil {
			if !st.StartedAt.IsZero() {
				wd.StartedAt = st.StartedAt
			}
			v := workflow.Assess(st, in.Now, wait+es.Latency)
			if v.Doomed {
				wd.Doomed, wd.Cancel, wd.GPUSecondsSaved = true, v.Cancel, es.GPUSeconds
				return reject(schemas.Errf(schemas.CodeWorkflowDoomed, "workflow.id", "workflow %q is doomed: %s", r.Workflow.ID, v.Reason))
			}
			if sd, ok := workflow.StepDeadline(st, in.Now, wait+es.Latency, wait+es.Latency); ok && sd.Before(d.Deadline) {
				wd.StepDeadline = sd
				d.Deadline = sd
				d.Reasons = append(d.Reasons, fmt.Sprintf("workflow step %d: deadline %s from the workflow's remaining budget", r.Workflow.Step, sd.Sub(in.Now).Round(time.Millisecond)))
			}
		} else if r.Workflow.DeadlineMs > 0 && r.Workflow.Of > 0 {
			// First step seen: the workflow's whole budget splits across
			// all its steps.
			fresh := &workflow.State{Of: r.Workflow.Of, StartedAt: in.Now,
				Deadline: in.Now.Add(time.Duration(r.Workflow.DeadlineMs) * time.Millisecond)}
			if v := workflow.Assess(fresh, in.Now, wait+es.Latency); v.Doomed {
				wd.Doomed, wd.GPUSecondsSaved = true, es.GPUSeconds
				return reject(schemas.Errf(schemas.CodeWorkflowDoomed, "workflow.deadline_ms", "workflow %q cannot finish: %s", r.Workflow.ID, v.Reason))
			}
			if sd, ok := workflow.StepDeadline(fresh, in.Now, wait+es.Latency, wait+es.Latency); ok && sd.Before(d.Deadline) {
				wd.StepDeadline, d.Deadline = sd, sd
				d.Reasons = append(d.Reasons, fmt.Sprintf("workflow step %d: deadline %s from the workflow's budget", r.Workflow.Step, sd.Sub(in.Now).Round(time.Millisecond)))
			}
		}
	}

	// 5. Cache. The hit was looked up by the shell with this tenant's
	// policy; it is checked again here so a shell bug cannot replay
	// another tenant's answer.
	if h := in.CacheHit; h != nil && p.Cache.Enabled() && !r.NoCache && h.Result.Tenant == in.Tenant {
		d.Action = ActionCacheHit
		d.CacheHit = h
		d.CacheHit.Result.Priority = prio
		d.Reasons = append(d.Reasons, h.Reason)
		if in.Quotas != nil {
			// A replay uses a request slot but no GPU tokens or spend.
			in.Quotas.Charge(p, 0, 0, in.Now)
			d.Charged = Charge{Requests: 1}
		}
		return d
	}

	// 6. Move.
	if mv.Moved {
		d.MoveReason = mv.Reason
		d.Reasons = append(d.Reasons, mv.Reason)
	}
	if p.AllowPoolMove && len(in.Pools) > 0 {
		pools := PoolSpeeds(in.Pools, in.Service, es, d.Model, d.PromptTokens, r.MaxTokens)
		if pc, ok := ChoosePool(pools, es, wait, d.Deadline.Sub(in.Now)); ok {
			d.PoolHint = pc.Pool
			d.Reasons = append(d.Reasons, pc.Reason)
		}
	}

	// 7. Delay.
	sv := in.Shedder.Check(prio, in.Now, d.Deadline, es.Latency, in.Load)
	if sv.Shed {
		return reject(sv.Error)
	}
	if until, ok, why := in.Defer.Defer(prio, in.Now, d.Deadline, es.Latency, wait, in.Load); ok {
		d.Action = ActionDefer
		d.DeferUntil = until
		d.Reasons = append(d.Reasons, why)
	} else {
		d.Action = ActionAdmit
		d.Reasons = append(d.Reasons, sv.Reason)
	}
	if in.Quotas != nil {
		in.Quotas.Charge(p, need, d.EstimatedCostUSD, in.Now)
		d.Charged = Charge{Requests: 1, Tokens: need, CostUSD: d.EstimatedCostUSD}
	}
	return d
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
	if d.PoolHint != "" {
		f["pool_hint"] = d.PoolHint
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
