package retry

import "time"

// Usage reports a scope's window: requests, retries and the allowance, for
// the tests. An empty tenant means the fleet.
func (b *Budget) Usage(tenant string, now time.Time) (requests, retries, allowed float64) {
	if tenant == "" {
		a, u, r := b.fleet.allowance(b.cfg.Fleet, b.span, now)
		return r, u, a
	}
	w, ok := b.tenants[tenant]
	if !ok {
		return 0, 0, b.cfg.Tenant.MinPerSecond * b.span.Seconds()
	}
	a, u, r := w.allowance(b.cfg.Tenant, b.span, now)
	return r, u, a
}
