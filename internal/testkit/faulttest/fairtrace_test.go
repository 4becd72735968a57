package faulttest

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/switchyard-ai/switchyard/internal/core/queue"
	"github.com/switchyard-ai/switchyard/internal/core/routing"
	"github.com/switchyard-ai/switchyard/schemas"
	"github.com/switchyard-ai/switchyard/services/svc"
	"github.com/switchyard-ai/switchyard/subjects"
)

// fairTrace records the routers' fairness reports as they go out on
// sy.rpc.fair.*, so a run's tenant shares can be traced to the counters
// the routers ordered by: each router's counter per tenant, against the
// weighted tokens the fleet had dispatched to it, at any instant.
type fairTrace struct {
	mu      sync.Mutex
	reports []tracedReport
}

type tracedReport struct {
	at     time.Time
	router string
	rep    queue.Report
}

// traceFairness subscribes nc to every router's fairness reports until
// the test ends.
func traceFairness(t *testing.T, nc *nats.Conn) *fairTrace {
	t.Helper()
	ft := &fairTrace{}
	sub, err := nc.Subscribe(subjects.FairShareAll, func(m *nats.Msg) {
		from, err := subjects.ParseFairShare(m.Subject)
		if err != nil {
			return
		}
		var rep queue.Report
		if err := svc.Decode(m.Header, m.Data, &rep); err != nil {
			return
		}
		ft.mu.Lock()
		ft.reports = append(ft.reports, tracedReport{at: time.Now(), router: from, rep: rep})
		ft.mu.Unlock()
	})
	if err != nil {
		t.Fatalf("subscribe %s: %v", subjects.FairShareAll, err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	return ft
}

// tenantView is one router's latest report of one tenant of a class at an
// instant: its counter and the tokens that router placed for it.
type tenantView struct {
	vt, placed int64
	queued     int
	ok         bool
}

// at returns, per router, the latest report's view of tenant in class
// sent no later than when.
func (ft *fairTrace) at(when time.Time, class, tenant string) map[string]tenantView {
	ft.mu.Lock()
	defer ft.mu.Unlock()
	out := map[string]tenantView{}
	for _, r := range ft.reports {
		if r.at.After(when) {
			break
		}
		v := tenantView{}
		for _, cs := range r.rep.Classes {
			if cs.Class != class {
				continue
			}
			for _, ts := range cs.Tenants {
				if ts.Tenant == tenant {
					v = tenantView{vt: ts.VT, placed: ts.Tokens, queued: ts.Queued, ok: true}
				}
			}
		}
		out[r.router] = v
	}
	return out
}

// log writes the trace of tenants a and b of class: every step from
// start to end, the weighted tokens dispatched to each (from the dispatch
// stream) and their difference, and each router's counters and their
// difference; a counter minus the fleet's dispatched tokens is what lifts
// (and the lag of the reports) added to it.
func (ft *fairTrace) log(t *testing.T, dispatches []record[schemas.Dispatch], class, a, b string, start, end time.Time, step time.Duration, marks ...namedTime) {
	t.Helper()
	ft.mu.Lock()
	n := len(ft.reports)
	ft.mu.Unlock()
	t.Logf("fairness trace (%d reports): +t  dispatched %s/%s (gap)  |  per router: vt %s/%s (gap) vt-dispatched %s/%s", n, a, b, a, b, a, b)
	line := func(label string, when time.Time) {
		var ta, tb int64
		for _, d := range dispatches {
			if d.At.After(when) {
				break
			}
			adm := d.V.Admitted
			switch adm.Tenant {
			case a:
				ta += routing.FairCost(&adm)
			case b:
				tb += routing.FairCost(&adm)
			}
		}
		va, vb := ft.at(when, class, a), ft.at(when, class, b)
		var sb strings.Builder
		for _, r := range []string{"r1", "r2", "r3"} {
			x, y := va[r], vb[r]
			if !x.ok || !y.ok {
				fmt.Fprintf(&sb, "  %s -", r)
				continue
			}
			fmt.Fprintf(&sb, "  %s %d/%d (%+d) %+d/%+d q%d/%d", r, x.vt, y.vt, x.vt-y.vt, x.vt-ta, y.vt-tb, x.queued, y.queued)
		}
		t.Logf("%-8s +%-6s %6d/%6d (%+6d)%s", label, when.Sub(start).Round(10*time.Millisecond), ta, tb, ta-tb, sb.String())
	}
	for when := start; !when.After(end); when = when.Add(step) {
		line("", when)
	}
	for _, m := range marks {
		line(m.name, m.at)
	}
}

// namedTime is an instant the trace marks by name.
type namedTime struct {
	name string
	at   time.Time
}

// logReports writes every report of class sent before until: per router,
// each tenant's tokens placed there, lift, counter and queue.
func (ft *fairTrace) logReports(t *testing.T, class string, start, until time.Time) {
	t.Helper()
	ft.mu.Lock()
	defer ft.mu.Unlock()
	for _, r := range ft.reports {
		if r.at.After(until) {
			break
		}
		var sb strings.Builder
		for _, cs := range r.rep.Classes {
			if cs.Class != class {
				continue
			}
			fmt.Fprintf(&sb, " placed %d vt %d q%d |", cs.Placed, cs.VT, cs.Queued)
			for _, ts := range cs.Tenants {
				fmt.Fprintf(&sb, " %s tok %d lift %d vt %d q%d", ts.Tenant, ts.Tokens, ts.Lift, ts.VT, ts.Queued)
			}
		}
		t.Logf("report %s +%s:%s", r.router, r.at.Sub(start).Round(time.Millisecond), sb.String())
	}
}
