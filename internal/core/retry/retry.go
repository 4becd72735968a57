// Package retry owns retry budgets and the retry decision. Retrying an LLM
// request on another GPU is not free: its KV cache died with the failed
// host, so the retry re-pays the whole prefill. During a regional failure a
// storm of such retries would multiply cost and load exactly when capacity
// is short. So, in the spirit of gRPC's retry throttling and Finagle's
// RetryBudget, retries may be at most a fraction of recent requests — per
// tenant and fleet-wide — plus a small per-second floor so that a quiet
// tenant can still retry; and a retry is only attempted when the remaining
// deadline covers the predicted re-prefill plus decode on the new
// placement. Otherwise the request fails fast with a named reason.
//
// Pure and deterministic: time is passed in.
package retry

import (
	"fmt"
	"time"

	"github.com/switchyard-ai/switchyard/schemas"
)

// Limits bound retries within one scope (a tenant, or the fleet).
type Limits struct {
	// Ratio is the share of recent requests that may be retried (0.1 = 10 %).
	Ratio float64
	// MinPerSecond is a floor: this many retries per second over the window
	// are allowed regardless of traffic, so a tenant with little traffic
	// is not starved of its first retry.
	MinPerSecond float64
}

// Config configures a Budget. Zero fields take the defaults of Defaults.
type Config struct {
	Tenant Limits
	Fleet  Limits
	// Window is how far back requests and retries count; it is divided
	// into buckets of Bucket, and whole buckets expire.
	Window time.Duration
	Bucket time.Duration
	// MaxAttempts caps attempts per request (the first placement is
	// attempt 0, so MaxAttempts 3 allows two retries).
	MaxAttempts int
	// MaxTenants bounds memory: beyond it the quietest tenants' windows are
	// dropped (they then only have the floor, which is the right answer for
	// a tenant with no recent traffic anyway).
	MaxTenants int
}

// Defaults: 10 % of recent requests per tenant and fleet-wide over 60 s in
// 10 s buckets, with floors of 0.2 retries/s per tenant and 1/s for the
// fleet (12 and 60 a minute): enough for a quiet system to retry the odd
// failure, small against the 10 % share once traffic is real.
func Defaults() Config {
	return Config{
		Tenant:      Limits{Ratio: 0.1, MinPerSecond: 0.2},
		Fleet:       Limits{Ratio: 0.1, MinPerSecond: 1},
		Window:      60 * time.Second,
		Bucket:      10 * time.Second,
		MaxAttempts: 3,
		MaxTenants:  10000,
	}
}

func (c Config) withDefaults() Config {
	d := Defaults()
	// An unset scope takes the whole default, floor included: a zero floor
	// would leave a quiet tenant unable to retry at all.
	if c.Tenant == (Limits{}) {
		c.Tenant = d.Tenant
	}
	if c.Fleet == (Limits{}) {
		c.Fleet = d.Fleet
	}
	if c.Tenant.Ratio <= 0 {
		c.Tenant.Ratio = d.Tenant.Ratio
	}
	if c.Tenant.MinPerSecond < 0 {
		c.Tenant.MinPerSecond = 0
	}
	if c.Fleet.Ratio <= 0 {
		c.Fleet.Ratio = d.Fleet.Ratio
	}
	if c.Fleet.MinPerSecond < 0 {
		c.Fleet.MinPerSecond = 0
	}
	if c.Bucket <= 0 {
		c.Bucket = d.Bucket
	}
	if c.Window < c.Bucket {
		c.Window = max(d.Window, c.Bucket)
	}
	if c.MaxAttempts <= 0 {
		c.MaxAttempts = d.MaxAttempts
	}
	if c.MaxTenants <= 0 {
		c.MaxTenants = d.MaxTenants
	}
	return c
}

// window counts requests and retries in a ring of time buckets.
type window struct {
	bucket  int64 // nanoseconds
	idx     []int64
	reqs    []float64
	retries []float64
}

func newWindow(c Config) *window {
	n := int((c.Window + c.Bucket - 1) / c.Bucket)
	w := &window{bucket: int64(c.Bucket), idx: make([]int64, n), reqs: make([]float64, n), retries: make([]float64, n)}
	for i := range w.idx {
		w.idx[i] = -1 << 62
	}
	return w
}

func (w *window) slot(now time.Time) int {
	i := now.UnixNano() / w.bucket
	s := int(((i % int64(len(w.idx))) + int64(len(w.idx))) % int64(len(w.idx)))
	if w.idx[s] != i {
		w.idx[s], w.reqs[s], w.retries[s] = i, 0, 0
	}
	return s
}

func (w *window) sums(now time.Time) (reqs, retries float64) {
	cur := now.UnixNano() / w.bucket
	for s, i := range w.idx {
		if i > cur-int64(len(w.idx)) && i <= cur {
			reqs += w.reqs[s]
			retries += w.retries[s]
		}
	}
	return reqs, retries
}

// allowance is how many retries the window permits in total right now.
func (w *window) allowance(l Limits, span time.Duration, now time.Time) (allowed, used, reqs float64) {
	reqs, used = w.sums(now)
	return l.Ratio*reqs + l.MinPerSecond*span.Seconds(), used, reqs
}

// Budget tracks recent requests and retries per tenant and for the fleet.
// Not safe for concurrent use; the router owns it.
type Budget struct {
	cfg     Config
	span    time.Duration
	fleet   *window
	tenants map[string]*window
}

// NewBudget returns an empty budget.
func NewBudget(cfg Config) *Budget {
	cfg = cfg.withDefaults()
	span := time.Duration((cfg.Window+cfg.Bucket-1)/cfg.Bucket) * cfg.Bucket
	return &Budget{cfg: cfg, span: span, fleet: newWindow(cfg), tenants: map[string]*window{}}
}

func (b *Budget) tenant(t string, now time.Time) *window {
	w, ok := b.tenants[t]
	if !ok {
		if len(b.tenants) >= b.cfg.MaxTenants {
			b.evictQuiet(now)
		}
		w = newWindow(b.cfg)
		b.tenants[t] = w
	}
	return w
}

// evictQuiet drops tenants with nothing in their window, or, if every
// tenant is busy, the one with the fewest requests.
func (b *Budget) evictQuiet(now time.Time) {
	quietest, least := "", -1.0
	for t, w := range b.tenants {
		r, x := w.sums(now)
		if r == 0 && x == 0 {
			delete(b.tenants, t)
			continue
		}
		if least < 0 || r < least || (r == least && t < quietest) {
			quietest, least = t, r
		}
	}
	if len(b.tenants) >= b.cfg.MaxTenants && quietest != "" {
		delete(b.tenants, quietest)
	}
}

// Request records a first attempt (not a retry) for tenant: it is what
// earns retry budget.
func (b *Budget) Request(tenant string, now time.Time) {
	w := b.tenant(tenant, now)
	w.reqs[w.slot(now)]++
	b.fleet.reqs[b.fleet.slot(now)]++
}

// Input describes a request whose placement failed (its worker died,
// errored, or its breaker opened while it was in flight).
type Input struct {
	Tenant string
	Now    time.Time
	// Deadline is the request's absolute deadline; zero means none.
	Deadline time.Time
	// Attempt is the attempt that failed (0 for the first placement).
	Attempt int
	// PrefillSeconds and DecodeSeconds are the predicted times of the retry
	// on its new placement, including queueing there. The prefill is the
	// whole prompt's: the KV cache died with the old host.
	PrefillSeconds float64
	DecodeSeconds  float64
	// Unplaceable is set when no other worker can take the request.
	Unplaceable bool
}

// Decision is the outcome of Decide.
type Decision struct {
	Retry bool `json:"retry"`
	// Code is the error code to fail with when Retry is false:
	// schemas.CodeDeadlineExceeded, schemas.CodeRetryBudget or
	// schemas.CodeUnplaceable.
	Code   string `json:"code,omitempty"`
	Reason string `json:"reason"`
	// Scope is "tenant" or "fleet" when a budget said no.
	Scope string `json:"scope,omitempty"`
	// Remaining and Needed are the deadline arithmetic, in seconds.
	Remaining float64 `json:"remaining_s"`
	Needed    float64 `json:"needed_s"`
}

// Error is the Decision as a schemas.Error for a failed Result; nil when
// the decision is to retry.
func (d Decision) Error() *schemas.Error {
	if d.Retry {
		return nil
	}
	return &schemas.Error{Code: d.Code, Message: d.Reason}
}

// Decide says whether to retry a failed attempt, and if so records the
// retry against the tenant's and the fleet's budgets (check and spend are
// one step so two callers cannot both spend the last retry). The deadline
// is checked first: a retry that cannot finish in time would spend budget
// and GPU time for nothing.
func (b *Budget) Decide(in Input) Decision {
	need := in.PrefillSeconds + in.DecodeSeconds
	d := Decision{Needed: need}
	if !in.Deadline.IsZero() {
		d.Remaining = in.Deadline.Sub(in.Now).Seconds()
		if d.Remaining < need {
			d.Code = schemas.CodeDeadlineExceeded
			if d.Remaining <= 0 {
				d.Reason = fmt.Sprintf("deadline passed %.2fs ago; not retrying", -d.Remaining)
			} else {
				d.Reason = fmt.Sprintf("remaining %.2fs does not cover the retry's predicted %.2fs (full re-prefill %.2fs, the KV cache died with the host, + decode %.2fs)",
					d.Remaining, need, in.PrefillSeconds, in.DecodeSeconds)
			}
			return d
		}
	}
	if in.Unplaceable {
		d.Code = schemas.CodeUnplaceable
		d.Reason = "no other worker can take the retry"
		return d
	}
	if in.Attempt+1 >= b.cfg.MaxAttempts {
		d.Code = schemas.CodeRetryBudget
		d.Scope = "request"
		d.Reason = fmt.Sprintf("attempt %d failed and at most %d attempts are allowed", in.Attempt+1, b.cfg.MaxAttempts)
		return d
	}
	tw := b.tenant(in.Tenant, in.Now)
	if allowed, used, reqs := tw.allowance(b.cfg.Tenant, b.span, in.Now); used+1 > allowed {
		d.Code = schemas.CodeRetryBudget
		d.Scope = "tenant"
		d.Reason = fmt.Sprintf("tenant %s retry budget spent: %.0f retries vs %.0f requests in the last %s (limit %.0f%% + %.1f/s)",
			in.Tenant, used, reqs, b.span, 100*b.cfg.Tenant.Ratio, b.cfg.Tenant.MinPerSecond)
		return d
	}
	if allowed, used, reqs := b.fleet.allowance(b.cfg.Fleet, b.span, in.Now); used+1 > allowed {
		d.Code = schemas.CodeRetryBudget
		d.Scope = "fleet"
		d.Reason = fmt.Sprintf("fleet retry budget spent: %.0f retries vs %.0f requests in the last %s (limit %.0f%% + %.1f/s)",
			used, reqs, b.span, 100*b.cfg.Fleet.Ratio, b.cfg.Fleet.MinPerSecond)
		return d
	}
	tw.retries[tw.slot(in.Now)]++
	b.fleet.retries[b.fleet.slot(in.Now)]++
	d.Retry = true
	if in.Deadline.IsZero() {
		d.Reason = fmt.Sprintf("retry %d within budget; predicted %.2fs with full re-prefill", in.Attempt+1, need)
	} else {
		d.Reason = fmt.Sprintf("retry %d within budget; remaining %.2fs covers predicted %.2fs with full re-prefill", in.Attempt+1, d.Remaining, need)
	}
	return d
}
