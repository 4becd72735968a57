package faulttest

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/switchyard-ai/switchyard/loadgen/tally"
)

var bin string

func TestMain(m *testing.M) {
	code := func() int {
		for _, a := range os.Args {
			if a == "-test.short=true" || a == "-test.short" {
				return m.Run()
			}
		}
		dir, err := os.MkdirTemp("", "switchyard-faulttest-")
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		defer os.RemoveAll(dir)
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		bin, err = Build(ctx, filepath.Join("..", "..", ".."), dir)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		return m.Run()
	}()
	os.Exit(code)
}

func summary(ctx context.Context, t *testing.T, lg *Proc) tally.Summary {
	t.Helper()
	if err := lg.Wait(ctx); err != nil {
		t.Fatalf("loadgen: %v\n%s", err, lg.Tail(20))
	}
	var sum tally.Summary
	line := lg.LastLine()
	if err := json.Unmarshal([]byte(line), &sum); err != nil {
		t.Fatalf("loadgen's last line is not its JSON summary: %v: %q", err, line)
	}
	t.Logf("loadgen summary: %s", line)
	return sum
}

// TestRouterKill: two routers, one active through the KV lease; SIGKILL the
// active one mid-load. The standby takes over; no request is lost or
// answered twice.
func TestRouterKill(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the system as separate processes")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	s := startSystem(ctx, t, 2, 3)
	active := s.leader(ctx)
	lg := s.loadgen(8, 6*time.Second)
	time.Sleep(2500 * time.Millisecond)
	active.Kill()
	killed := time.Now()
	standby := s.takeover(ctx, active)
	took := time.Since(killed)
	t.Logf("standby router %s took over %s after SIGKILL of %s", standby.Name, took.Round(10*time.Millisecond), active.Name)
	// The bound is 5 s; the assertion leaves room for a loaded CI
	// machine, the log line above carries the figure.
	if took > 15*time.Second {
		t.Fatalf("takeover took %s", took)
	}
	sum := summary(ctx, t, lg)
	if sum.Lost != 0 || sum.Duplicates != 0 || !sum.Check() || sum.Completed == 0 {
		t.Fatalf("after a router kill: %+v; want lost 0, duplicates 0, completed > 0, counts adding up", sum)
	}
	if n := sum.Failed; n > 0 {
		t.Logf("failed with explicit errors: %d (%v)", n, sum.ErrorsByCode)
	}
}

// TestRouterAndWorkerKill: two routers and three workers; SIGKILL the
// active router and, in the same instant, a worker holding requests the
// dead router dispatched. The standby must adopt dispatches whose worker
// is gone as well as those whose worker lives: it learns in-flight work
// from the journal, notices the worker's silence, and re-places each of
// its requests once (or fails it with an explicit code) — nothing lost,
// nothing answered twice.
func TestRouterAndWorkerKill(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the system as separate processes")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	s := startSystem(ctx, t, 2, 3)
	nc, js := s.observer()
	active := s.leader(ctx)
	const victim = "w1"
	open := watchInflight(t, nc, victim)
	lg := s.loadgen(10, 10*time.Second)
	start := time.Now()
	held := untilHolding(start, open)
	active.Kill()
	s.workers[0].Kill()
	killed := time.Now()
	t.Logf("SIGKILL router %s and worker %s at +%s (%s holding %d requests without a result)",
		active.Name, victim, killed.Sub(start).Round(time.Millisecond), victim, held)
	standby := s.takeover(ctx, active)
	t.Logf("standby %s took over after %s", standby.Name, time.Since(killed).Round(10*time.Millisecond))

	sum := summary(ctx, t, lg)
	if sum.Lost != 0 || sum.Duplicates != 0 || !sum.Check() || sum.Completed == 0 {
		t.Fatalf("after a router and a worker kill: %+v; want lost 0, duplicates 0, completed > 0, counts adding up", sum)
	}
	rec := s.recorded(ctx, js)
	if n := rec.streamDuplicates(); n != 0 {
		t.Fatalf("%d request ids have more than one result on the RESULTS stream", n)
	}
	affected := checkWorkerLoss(t, rec, map[string]time.Time{victim: killed})
	t.Logf("%d requests were on %s; errors by code: %v", len(affected), victim, sum.ErrorsByCode)
}
