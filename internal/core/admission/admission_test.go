package admission

import (
	"os"
	"strings"
	"testing"
	"time"

	"github.com/switchyard-ai/switchyard/internal/core/tokens"
	"github.com/switchyard-ai/switchyard/schemas"
)

var t0 = time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)

func f64(v float64) *float64 { return &v }

func loadExample(t *testing.T) *Tenants {
	t.Helper()
	ts, err := loadTenantsFile(t, "../../../config/tenants.example.json")
	if err != nil {
		t.Fatal(err)
	}
	return ts
}

func TestTenantsLookup(t *testing.T) {
	ts := loadExample(t)
	rejecting, err := NewTenants(Config{UnknownTenants: UnknownReject, Tenants: map[string]Profile{"a": {}}})
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name     string
		ts       *Tenants
		tenant   string
		code     string
		priority string
		dflt     bool
	}{
		{"configured tenant", ts, "acme", "", schemas.PriorityCritical, false},
		{"unknown tenant gets the default profile", ts, "stranger", "", schemas.PriorityBatch, true},
		{"unknown tenant rejected when configured so", rejecting, "stranger", schemas.CodeUnknownTenant, "", false},
		{"known tenant under reject policy", rejecting, "a", "", schemas.PriorityStandard, false},
		{"invalid tenant token", ts, "a.b", schemas.CodeInvalidTenant, "", false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p, e := c.ts.Lookup(c.tenant)
			if c.code != "" {
				if e == nil || e.Code != c.code {
					t.Fatalf("error %v, want %s", e, c.code)
				}
				return
			}
			if e != nil || p.Priority != c.priority || p.Default != c.dflt || p.Name != c.tenant {
				t.Fatalf("profile %+v err %v", p, e)
			}
		})
	}
}

func TestParseTenantsRejectsBadConfig(t *testing.T) {
	for _, bad := range []string{
		`{"unknown_tenants":"maybe"}`,
		`{"tenants":{"a":{"priority":"vip"}}}`,
		`{"tenants":{"a":{"priority":"standard","allowed_priorities":["critical"]}}}`,
		`{"tenants":{"a":{"quota":{"requests_per_minute":5}}}}`, // misspelt field
		`{"tenants":{"a":{"cache":{"mode":"fuzzy"}}}}`,
		`{"tenants":{"a":{"budget":{"usd":5,"per":"week"}}}}`,
		`{"tenants":{"a.b":{}}}`,
	} {
		if _, err := ParseTenants([]byte(bad)); err == nil {
			t.Errorf("accepted %s", bad)
		}
	}
}

func TestResolvePriority(t *testing.T) {
	ts := loadExample(t)
	cases := []struct{ tenant, asked, want, code string }{
		{"acme", "", schemas.PriorityInteractive, ""}, // its default_priority, below its ceiling
		{"acme", schemas.PriorityCritical, schemas.PriorityCritical, ""},
		{"acme", schemas.PriorityBatch, schemas.PriorityBatch, ""},
		{"globex", "", schemas.PriorityInteractive, ""},
		{"globex", schemas.PriorityCritical, "", schemas.CodePriorityNotAllowed}, // above its own class
	}
	for _, c := range cases {
		p, _ := ts.Lookup(c.tenant)
		got, e := p.ResolvePriority(c.asked)
		if c.code != "" {
			if e == nil || e.Code != c.code {
				t.Fatalf("asked %q: %v", c.asked, e)
			}
			continue
		}
		if e != nil || got != c.want {
			t.Fatalf("asked %q: got %q %v", c.asked, got, e)
		}
	}
}

func TestQuotaExhaustion(t *testing.T) {
	p := Profile{Name: "t", Priority: schemas.PriorityStandard,
		Quota: Quota{RequestsPerMin: 60, TokensPerMin: 6000, BurstSeconds: 3}, Budget: Budget{USD: 0.01, Per: "hour"}}
	cases := []struct {
		name string
		run  func(q *Quotas) *schemas.Error
		code string
	}{
		{"requests per minute: the 4th request in a 3-request burst is refused", func(q *Quotas) *schemas.Error {
			for i := 0; i < 3; i++ {
				if e := q.Check(p, 1, 0, t0); e != nil {
					return e
				}
				q.Charge(p, 1, 0, t0)
			}
			return q.Check(p, 1, 0, t0)
		}, schemas.CodeQuotaExceeded},
		{"a refunded charge is as if never taken: three burst requests, one refunded, leave room for a fourth", func(q *Quotas) *schemas.Error {
			for i := 0; i < 3; i++ {
				q.Charge(p, 1, 0.003, t0)
			}
			q.Refund(p, Charge{Requests: 1, Tokens: 1, CostUSD: 0.003}, t0)
			return q.Check(p, 1, 0.003, t0)
		}, ""},
		{"without the refund the fourth is refused", func(q *Quotas) *schemas.Error {
			for i := 0; i < 3; i++ {
				q.Charge(p, 1, 0.003, t0)
			}
			return q.Check(p, 1, 0.003, t0)
		}, schemas.CodeQuotaExceeded},
		{"the bucket refills with time", func(q *Quotas) *schemas.Error {
			for i := 0; i < 3; i++ {
				q.Charge(p, 1, 0, t0)
			}
			return q.Check(p, 1, 0, t0.Add(1100*time.Millisecond))
		}, ""},
		{"tokens per minute", func(q *Quotas) *schemas.Error {
			q.Charge(p, 250, 0, t0)
			return q.Check(p, 100, 0, t0)
		}, schemas.CodeQuotaExceeded},
		{"a request larger than the whole allowance", func(q *Quotas) *schemas.Error {
			return q.Check(p, 5000, 0, t0)
		}, schemas.CodeQuotaExceeded},
		{"budget exhausted", func(q *Quotas) *schemas.Error {
			q.Charge(p, 1, 0.009, t0)
			return q.Check(p, 1, 0.002, t0)
		}, schemas.CodeBudgetExhausted},
		{"budget resets in the next window", func(q *Quotas) *schemas.Error {
			q.Charge(p, 1, 0.01, t0)
			return q.Check(p, 1, 0.002, t0.Add(time.Hour))
		}, ""},
		{"reconcile replaces the estimate with actual spend", func(q *Quotas) *schemas.Error {
			q.Charge(p, 1, 0.009, t0)
			q.Reconcile(p, 0.009, 0.001, t0)
			return q.Check(p, 1, 0.002, t0)
		}, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			e := c.run(NewQuotas())
			if (e == nil) != (c.code == "") || (e != nil && e.Code != c.code) {
				t.Fatalf("got %v, want %q", e, c.code)
			}
		})
	}
}

func TestComplexityAndMove(t *testing.T) {
	ts := loadExample(t)
	acme, _ := ts.Lookup("acme")
	ops, _ := ts.Lookup("ops")
	nightly, _ := ts.Lookup("nightly")
	long := strings.Repeat("The ledger shows a discrepancy between the two quarters. ", 400) // ~4k tokens
	cases := []struct {
		name  string
		p     Profile
		req   schemas.Request
		model string
		moved bool
		code  string
	}{
		{"auto with a short prompt goes to the small tier", acme,
			schemas.Request{Model: "auto", Prompt: "Is this review positive? 'Great phone.'", MaxTokens: 8, Metadata: map[string]string{"task": "classify"}},
			"llama-3.2-1b", true, ""},
		{"auto short chat without hints goes to the small tier", acme,
			schemas.Request{Model: "auto", Prompt: "hello there", MaxTokens: 32}, "llama-3.2-1b", true, ""},
		{"auto with a long reasoning prompt goes to the big tier", acme,
			schemas.Request{Model: "auto", Prompt: long + " Think step by step and prove which quarter is wrong.", MaxTokens: 800},
			"llama-3.1-70b", true, ""},
		{"code goes to the mid tier", acme,
			schemas.Request{Model: "auto", Prompt: "Write a function that reverses a list", MaxTokens: 300, Metadata: map[string]string{"task": "code"}},
			"llama-3.1-8b", true, ""},
		{"downgrade an oversized model for an easy task", acme,
			schemas.Request{Model: "llama-3.1-70b", Prompt: "Extract the date: 'due 3 May'", MaxTokens: 16, Metadata: map[string]string{"task": "extract"}},
			"llama-3.2-1b", true, ""},
		{"no downgrade when the tenant forbids it", ops,
			schemas.Request{Model: "llama-3.1-70b", Prompt: "Extract the date", MaxTokens: 16, Metadata: map[string]string{"task": "extract"}},
			"llama-3.1-70b", false, ""},
		{"never upgraded", acme,
			schemas.Request{Model: "llama-3.2-1b", Prompt: long + " prove it step by step", MaxTokens: 100}, "llama-3.2-1b", false, ""},
		{"auto refused when the tenant does not allow it", ops,
			schemas.Request{Model: "auto", Prompt: "hi", MaxTokens: 8}, "", false, schemas.CodeModelNotAllowed},
		{"auto capped by the tenant's model allowlist", nightly,
			schemas.Request{Model: "auto", Prompt: long + " prove it step by step", MaxTokens: 100}, "llama-3.1-8b", true, ""},
		{"workflow steps start at tier 1", acme,
			schemas.Request{Model: "auto", Prompt: "classify: spam?", MaxTokens: 4, Metadata: map[string]string{"task": "classify"},
				Workflow: &schemas.Workflow{ID: "w", Step: 1}}, "llama-3.2-3b", true, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := c.req
			cx := EstimateComplexity(&r, tokensOf(&r))
			mv := ChooseModel(c.p, ts.Ladder(), nil, &r, cx)
			if c.code != "" {
				if mv.Error == nil || mv.Error.Code != c.code {
					t.Fatalf("error %v, want %s", mv.Error, c.code)
				}
				return
			}
			if mv.Error != nil || mv.Model != c.model || mv.Moved != c.moved {
				t.Fatalf("move %+v (complexity %+v), want %s moved=%v", mv, cx, c.model, c.moved)
			}
			if mv.Moved && mv.Reason == "" {
				t.Fatal("a move needs a reason")
			}
		})
	}
}

func TestShedLowestClassFirst(t *testing.T) {
	var s Shedder
	svc := 500 * time.Millisecond
	budget := 10 * time.Second
	cases := []struct {
		name string
		load Load
		shed map[string]bool
	}{
		{"idle fleet sheds nothing", Load{RequestsPerSec: 20},
			map[string]bool{"critical": false, "interactive": false, "standard": false, "batch": false}},
		{"moderate load sheds only batch", Load{RequestsPerSec: 20, Pending: map[string]int{"standard": 140, "batch": 20}},
			map[string]bool{"critical": false, "interactive": false, "standard": false, "batch": true}},
		{"overload sheds batch and standard, keeps the higher classes", Load{RequestsPerSec: 20,
			Pending: map[string]int{"critical": 5, "interactive": 40, "standard": 300, "batch": 2000}},
			map[string]bool{"critical": false, "interactive": false, "standard": true, "batch": true}},
		{"extreme overload still keeps critical", Load{RequestsPerSec: 20,
			Pending: map[string]int{"critical": 10, "interactive": 400, "standard": 3000, "batch": 20000}},
			map[string]bool{"critical": false, "interactive": true, "standard": true, "batch": true}},
		{"token-based prediction", Load{TokensPerSec: 10000,
			PendingTokens: map[string]float64{"interactive": 20000, "batch": 500000}},
			map[string]bool{"critical": false, "interactive": false, "standard": false, "batch": true}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			for class, want := range c.shed {
				v := s.Check(class, t0, t0.Add(budget), svc, c.load)
				if v.Shed != want {
					t.Errorf("%s: shed=%v (%s), want %v", class, v.Shed, v.Reason, want)
				}
				if v.Shed && (v.Error == nil || v.Error.Code != schemas.CodeShed) {
					t.Errorf("%s: shed without a shed error: %v", class, v.Error)
				}
			}
		})
	}
	// Same queue, same deadline: the wait never decreases with lower class.
	l := Load{RequestsPerSec: 10, Pending: map[string]int{"critical": 1, "interactive": 2, "standard": 3, "batch": 4}}
	prev := time.Duration(-1)
	for _, c := range schemas.Priorities {
		w, _ := s.Wait(c, l)
		if w < prev {
			t.Fatalf("%s waits %v, less than a higher class's %v", c, w, prev)
		}
		prev = w
	}
	if _, known := s.Wait("batch", Load{}); known {
		t.Fatal("no throughput figure must mean unknown wait")
	}
}

func TestDefer(t *testing.T) {
	var p DeferPolicy
	busy := Load{Utilization: 0.95}
	cases := []struct {
		name     string
		class    string
		deadline time.Duration
		load     Load
		ok       bool
	}{
		{"busy fleet, batch with an hour: deferred", schemas.PriorityBatch, time.Hour, busy, true},
		{"idle fleet: not deferred", schemas.PriorityBatch, time.Hour, Load{Utilization: 0.2}, false},
		{"tight deadline: not deferred", schemas.PriorityBatch, 90 * time.Second, busy, false},
		{"higher classes are never deferred", schemas.PriorityStandard, time.Hour, busy, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			until, ok, why := p.Defer(c.class, t0, t0.Add(c.deadline), 10*time.Second, 0, c.load)
			if ok != c.ok {
				t.Fatalf("ok=%v, want %v", ok, c.ok)
			}
			if ok {
				if !until.After(t0) || until.Add(20*time.Second).After(t0.Add(c.deadline)) || until.Nanosecond() != 0 || why == "" {
					t.Fatalf("until %v (%s)", until, why)
				}
				if until.Sub(t0) > 10*time.Minute {
					t.Fatalf("deferred beyond MaxDefer: %v", until.Sub(t0))
				}
			}
		})
	}
}

func tokensOf(r *schemas.Request) int { return tokens.Count(r.PromptText()) }

// loadTenantsFile reads a tenants file for a test (the package itself does
// no I/O; internal/adapter/config reads files for the services).
func loadTenantsFile(t *testing.T, path string) (*Tenants, error) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return ParseTenants(b)
}
