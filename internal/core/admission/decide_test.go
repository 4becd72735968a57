package admission

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/switchyard-ai/switchyard/internal/adapter/bus"
	"github.com/switchyard-ai/switchyard/internal/adapter/cachestore"
	"github.com/switchyard-ai/switchyard/internal/adapter/workflowstore"
	"github.com/switchyard-ai/switchyard/schemas"
)

func TestDecideOrderAndCodes(t *testing.T) {
	ts := loadExample(t)
	known := func(m string) bool { return strings.HasPrefix(m, "llama-") }
	idle := Load{RequestsPerSec: 50}
	overload := Load{RequestsPerSec: 5, Pending: map[string]int{"interactive": 10, "standard": 200, "batch": 3000}}
	base := func() schemas.Request {
		return schemas.Request{ID: "r1", Model: "llama-3.1-8b", Prompt: "What is the boiling point of water?", MaxTokens: 64}
	}
	with := func(f func(r *schemas.Request)) schemas.Request { r := base(); f(&r); return r }
	cases := []struct {
		name   string
		tenant string
		req    schemas.Request
		load   Load
		quotas func() *Quotas
		action string
		code   string
	}{
		{"valid request admitted", "acme", base(), idle, nil, ActionAdmit, ""},
		{"validation first: bad max_tokens even for an unknown tenant", "nobody.x", with(func(r *schemas.Request) { r.MaxTokens = 0 }), idle, nil, ActionReject, schemas.CodeInvalidMaxTokens},
		{"unknown model", "acme", with(func(r *schemas.Request) { r.Model = "gpt-9" }), idle, nil, ActionReject, schemas.CodeUnknownModel},
		{"model outside the tenant's allowlist", "nightly", with(func(r *schemas.Request) { r.Model = "llama-3.1-70b" }), idle, nil, ActionReject, schemas.CodeModelNotAllowed},
		{"priority above the tenant's class", "globex", with(func(r *schemas.Request) { r.Priority = "critical" }), idle, nil, ActionReject, schemas.CodePriorityNotAllowed},
		{"quota before shedding", "acme", base(), overload, func() *Quotas {
			q := NewQuotas()
			p, _ := loadExample(t).Lookup("acme")
			for i := 0; i < 600; i++ {
				q.Charge(p, 1, 0, t0)
			}
			return q
		}, ActionReject, schemas.CodeQuotaExceeded},
		{"overload sheds standard", "agents", with(func(r *schemas.Request) { r.DeadlineMs = 10000 }), overload, nil, ActionShed, schemas.CodeShed},
		{"overload keeps critical", "ops", base(), overload, nil, ActionAdmit, ""},
		{"busy fleet defers long-deadline batch", "nightly", with(func(r *schemas.Request) { r.DeadlineMs = 3600000 }),
			Load{RequestsPerSec: 50, Utilization: 0.95}, nil, ActionDefer, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var q *Quotas
			if c.quotas != nil {
				q = c.quotas()
			}
			r := c.req
			d := Decide(Input{Now: t0, Tenant: c.tenant, Request: &r, Tenants: ts, Known: known, Quotas: q, Load: c.load})
			if d.Action != c.action {
				t.Fatalf("action %s (%v; %v), want %s", d.Action, d.Error, d.Reasons, c.action)
			}
			if c.code != "" && (d.Error == nil || d.Error.Code != c.code) {
				t.Fatalf("error %v, want %s", d.Error, c.code)
			}
			if len(d.Reasons) == 0 {
				t.Fatal("every decision needs a reason")
			}
			if d.Error != nil {
				res := d.Result("r1", c.tenant, t0)
				if res.Status != schemas.StatusForCode(c.code) || res.Error.Code != c.code {
					t.Fatalf("result %+v", res)
				}
			}
			if d.Action == ActionDefer && !d.DeferUntil.After(t0) {
				t.Fatalf("defer until %v", d.DeferUntil)
			}
		})
	}
}

func TestDecideChargesOnlyWhatRuns(t *testing.T) {
	ts, _ := NewTenants(Config{Default: Profile{Priority: schemas.PriorityBatch, Quota: Quota{RequestsPerMin: 60, BurstSeconds: 1}}})
	q := NewQuotas()
	r := schemas.Request{Model: "llama-3.1-8b", Prompt: "x", MaxTokens: 10000, DeadlineMs: 1000}
	overload := Load{RequestsPerSec: 1, Pending: map[string]int{"batch": 100}}
	if d := Decide(Input{Now: t0, Tenant: "t", Request: &r, Tenants: ts, Quotas: q, Load: overload}); d.Action != ActionShed {
		t.Fatalf("want shed, got %s", d.Action)
	}
	r2 := schemas.Request{Model: "llama-3.1-8b", Prompt: "x", MaxTokens: 10}
	if d := Decide(Input{Now: t0, Tenant: "t", Request: &r2, Tenants: ts, Quotas: q, Load: Load{RequestsPerSec: 10}}); d.Action != ActionAdmit {
		t.Fatalf("the shed request used up the quota: %s %v", d.Action, d.Error)
	}
}

func TestDecideAutoMovesToSmallTier(t *testing.T) {
	ts := loadExample(t)
	r := schemas.Request{Model: "auto", Prompt: "Classify the sentiment: 'love it'", MaxTokens: 4}
	d := Decide(Input{Now: t0, Tenant: "acme", Request: &r, Tenants: ts, Load: Load{RequestsPerSec: 10}})
	if d.Action != ActionAdmit || d.Model != "llama-3.2-1b" || !d.Moved {
		t.Fatalf("decision %+v", d)
	}
	ev := d.Event("r", "acme", t0)
	if !strings.Contains(ev.Reason, "auto -> llama-3.2-1b") {
		t.Fatalf("event %+v", ev)
	}
}

func TestDecideWorkflowBudgetSplit(t *testing.T) {
	ts := loadExample(t)
	r := schemas.Request{ID: "s1", Model: "llama-3.2-1b", Prompt: "plan the trip", MaxTokens: 50,
		Workflow: &schemas.Workflow{ID: "wf", Step: 1, Of: 4, DeadlineMs: 40000}}
	d := Decide(Input{Now: t0, Tenant: "acme", Request: &r, Tenants: ts, Load: Load{RequestsPerSec: 10}})
	if d.Action != ActionAdmit || d.Workflow == nil {
		t.Fatalf("%+v", d)
	}
	// Four equal steps share the 40 s workflow budget: 10 s for this one.
	if got := d.Deadline.Sub(t0); got < 9900*time.Millisecond || got > 10100*time.Millisecond {
		t.Fatalf("step deadline %v, want 10s", got)
	}
	// A workflow that cannot fit its steps at all is doomed on arrival.
	r.Workflow = &schemas.Workflow{ID: "wf2", Step: 1, Of: 50, DeadlineMs: 100}
	r.MaxTokens = 2000
	d = Decide(Input{Now: t0, Tenant: "acme", Request: &r, Tenants: ts, Load: Load{RequestsPerSec: 10}})
	if d.Error == nil || d.Error.Code != schemas.CodeWorkflowDoomed {
		t.Fatalf("%+v", d)
	}
}

func startJS(t *testing.T) *bus.Server {
	t.Helper()
	srv, err := bus.StartServer(bus.ServerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Shutdown)
	return srv
}

// Against a real embedded NATS server: a stored answer is served from the
// cache (no worker involved), and the same request from another tenant is
// admitted to run instead.
func TestDecideCacheHitEndToEnd(t *testing.T) {
	srv := startJS(t)
	nc, err := srv.Connect("admission-test")
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := bus.JetStream(nc)
	ctx := context.Background()
	store, err := cachestore.Open(ctx, js, cachestore.Config{TTL: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	ts := loadExample(t)
	acme, _ := ts.Lookup("acme")
	mk := func(id string) schemas.Request {
		return schemas.Request{ID: id, Model: "llama-3.1-8b", Prompt: "Capital of France?", MaxTokens: 16, Temperature: f64(0)}
	}
	first := mk("a1")
	if _, err := store.Put(ctx, "acme", first.Model, &first, acme.Cache,
		schemas.Result{ID: "a1", Tenant: "acme", Status: schemas.StatusOK, Text: "Paris", GPUSeconds: 0.2}, t0); err != nil {
		t.Fatal(err)
	}
	decide := func(tenant string, r schemas.Request) Decision {
		p, _ := ts.Lookup(tenant)
		hit, err := store.Lookup(ctx, tenant, r.Model, &r, p.Cache, t0.Add(time.Second))
		if err != nil {
			t.Fatal(err)
		}
		return Decide(Input{Now: t0.Add(time.Second), Tenant: tenant, Request: &r, Tenants: ts, CacheHit: hit, Load: Load{RequestsPerSec: 10}})
	}
	d := decide("acme", mk("a2"))
	if d.Action != ActionCacheHit || d.CacheHit.Result.Text != "Paris" || d.CacheHit.Result.FromCache != "exact" || d.CacheHit.Result.ID != "a2" {
		t.Fatalf("decision %+v", d)
	}
	d = decide("agents", mk("b1"))
	if d.Action != ActionAdmit || d.CacheHit != nil {
		t.Fatalf("cross-tenant request did not miss: %+v", d)
	}
}

// Against a real embedded NATS server: a workflow whose step failed beyond
// its retries has its next step refused and its running step cancelled,
// with the GPU-seconds saved counted.
func TestDecideDoomedWorkflowEndToEnd(t *testing.T) {
	srv := startJS(t)
	nc, err := srv.Connect("admission-wf-test")
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := bus.JetStream(nc)
	ctx := context.Background()
	reg, err := workflowstore.Open(ctx, js, workflowstore.Config{TTL: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	ts := loadExample(t)
	acme, _ := ts.Lookup("acme") // one retry per step
	wf := func(step int) *schemas.Workflow {
		return &schemas.Workflow{ID: "trip", Step: step, Of: 4, DeadlineMs: 120000}
	}
	now := t0
	// Step 1 runs (attempt 1), fails, is retried (attempt 2) and fails again.
	for attempt, id := range []string{"s1a", "s1b"} {
		if _, err := reg.StepStart(ctx, "acme", *wf(1), id, now, 2*time.Second, 1, acme.StepRetries()); err != nil {
			t.Fatal(err)
		}
		if attempt == 0 {
			// Step 2 started speculatively in parallel with the retry.
			if _, err := reg.StepStart(ctx, "acme", *wf(2), "s2", now, 8*time.Second, 6, acme.StepRetries()); err != nil {
				t.Fatal(err)
			}
		}
		now = now.Add(time.Second)
		out, err := reg.RecordResult(ctx, schemas.Result{ID: id, Tenant: "acme", Status: schemas.StatusFailed,
			Error: &schemas.Error{Code: schemas.CodeWorkerFailed, Message: "oom"}}, now)
		if err != nil {
			t.Fatal(err)
		}
		if attempt == 1 && (!out.NewlyDoomed || len(out.Cancel) != 1 || out.Cancel[0].RequestID != "s2") {
			t.Fatalf("second failure should doom and cancel s2: %+v", out)
		}
	}
	st, _ := reg.Get(ctx, "acme", "trip")
	r := schemas.Request{ID: "s3", Model: "llama-3.1-8b", Prompt: "book the hotel", MaxTokens: 200, Workflow: wf(3)}
	d := Decide(Input{Now: now, Tenant: "acme", Request: &r, Tenants: ts, Workflow: st, Load: Load{RequestsPerSec: 10}})
	if d.Action != ActionReject || d.Error == nil || d.Error.Code != schemas.CodeWorkflowDoomed || !d.Workflow.Doomed {
		t.Fatalf("decision %+v", d)
	}
	if res := d.Result("s3", "acme", now); res.Status != schemas.StatusFailed {
		t.Fatalf("doomed result status %s", res.Status)
	}
	out, err := reg.Refuse(ctx, "acme", *r.Workflow, r.ID, d.Error.Message, now, d.Workflow.GPUSecondsSaved)
	if err != nil {
		t.Fatal(err)
	}
	if out.GPUSecondsSaved <= 0 || out.State.GPUSecondsSaved <= out.GPUSecondsSaved {
		t.Fatalf("saved: refusal %v, total %v", out.GPUSecondsSaved, out.State.GPUSecondsSaved)
	}
}
