package admission

import (
	"math"
	"sync"
	"time"

	"github.com/switchyard-ai/switchyard/schemas"
)

// TokenBucket is a classic token bucket with time passed in: Capacity
// tokens, refilled at Rate per second. The zero value is empty and
// unlimited-by-construction is expressed by not having a bucket at all.
type TokenBucket struct {
	Capacity float64
	Rate     float64
	Level    float64
	Last     time.Time
}

// NewTokenBucket returns a full bucket.
func NewTokenBucket(capacity, ratePerSec float64, now time.Time) TokenBucket {
	return TokenBucket{Capacity: capacity, Rate: ratePerSec, Level: capacity, Last: now}
}

// Refill brings the bucket forward to now. Time running backwards (a
// replay out of order) refills nothing rather than draining.
func (b *TokenBucket) Refill(now time.Time) {
	if now.After(b.Last) {
		b.Level = math.Min(b.Capacity, b.Level+now.Sub(b.Last).Seconds()*b.Rate)
		b.Last = now
	}
}

// Allows reports whether n tokens are available at now.
func (b *TokenBucket) Allows(n float64, now time.Time) bool {
	b.Refill(now)
	return b.Level >= n
}

// Take removes n tokens (the level may not go below zero).
func (b *TokenBucket) Take(n float64, now time.Time) {
	b.Refill(now)
	b.Level = math.Max(0, b.Level-n)
}

// Give returns n tokens taken earlier (never above Capacity).
func (b *TokenBucket) Give(n float64, now time.Time) {
	b.Refill(now)
	b.Level = math.Min(b.Capacity, b.Level+n)
}

// RetryAfter is how long until n tokens are available.
func (b *TokenBucket) RetryAfter(n float64, now time.Time) time.Duration {
	b.Refill(now)
	if b.Level >= n || b.Rate <= 0 {
		return 0
	}
	return time.Duration((n - b.Level) / b.Rate * float64(time.Second))
}

type tenantQuota struct {
	req, tok    *TokenBucket
	window      time.Time // start of the budget window
	spent       float64
	reqRate     float64 // the profile values the buckets were built from
	tokRate     float64
	burstSecond float64
}

// Quotas holds per-tenant quota state. It is safe for concurrent use.
// State lives in one admitter process; with N admitter replicas each
// enforces its own share (configure quotas per replica or partition
// tenants across replicas).
type Quotas struct {
	mu sync.Mutex
	t  map[string]*tenantQuota
}

// NewQuotas returns empty quota state.
func NewQuotas() *Quotas { return &Quotas{t: map[string]*tenantQuota{}} }

func (q *Quotas) state(p Profile, now time.Time) *tenantQuota {
	s := q.t[p.Name]
	burst := p.Quota.BurstSeconds
	if burst <= 0 {
		burst = 60
	}
	// Rebuild the buckets when the profile changed (a config reload).
	if s == nil || s.reqRate != p.Quota.RequestsPerMin || s.tokRate != p.Quota.TokensPerMin || s.burstSecond != burst {
		ns := &tenantQuota{reqRate: p.Quota.RequestsPerMin, tokRate: p.Quota.TokensPerMin, burstSecond: burst}
		if r := p.Quota.RequestsPerMin / 60; r > 0 {
			b := NewTokenBucket(math.Max(1, r*burst), r, now)
			ns.req = &b
		}
		if r := p.Quota.TokensPerMin / 60; r > 0 {
			b := NewTokenBucket(math.Max(1, r*burst), r, now)
			ns.tok = &b
		}
		if s != nil {
			ns.window, ns.spent = s.window, s.spent
		}
		s = ns
		q.t[p.Name] = s
	}
	if start := budgetWindow(p.Budget.Per, now); !start.Equal(s.window) {
		s.window, s.spent = start, 0
	}
	return s
}

func budgetWindow(per string, now time.Time) time.Time {
	now = now.UTC()
	if per == "day" {
		return time.Date(now.Year(), now.Month(), now.Day(), 0, 0, 0, 0, time.UTC)
	}
	return now.Truncate(time.Hour)
}

// Check reports whether tenant p may run a request of tokens tokens
// (prompt + max_tokens) with an estimated cost, without consuming
// anything: a request refused later (shed) must not use up the quota.
func (q *Quotas) Check(p Profile, tokens int, costUSD float64, now time.Time) *schemas.Error {
	q.mu.Lock()
	defer q.mu.Unlock()
	s := q.state(p, now)
	if s.req != nil && !s.req.Allows(1, now) {
		return schemas.Errf(schemas.CodeQuotaExceeded, "", "tenant %q is over its %g requests/min quota; retry in %s",
			p.Name, p.Quota.RequestsPerMin, s.req.RetryAfter(1, now).Round(time.Millisecond))
	}
	if s.tok != nil {
		n := float64(tokens)
		if n > s.tok.Capacity {
			return schemas.Errf(schemas.CodeQuotaExceeded, "max_tokens", "request needs %d tokens, more than tenant %q's whole %g tokens/min allowance",
				tokens, p.Name, p.Quota.TokensPerMin)
		}
		if !s.tok.Allows(n, now) {
			return schemas.Errf(schemas.CodeQuotaExceeded, "", "tenant %q is over its %g tokens/min quota; retry in %s",
				p.Name, p.Quota.TokensPerMin, s.tok.RetryAfter(n, now).Round(time.Millisecond))
		}
	}
	if p.Budget.USD > 0 && s.spent+costUSD > p.Budget.USD {
		return schemas.Errf(schemas.CodeBudgetExhausted, "", "tenant %q has spent $%.4f of its $%.2f per %s budget; this request is estimated at $%.4f",
			p.Name, s.spent, p.Budget.USD, p.Budget.Per, costUSD)
	}
	return nil
}

// Charge consumes one request, tokens tokens and the estimated cost.
func (q *Quotas) Charge(p Profile, tokens int, costUSD float64, now time.Time) {
	q.mu.Lock()
	defer q.mu.Unlock()
	s := q.state(p, now)
	if s.req != nil {
		s.req.Take(1, now)
	}
	if s.tok != nil {
		s.tok.Take(float64(tokens), now)
	}
	s.spent += costUSD
}

// Refund gives back a charge whose decision never took effect, so a
// submission redelivered after a failed publish, or answered as a
// duplicate, is charged once.
func (q *Quotas) Refund(p Profile, c Charge, now time.Time) {
	if q == nil || c == (Charge{}) {
		return
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	s := q.state(p, now)
	if s.req != nil && c.Requests > 0 {
		s.req.Give(float64(c.Requests), now)
	}
	if s.tok != nil && c.Tokens > 0 {
		s.tok.Give(float64(c.Tokens), now)
	}
	s.spent = math.Max(0, s.spent-c.CostUSD)
}

// Reconcile replaces an admission-time cost estimate with the actual cost
// from the request's Result, so the budget tracks real spend.
func (q *Quotas) Reconcile(p Profile, estimatedUSD, actualUSD float64, now time.Time) {
	q.mu.Lock()
	defer q.mu.Unlock()
	s := q.state(p, now)
	s.spent = math.Max(0, s.spent+actualUSD-estimatedUSD)
}
