package faulttest

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/switchyard-ai/switchyard/schemas"
)

// TestDegradedWorkerStarved: four workers, one of them sick from the
// start (every step 6x slower, half its requests answered with
// backend_error). Its circuit breaker opens on errors and latency
// outliers; from 10 s after it first received work it gets under 5 % of
// placements (probes only), and nothing is lost or answered twice.
func TestDegradedWorkerStarved(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the system as separate processes")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	const sick = "w4"
	s := launch(ctx, t, sysConfig{natsNodes: 1, admitters: 1, routers: 1, workers: 4,
		workerArgs: map[int][]string{4: {"--fault-slowdown", "6", "--fault-error-rate", "0.5", "--fault-seed", "11"}}})
	if !s.workers[3].Contains("FAULT INJECTION") {
		t.Fatalf("%s did not log its injected fault:\n%s", sick, s.workers[3].Tail(5))
	}
	_, js := s.observer()
	lg := s.loadgen(12, 20*time.Second)
	sum := summary(ctx, t, lg)
	if sum.Lost != 0 || sum.Duplicates != 0 || !sum.Check() || sum.Completed == 0 {
		t.Fatalf("with a degraded worker: %+v; want lost 0, duplicates 0, completed > 0, counts adding up", sum)
	}
	rec := s.recorded(ctx, js)
	if n := rec.streamDuplicates(); n != 0 {
		t.Fatalf("%d request ids have more than one result on the RESULTS stream", n)
	}
	placed := rec.eventsOf("placed")
	var bad, last time.Time
	for _, e := range placed {
		if e.V.WorkerID == sick && bad.IsZero() {
			bad = e.V.At
		}
		last = e.V.At
	}
	if bad.IsZero() {
		t.Fatalf("%s never received work: the test did not exercise a degraded worker", sick)
	}
	for _, e := range rec.eventsOf("breaker_open") {
		if e.V.WorkerID == sick {
			t.Logf("breaker opened on %s %s after its first placement: %s", sick, e.V.At.Sub(bad).Round(time.Millisecond), e.V.Reason)
			break
		}
	}
	from := bad.Add(10 * time.Second)
	if last.Sub(from) < 5*time.Second {
		t.Fatalf("only %s of placements after the 10 s mark; the load is too short to judge", last.Sub(from))
	}
	shares, total := workerShares(rec, bad, from)
	t.Logf("first 10 s after %s went bad: %d placements: %s", sick, total, fmtShares(shares, total))
	shares, total = workerShares(rec, from, last.Add(time.Nanosecond))
	t.Logf("from 10 s after %s went bad (%s): %d placements: %s", sick, last.Sub(from).Round(time.Second), total, fmtShares(shares, total))
	if share := float64(shares[sick]) / float64(max(1, total)); share >= 0.05 || total < 50 {
		t.Fatalf("%s received %d of %d placements (%.1f%%) from 10 s after going bad; want < 5 %% of at least 50", sick, shares[sick], total, 100*share)
	}
	// Its errors were explicit and blamed on it.
	backend := 0
	for _, rs := range rec.finals() {
		if r := rs[0]; r.Error != nil && r.Error.Code == schemas.CodeBackendError {
			if r.WorkerID != sick {
				t.Errorf("%s: backend_error from healthy worker %s", r.ID, r.WorkerID)
			}
			backend++
		}
	}
	t.Logf("backend_error results (all from %s): %d; errors by code: %v", sick, backend, sum.ErrorsByCode)
}

// TestHalfTheWorkersDie: four workers under load; SIGKILL two of them at
// once. Their in-flight requests are re-placed or failed fast; retries
// stay within the budget (10 % of recent first attempts plus the floor,
// per tenant and fleet-wide); nothing is lost or answered twice.
func TestHalfTheWorkersDie(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the system as separate processes")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	s := launch(ctx, t, sysConfig{natsNodes: 1, admitters: 1, routers: 1, workers: 4})
	nc, js := s.observer()
	open1, open2 := watchInflight(t, nc, "w1"), watchInflight(t, nc, "w2")
	// One tenant, so the per-tenant budget is the one that binds.
	lg := s.loadgen(16, 10*time.Second, "--tenants", "solo")
	start := time.Now()
	for time.Since(start) < 2500*time.Millisecond || (open1()+open2() < 4 && time.Since(start) < 8*time.Second) {
		time.Sleep(20 * time.Millisecond)
	}
	held := open1() + open2()
	s.workers[0].Kill()
	s.workers[1].Kill()
	killed := time.Now()
	t.Logf("SIGKILL w1 and w2 at +%s holding %d requests without a result", killed.Sub(start).Round(time.Millisecond), held)
	sum := summary(ctx, t, lg)
	if sum.Lost != 0 || sum.Duplicates != 0 || !sum.Check() || sum.Completed == 0 {
		t.Fatalf("after losing half the workers: %+v; want lost 0, duplicates 0, completed > 0, counts adding up", sum)
	}
	rec := s.recorded(ctx, js)
	if n := rec.streamDuplicates(); n != 0 {
		t.Fatalf("%d request ids have more than one result on the RESULTS stream", n)
	}
	affected := checkWorkerLoss(t, rec, map[string]time.Time{"w1": killed, "w2": killed})
	b := checkRetryBudget(t, rec)
	t.Logf("retry decisions: %d granted, %d refused for budget, %d for the deadline, %d other; %d first attempts; per tenant [requests retries]: %v",
		b.allowed, b.refusedBudget, b.refusedDeadline, b.refusedOther, b.requests, fmt.Sprint(b.byTenant))
	if b.allowed+b.refusedBudget+b.refusedDeadline+b.refusedOther < len(affected) {
		t.Errorf("%d affected requests but only %d retry decisions", len(affected), b.allowed+b.refusedBudget+b.refusedDeadline+b.refusedOther)
	}
}
