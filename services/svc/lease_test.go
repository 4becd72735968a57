package svc

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/switchyard-ai/switchyard/internal/testkit/bustest"
)

// TestLeaseOneLeaderAndHandover runs two contenders on a real server: only
// one works at a time, a leader whose work fails steps down instead of
// exiting, and the other takes over within the TTL.
func TestLeaseOneLeaderAndHandover(t *testing.T) {
	js := bustest.Start(t).JS
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ttl := 900 * time.Millisecond
	kv, err := LeaseKV(ctx, js, ttl, 1)
	if err != nil {
		t.Fatal(err)
	}
	var active, maxActive, aRuns, bRuns atomic.Int32
	work := func(runs *atomic.Int32, failFirst bool) func(context.Context) error {
		return func(c context.Context) error {
			n := active.Add(1)
			defer active.Add(-1)
			if n > maxActive.Load() {
				maxActive.Store(n)
			}
			if runs.Add(1) == 1 && failFirst {
				time.Sleep(100 * time.Millisecond)
				return errors.New("jetstream unavailable")
			}
			<-c.Done()
			return nil
		}
	}
	actx, stopA := context.WithCancel(ctx)
	doneA := make(chan error, 1)
	go func() { doneA <- RunAsLeader(actx, kv, "router", "a", ttl, nil, work(&aRuns, true)) }()
	time.Sleep(50 * time.Millisecond)
	doneB := make(chan error, 1)
	go func() { doneB <- RunAsLeader(ctx, kv, "router", "b", ttl, nil, work(&bRuns, false)) }()

	deadline := time.Now().Add(10 * time.Second)
	for bRuns.Load() == 0 && aRuns.Load() < 2 {
		if time.Now().After(deadline) {
			t.Fatalf("nobody took over after a's work failed (a %d, b %d)", aRuns.Load(), bRuns.Load())
		}
		time.Sleep(20 * time.Millisecond)
	}
	select {
	case err := <-doneA:
		t.Fatalf("a exited after its work failed: %v", err)
	default:
	}
	stopA()
	if err := <-doneA; err != nil {
		t.Fatalf("a: %v", err)
	}
	// Whoever holds it now, b must end up leading once a is gone.
	deadline = time.Now().Add(5 * time.Second)
	for bRuns.Load() == 0 {
		if time.Now().After(deadline) {
			t.Fatal("b never led")
		}
		time.Sleep(20 * time.Millisecond)
	}
	if maxActive.Load() > 1 {
		t.Fatalf("%d leaders at once", maxActive.Load())
	}
	cancel()
	<-doneB
}
