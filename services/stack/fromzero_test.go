package stack

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/switchyard-ai/switchyard/internal/core/control"
	"github.com/switchyard-ai/switchyard/internal/core/routing"
	"github.com/switchyard-ai/switchyard/schemas"
	"github.com/switchyard-ai/switchyard/services/client"
	"github.com/switchyard-ai/switchyard/services/svc"
	"github.com/switchyard-ai/switchyard/subjects"
)

// TestScaleFromZeroHoldsABurst is issue 17's done-when test on the real
// embedded server: a pool at Min 0 with no worker at all, a burst of 20
// requests whose deadlines allow the cold start. The router holds them
// (none fails for lack of a worker), the controller orders the pool's
// replicas once for the burst, the local scaler starts the worker, and
// every request is served once it heartbeats.
func TestScaleFromZeroHoldsABurst(t *testing.T) {
	fast := control.Config{Interval: 200 * time.Millisecond, UpCooldown: 500 * time.Millisecond}
	// SpeedUp 20 compresses the 29.4 s cold load to 1.5 s of wall time.
	st := startStack(t, Config{Fleet: []WorkerSpec{DefaultWorker}, SpeedUp: 20,
		Control: &ControlConfig{Max: 8, FromZero: true, Control: fast}})
	if ids := st.WorkerIDs(); len(ids) != 0 {
		t.Fatalf("workers %v at start, want none", ids)
	}
	pool := control.PoolKey("h100", "llama-3.1-8b")
	nc, err := st.Connect("from-zero-test")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var ups []string
	held := map[string]bool{}
	watch := func(subject string, fn func(ev schemas.Event)) {
		sub, err := nc.Subscribe(subject, func(m *nats.Msg) {
			evs, _ := svc.DecodeEvents(m.Header, m.Data)
			mu.Lock()
			defer mu.Unlock()
			for _, ev := range evs {
				fn(ev)
			}
		})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = sub.Unsubscribe() })
	}
	watch(subjects.Event("controller", control.KindReplicas), func(ev schemas.Event) {
		from, _ := strconv.Atoi(fmt.Sprint(ev.Fields["from"]))
		to, _ := strconv.Atoi(fmt.Sprint(ev.Fields["to"]))
		if ev.Fields["target"] == pool && to > from {
			ups = append(ups, fmt.Sprintf("%d->%d: %s", from, to, ev.Reason))
		}
	})
	watch(subjects.Event("router", routing.EventHeldForWarmup), func(ev schemas.Event) { held[ev.RequestID] = true })
	cl, err := client.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var ids []string
	for i := 0; i < 20; i++ {
		id := fmt.Sprintf("fz-%02d", i)
		ids = append(ids, id)
		if _, err := cl.Submit(ctx, "acme", &schemas.Request{ID: id, Model: "llama-3.1-8b", Prompt: "warm me up", MaxTokens: 32, DeadlineMs: 50000}); err != nil {
			t.Fatal(err)
		}
	}
	for _, id := range ids {
		r, err := cl.Result(ctx, "acme", id)
		if err != nil {
			t.Fatalf("%s: %v", id, err)
		}
		if r.Status != schemas.StatusOK || r.WorkerID == "" {
			t.Fatalf("%s: status %s on %q %+v: want served after the cold start", id, r.Status, r.WorkerID, r.Error)
		}
	}
	// A few more decisions after the burst is served: none orders more.
	time.Sleep(5 * fast.Interval)
	mu.Lock()
	defer mu.Unlock()
	if len(ups) != 1 {
		t.Fatalf("%d scale-ups of %s for one burst, want 1: %q", len(ups), pool, ups)
	}
	if len(held) == 0 {
		t.Fatal("no request was recorded held_for_warmup")
	}
	if !strings.Contains(ups[0], "held for a cold start") {
		t.Fatalf("the scale-up was not sized from the held demand: %s", ups[0])
	}
	if n := len(st.WorkerIDs()); n < 1 {
		t.Fatalf("%d workers after the burst, want the ones ordered", n)
	}
	t.Logf("scale-up: %s; %d of 20 held for the warm-up; workers %v", ups[0], len(held), st.WorkerIDs())
}
