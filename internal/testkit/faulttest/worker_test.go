package faulttest

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/switchyard-ai/switchyard/internal/core/routing"
	"github.com/switchyard-ai/switchyard/schemas"
)

// settleSlack is what the deadline check allows beyond routing.OverdueGrace:
// the router sweeps overdue and stale work every 500 ms, and the result
// must then be stored through the ledger on a loaded 2-core machine.
const settleSlack = 1500 * time.Millisecond

// TestWorkerKillMidBatch: three workers under load; SIGKILL one while it
// holds several requests. The router notices the silence (breaker opens
// for staleness), re-places each of its in-flight requests exactly once
// with Attempt+1 and the dead worker excluded — or fails it fast with an
// explicit code — and nothing is lost or answered twice.
func TestWorkerKillMidBatch(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the system as separate processes")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	s := launch(ctx, t, sysConfig{natsNodes: 1, admitters: 1, routers: 1, workers: 3})
	nc, js := s.observer()
	const victim = "w1"
	open := watchInflight(t, nc, victim)
	lg := s.loadgen(10, 10*time.Second)
	start := time.Now()
	// Kill it mid-batch: after the load has settled, once it holds work.
	held := untilHolding(start, open)
	s.workers[0].Kill()
	killed := time.Now()
	t.Logf("SIGKILL %s at +%s holding %d requests without a result", victim, killed.Sub(start).Round(time.Millisecond), held)

	sum := summary(ctx, t, lg)
	if sum.Lost != 0 || sum.Duplicates != 0 || !sum.Check() || sum.Completed == 0 {
		t.Fatalf("after a worker kill: %+v; want lost 0, duplicates 0, completed > 0, counts adding up", sum)
	}
	rec := s.recorded(ctx, js)
	if n := rec.streamDuplicates(); n != 0 {
		t.Fatalf("%d request ids have more than one result on the RESULTS stream", n)
	}
	checkWorkerLoss(t, rec, map[string]time.Time{victim: killed})
	b := checkRetryBudget(t, rec)
	t.Logf("retry decisions: %d granted, %d refused for budget, %d for the deadline, %d other (%d first attempts)",
		b.allowed, b.refusedBudget, b.refusedDeadline, b.refusedOther, b.requests)
}

// checkWorkerLoss checks the requests the dead workers held: each has one
// final result, from a live worker on its next attempt or an explicit
// error, within its deadline + OverdueGrace; each was re-placed at most
// once per loss, never onto a dead worker; and each decision is recorded
// as one retry event. It returns the affected ids.
func checkWorkerLoss(t *testing.T, rec recorded, dead map[string]time.Time) []string {
	t.Helper()
	finals := rec.finals()
	type req struct {
		adm        schemas.Admitted
		dispatches []schemas.Dispatch
	}
	reqs := map[string]*req{}
	for _, d := range rec.dispatches {
		id := d.V.Admitted.Request.ID
		r := reqs[id]
		if r == nil {
			r = &req{adm: d.V.Admitted}
			reqs[id] = r
		}
		r.dispatches = append(r.dispatches, d.V)
	}
	retries := map[string]int{}
	for _, e := range rec.eventsOf("retry") {
		if _, ok := dead[e.V.WorkerID]; ok {
			retries[e.V.RequestID]++
			if e.V.Fields["retry"] != true {
				t.Logf("retry refused for %s (lost on %s): %s", e.V.RequestID, e.V.WorkerID, e.V.Reason)
			}
		}
	}
	// When the router declared each dead worker lost.
	lostAt := map[string]time.Time{}
	for _, e := range rec.eventsOf("breaker_open") {
		if _, ok := dead[e.V.WorkerID]; ok && e.V.Fields["cause"] == "stale" && lostAt[e.V.WorkerID].IsZero() {
			lostAt[e.V.WorkerID] = e.V.At
		}
	}
	for w, at := range dead {
		if lostAt[w].IsZero() {
			t.Errorf("no breaker_open (stale) event for dead worker %s", w)
		} else {
			t.Logf("router declared %s lost %s after its SIGKILL", w, lostAt[w].Sub(at).Round(time.Millisecond))
		}
	}
	var affected []string
	replaced, failed := 0, map[string]int{}
	worst := -time.Hour
	for id, r := range reqs {
		res := finals[id]
		if len(res) == 1 && res[0].Error == nil {
			if _, ok := dead[res[0].WorkerID]; ok {
				continue // finished on its worker before that worker died
			}
		}
		// The dead workers this request was dispatched to, and each
		// attempt's worker, in attempt order.
		holders := map[string]bool{}
		byAttempt := map[int]schemas.Dispatch{}
		dup := false
		for _, d := range r.dispatches {
			if _, ok := dead[d.WorkerID]; ok {
				holders[d.WorkerID] = true
			}
			if _, seen := byAttempt[d.Admitted.Attempt]; seen {
				dup = true
			}
			byAttempt[d.Admitted.Attempt] = d
		}
		if len(holders) == 0 {
			continue
		}
		affected = append(affected, id)
		if dup {
			t.Errorf("%s: an attempt was dispatched twice", id)
		}
		if len(res) != 1 {
			t.Errorf("%s (held by a dead worker): %d final results, want 1", id, len(res))
			continue
		}
		f := res[0]
		if retries[id] != len(holders) {
			t.Errorf("%s: %d retry decisions for %d dead holders, want one per loss", id, retries[id], len(holders))
		}
		if margin := f.FinishedAt.Sub(r.adm.Deadline); margin > worst {
			worst = margin
		}
		if late := f.FinishedAt.Sub(r.adm.Deadline.Add(routing.OverdueGrace + settleSlack)); late > 0 {
			t.Errorf("%s: final result (%s) at %s, %s past deadline + %s", id, f.Status, f.FinishedAt.Format(time.RFC3339Nano), late, routing.OverdueGrace)
		}
		for a, d := range byAttempt {
			if a == 0 {
				continue
			}
			prev, ok := byAttempt[a-1]
			if !ok {
				t.Errorf("%s: attempt %d without attempt %d", id, a, a-1)
				continue
			}
			if !contains(d.Admitted.ExcludeWorkers, prev.WorkerID) {
				t.Errorf("%s: attempt %d does not exclude %s, which lost attempt %d (excludes %v)", id, a, prev.WorkerID, a-1, d.Admitted.ExcludeWorkers)
			}
			if at := lostAt[d.WorkerID]; !at.IsZero() && d.PlacedAt.After(at) {
				t.Errorf("%s: attempt %d placed on %s %s after the router declared it lost", id, a, d.WorkerID, d.PlacedAt.Sub(at))
			}
		}
		switch {
		case f.Status == schemas.StatusOK:
			if _, ok := dead[f.WorkerID]; ok || f.Attempt == 0 {
				t.Errorf("%s: completed by %s on attempt %d, want a live worker on a retry", id, f.WorkerID, f.Attempt)
			}
			replaced++
		case f.Error == nil || f.Error.Code == "":
			t.Errorf("%s: %s without an error code", id, f.Status)
		default:
			failed[f.Error.Code]++
		}
	}
	sort.Strings(affected)
	if len(affected) == 0 {
		t.Fatal("the dead workers held no request: the test did not exercise a loss")
	}
	t.Logf("affected by the loss: %d; re-placed and completed: %d; failed explicitly: %v; latest final result vs deadline: %+.2fs (bound +%s)",
		len(affected), replaced, failed, worst.Seconds(), routing.OverdueGrace+settleSlack)
	return affected
}

func contains(xs []string, x string) bool {
	for _, v := range xs {
		if v == x {
			return true
		}
	}
	return false
}

// workerShares counts placed events per worker in [from, to).
func workerShares(rec recorded, from, to time.Time) (map[string]int, int) {
	out, total := map[string]int{}, 0
	for _, e := range rec.eventsOf("placed") {
		if e.V.At.Before(from) || !e.V.At.Before(to) {
			continue
		}
		out[e.V.WorkerID]++
		total++
	}
	return out, total
}

func fmtShares(m map[string]int, total int) string {
	var ks []string
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	var b strings.Builder
	for _, k := range ks {
		fmt.Fprintf(&b, "%s=%d (%.1f%%) ", k, m[k], 100*float64(m[k])/float64(max(1, total)))
	}
	return strings.TrimSpace(b.String())
}
