package router_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/switchyard-ai/switchyard/internal/core/routing"
	"github.com/switchyard-ai/switchyard/internal/testkit/bustest"
	"github.com/switchyard-ai/switchyard/schemas"
	"github.com/switchyard-ai/switchyard/services/svc"
	"github.com/switchyard-ai/switchyard/subjects"
)

// TestDrainedWorkerDeparts: a worker that drains and then stops
// heartbeating (every scale-down) leaves the fleet with a worker_departed
// event; it is not a breaker transition, and the router keeps running.
// The event once fell to the breaker metric's branch and panicked the
// router at the live autoscaler's first release.
func TestDrainedWorkerDeparts(t *testing.T) {
	env := bustest.StartProvisioned(t, subjects.StreamOptions{})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	events, err := env.NC.SubscribeSync(subjects.Event("router", routing.EventWorkerDeparted))
	if err != nil {
		t.Fatal(err)
	}
	tr := startRouter(t, ctx, env, "router-departed")

	beat := func(draining bool) {
		hb := schemas.Heartbeat{V: schemas.Version, WorkerID: "w1", Pool: "p", GPU: "h100", MaxBatch: 8, Draining: draining, SentAt: time.Now()}
		m, err := svc.Encode(subjects.Heartbeat("p", hb.WorkerID), schemas.JSON, hb, "")
		if err != nil {
			t.Fatal(err)
		}
		if err := env.NC.PublishMsg(m); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 10 {
		beat(i >= 5) // serving, then draining
		time.Sleep(100 * time.Millisecond)
	}
	// Silence: past the staleness bound the router decides it has left.
	m, err := events.NextMsg(15 * time.Second)
	if err != nil {
		t.Fatalf("no worker_departed event for a drained, silent worker: %v", err)
	}
	evs, err := svc.DecodeEvents(m.Header, m.Data)
	if err != nil || len(evs) == 0 || evs[0].WorkerID != "w1" {
		t.Fatalf("event %v %+v", err, evs)
	}
	select {
	case <-tr.exited:
		t.Fatalf("the router stopped after the departure: %v", tr.err)
	case <-time.After(200 * time.Millisecond):
	}
	if text := tr.scrape(); !strings.Contains(text, `switchyard_breaker_transitions_total{to="open"} 0`+"\n") {
		t.Errorf("a departure counted as a breaker transition:\n%s", grep(text, "switchyard_breaker"))
	}
}
