package faulttest

import (
	"sort"
	"testing"
	"time"

	"github.com/switchyard-ai/switchyard/internal/core/retry"
)

// budgetReport is what checkRetryBudget found.
type budgetReport struct {
	requests, allowed, refusedBudget, refusedDeadline, refusedOther int
	byTenant                                                        map[string][2]int // requests, retries allowed
}

// checkRetryBudget replays the router's retry decisions (its "retry"
// events) against the documented default budget — 10 % of recent first
// attempts plus a per-second floor, per tenant and fleet-wide — counting
// first attempts from the ADMITTED stream. ADMITTED stores a request
// before the router sees it, so counting everything stored before a
// decision over-estimates the router's allowance: a granted retry beyond
// that is a budget overrun. Counting only what was stored a second before
// and within the last 50 s under-estimates it: a retry refused for budget
// while under that is a refusal the budget did not call for.
func checkRetryBudget(t *testing.T, rec recorded) budgetReport {
	t.Helper()
	cfg := retry.Defaults()
	span := cfg.Window.Seconds()
	var admits []time.Time
	tenantAdmits := map[string][]time.Time{}
	for _, a := range rec.admitted {
		if a.V.Attempt != 0 {
			continue
		}
		admits = append(admits, a.At)
		tenantAdmits[a.V.Tenant] = append(tenantAdmits[a.V.Tenant], a.At)
	}
	countIn := func(ts []time.Time, from, to time.Time) int {
		n := 0
		for _, x := range ts {
			if !x.Before(from) && !x.After(to) {
				n++
			}
		}
		return n
	}
	events := rec.eventsOf("retry")
	sort.SliceStable(events, func(i, j int) bool { return events[i].V.At.Before(events[j].V.At) })
	rep := budgetReport{requests: len(admits), byTenant: map[string][2]int{}}
	usedTenant := map[string]int{}
	usedFleet := 0
	for _, e := range events {
		ev := e.V
		at := ev.At
		ok, _ := ev.Fields["retry"].(bool)
		if ok {
			hiT := cfg.Tenant.Ratio*float64(countIn(tenantAdmits[ev.Tenant], at.Add(-cfg.Window), at)) + cfg.Tenant.MinPerSecond*span
			hiF := cfg.Fleet.Ratio*float64(countIn(admits, at.Add(-cfg.Window), at)) + cfg.Fleet.MinPerSecond*span
			if float64(usedTenant[ev.Tenant]+1) > hiT {
				t.Errorf("retry of %s granted beyond tenant %s's budget: retry %d, allowance at most %.1f", ev.RequestID, ev.Tenant, usedTenant[ev.Tenant]+1, hiT)
			}
			if float64(usedFleet+1) > hiF {
				t.Errorf("retry of %s granted beyond the fleet budget: retry %d, allowance at most %.1f", ev.RequestID, usedFleet+1, hiF)
			}
			usedTenant[ev.Tenant]++
			usedFleet++
			rep.allowed++
			continue
		}
		scope, _ := ev.Fields["scope"].(string)
		switch scope {
		case "tenant", "fleet":
			rep.refusedBudget++
			from, to := at.Add(-50*time.Second), at.Add(-time.Second)
			loT := cfg.Tenant.Ratio*float64(countIn(tenantAdmits[ev.Tenant], from, to)) + cfg.Tenant.MinPerSecond*span
			loF := cfg.Fleet.Ratio*float64(countIn(admits, from, to)) + cfg.Fleet.MinPerSecond*span
			if float64(usedTenant[ev.Tenant]+1) <= loT && float64(usedFleet+1) <= loF {
				t.Errorf("retry of %s refused for budget (%s) with tenant %s at %d of at least %.1f and the fleet at %d of at least %.1f: %s",
					ev.RequestID, scope, ev.Tenant, usedTenant[ev.Tenant], loT, usedFleet, loF, ev.Reason)
			}
		case "":
			rep.refusedDeadline++
		default:
			rep.refusedOther++
		}
	}
	for tn, ts := range tenantAdmits {
		rep.byTenant[tn] = [2]int{len(ts), usedTenant[tn]}
	}
	return rep
}
