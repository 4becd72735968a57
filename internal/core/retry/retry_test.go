package retry

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/switchyard-ai/switchyard/schemas"
)

var t0 = time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)

func TestDecide(t *testing.T) {
	cfg := Config{Tenant: Limits{Ratio: 0.1}, Fleet: Limits{Ratio: 0.1}, MaxAttempts: 3}
	cases := []struct {
		name      string
		fleet     float64        // fleet ratio override
		requests  map[string]int // first attempts recorded before the decision
		retries   int            // retries granted to "a" before the decision
		in        Input
		want      bool
		code      string
		scope     string
		reasonHas string
	}{
		{name: "within budget and deadline", requests: map[string]int{"a": 100},
			in:   Input{Tenant: "a", Deadline: t0.Add(10 * time.Second), PrefillSeconds: 2, DecodeSeconds: 3},
			want: true, reasonHas: "covers predicted 5.00s"},
		{name: "no deadline", requests: map[string]int{"a": 100},
			in: Input{Tenant: "a", PrefillSeconds: 2}, want: true},
		{name: "deadline cannot cover the re-prefill", requests: map[string]int{"a": 100},
			in:   Input{Tenant: "a", Deadline: t0.Add(4 * time.Second), PrefillSeconds: 3.5, DecodeSeconds: 1},
			code: schemas.CodeDeadlineExceeded, reasonHas: "re-prefill 3.50s"},
		{name: "deadline already passed", requests: map[string]int{"a": 100},
			in:   Input{Tenant: "a", Deadline: t0.Add(-time.Second), PrefillSeconds: 0.1},
			code: schemas.CodeDeadlineExceeded, reasonHas: "passed"},
		{name: "deadline checked before the budget", requests: map[string]int{"a": 0},
			in:   Input{Tenant: "a", Deadline: t0.Add(time.Second), PrefillSeconds: 2},
			code: schemas.CodeDeadlineExceeded},
		{name: "tenant budget spent", requests: map[string]int{"a": 100, "b": 1000}, retries: 10,
			in:   Input{Tenant: "a", PrefillSeconds: 1},
			code: schemas.CodeRetryBudget, scope: "tenant", reasonHas: "tenant a"},
		{name: "fleet budget spent by others", fleet: 0.05, requests: map[string]int{"a": 1000, "b": 100}, retries: 55,
			in:   Input{Tenant: "b", PrefillSeconds: 1},
			code: schemas.CodeRetryBudget, scope: "fleet"},
		{name: "no traffic no floor", requests: map[string]int{},
			in:   Input{Tenant: "a", PrefillSeconds: 1},
			code: schemas.CodeRetryBudget, scope: "tenant"},
		{name: "attempt cap", requests: map[string]int{"a": 100},
			in:   Input{Tenant: "a", Attempt: 2, PrefillSeconds: 1},
			code: schemas.CodeRetryBudget, scope: "request", reasonHas: "at most 3 attempts"},
		{name: "unplaceable", requests: map[string]int{"a": 100},
			in:   Input{Tenant: "a", Unplaceable: true},
			code: schemas.CodeUnplaceable},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := cfg
			if tc.fleet > 0 {
				c.Fleet.Ratio = tc.fleet
			}
			b := NewBudget(c)
			for ten, n := range tc.requests {
				for i := 0; i < n; i++ {
					b.Request(ten, t0)
				}
			}
			for i := 0; i < tc.retries; i++ {
				if d := b.Decide(Input{Tenant: "a", Now: t0}); !d.Retry {
					t.Fatalf("setup retry %d refused: %s", i, d.Reason)
				}
			}
			tc.in.Now = t0
			d := b.Decide(tc.in)
			if d.Retry != tc.want || d.Code != tc.code || d.Scope != tc.scope {
				t.Fatalf("decision %+v, want retry=%v code=%q scope=%q", d, tc.want, tc.code, tc.scope)
			}
			if d.Reason == "" || !strings.Contains(d.Reason, tc.reasonHas) {
				t.Fatalf("reason %q does not mention %q", d.Reason, tc.reasonHas)
			}
			if e := d.Error(); (e == nil) != d.Retry || (e != nil && schemas.StatusForCode(e.Code) != schemas.StatusFailed && e.Code != schemas.CodeUnplaceable) {
				t.Fatalf("error %+v for decision %+v", e, d)
			}
		})
	}
}

func TestFloorLetsAQuietTenantRetry(t *testing.T) {
	b := NewBudget(Config{Tenant: Limits{Ratio: 0.1, MinPerSecond: 0.1}, Fleet: Limits{Ratio: 0.1, MinPerSecond: 1}, Window: 60 * time.Second, Bucket: 10 * time.Second})
	granted := 0
	for i := 0; i < 20; i++ {
		if b.Decide(Input{Tenant: "quiet", Now: t0.Add(time.Duration(i) * time.Second)}).Retry {
			granted++
		}
	}
	if granted != 6 { // 0.1/s over a 60 s window
		t.Fatalf("granted %d retries from the floor, want 6", granted)
	}
}

func TestWindowSlides(t *testing.T) {
	b := NewBudget(Config{Tenant: Limits{Ratio: 0.5}, Fleet: Limits{Ratio: 0.5}, Window: 30 * time.Second, Bucket: 10 * time.Second})
	for i := 0; i < 10; i++ {
		b.Request("a", t0)
	}
	for i := 0; i < 5; i++ {
		if !b.Decide(Input{Tenant: "a", Now: t0}).Retry {
			t.Fatalf("retry %d refused", i)
		}
	}
	if b.Decide(Input{Tenant: "a", Now: t0.Add(25 * time.Second)}).Retry {
		t.Fatal("budget refilled before the window slid")
	}
	// After 30 s the bucket with both the requests and the retries expired.
	if req, ret, _ := b.Usage("a", t0.Add(31*time.Second)); req != 0 || ret != 0 {
		t.Fatalf("usage after the window: %v requests %v retries", req, ret)
	}
	if b.Decide(Input{Tenant: "a", Now: t0.Add(31 * time.Second)}).Retry {
		t.Fatal("retry granted with no recent requests and no floor")
	}
}

// TestRetryStormStaysWithinBudget: half the fleet fails, so half of all
// attempts fail and every failure asks to retry. Retries granted in any
// window stay within 10 % of requests plus the floor, per tenant and for
// the fleet.
func TestRetryStormStaysWithinBudget(t *testing.T) {
	cfg := Defaults()
	b := NewBudget(cfg)
	tenants := []string{"acme", "globex", "initech"}
	type rec struct {
		at      time.Time
		tenant  string
		isRetry bool
	}
	var log []rec
	for ms := 0; ms < 180_000; ms += 10 { // 100 requests/s for 3 minutes
		now := t0.Add(time.Duration(ms) * time.Millisecond)
		ten := tenants[(ms/10)%len(tenants)]
		b.Request(ten, now)
		log = append(log, rec{now, ten, false})
		for attempt := 0; (ms/10+attempt)%2 == 0; attempt++ { // every other attempt fails
			d := b.Decide(Input{Tenant: ten, Now: now, Attempt: attempt, Deadline: now.Add(30 * time.Second), PrefillSeconds: 1, DecodeSeconds: 2})
			if !d.Retry {
				break
			}
			log = append(log, rec{now, ten, true})
		}
	}
	span := cfg.Window
	check := func(scope string, l Limits, match func(rec) bool) {
		var worst float64
		for end := t0.Add(span); !end.After(t0.Add(180 * time.Second)); end = end.Add(cfg.Bucket) {
			var reqs, retries float64
			for _, r := range log {
				if match(r) && !r.at.Before(end.Add(-span)) && r.at.Before(end) {
					if r.isRetry {
						retries++
					} else {
						reqs++
					}
				}
			}
			limit := l.Ratio*reqs + l.MinPerSecond*span.Seconds()
			if retries > limit {
				t.Errorf("%s: %v retries for %v requests in window ending %s: over the limit %.0f", scope, retries, reqs, end.Sub(t0), limit)
			}
			worst = max(worst, retries/reqs)
		}
		t.Logf("%s: worst retry share %.1f%% (ratio %.0f%% + floor %.1f/s)", scope, 100*worst, 100*l.Ratio, l.MinPerSecond)
	}
	check("fleet", cfg.Fleet, func(rec) bool { return true })
	for _, ten := range tenants {
		check(ten, cfg.Tenant, func(r rec) bool { return r.tenant == ten })
	}
}

func TestTenantMapIsBounded(t *testing.T) {
	b := NewBudget(Config{MaxTenants: 10})
	for i := 0; i < 100; i++ {
		b.Request(fmt.Sprintf("t%d", i), t0)
	}
	if len(b.tenants) > 10 {
		t.Fatalf("%d tenant windows kept, cap 10", len(b.tenants))
	}
	if req, _, _ := b.Usage("", t0); req != 100 {
		t.Fatalf("fleet counted %v requests, want 100", req)
	}
}
