package faulttest

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/switchyard-ai/switchyard/internal/adapter/ledger"
	"github.com/switchyard-ai/switchyard/internal/core/routing"
	"github.com/switchyard-ai/switchyard/schemas"
	"github.com/switchyard-ai/switchyard/services/client"
	"github.com/switchyard-ai/switchyard/subjects"
)

// TestPausedWorkerOneLiveResult: a worker frozen (SIGSTOP) mid-generation
// past its request's deadline and the router's overdue grace, then resumed,
// finishes the request it held and publishes its result — after the router
// has answered it. A live subscriber (`nats sub sy.result.acme.>`) receives
// exactly one final result for the id: the resumed worker's is refused by
// the ledger and, published only on sy.final.…, never reaches it.
func TestPausedWorkerOneLiveResult(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the system as separate processes")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	s := launch(ctx, t, sysConfig{natsNodes: 1, admitters: 1, routers: 1, workers: 1})
	nc, _ := s.observer()

	var mu sync.Mutex
	var live []*nats.Msg
	sub, err := nc.Subscribe(subjects.Result("acme", ">"), func(m *nats.Msg) { mu.Lock(); live = append(live, m); mu.Unlock() })
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	suppressed := make(chan struct{}, 4)
	evs, err := nc.Subscribe(subjects.Event("worker", ledger.EventDuplicateSuppressed), func(*nats.Msg) { suppressed <- struct{}{} })
	if err != nil {
		t.Fatal(err)
	}
	defer evs.Unsubscribe()
	dispatched := make(chan struct{}, 4)
	ds, err := nc.Subscribe(subjects.Dispatch("w1"), func(*nats.Msg) { dispatched <- struct{}{} })
	if err != nil {
		t.Fatal(err)
	}
	defer ds.Unsubscribe()
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	cl, err := client.New(nc, client.WithJSON())
	if err != nil {
		t.Fatal(err)
	}
	const id = "paused-1"
	// A deadline placement accepts with room: the answer comes from the
	// freeze, not from a tight target.
	deadline := 8 * time.Second
	// 400 tokens take a simulated H100 several seconds: the worker is still
	// generating when it is frozen.
	if _, err := cl.Submit(ctx, "acme", &schemas.Request{ID: id, Model: "llama-3.1-8b", Prompt: "a long answer, please", MaxTokens: 400, DeadlineMs: deadline.Milliseconds()}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-dispatched:
	case <-time.After(20 * time.Second):
		mu.Lock()
		defer mu.Unlock()
		for _, m := range live {
			t.Logf("result: %s", m.Data)
		}
		t.Fatal("never dispatched")
	}
	time.Sleep(300 * time.Millisecond) // mid-generation
	s.workers[0].Pause()
	paused := time.Now()
	t.Logf("SIGSTOP w1 holding %s", id)

	// The router answers the request once it is overdue.
	count := func() int { mu.Lock(); defer mu.Unlock(); return len(live) }
	for count() == 0 {
		if time.Since(paused) > deadline+routing.OverdueGrace+20*time.Second {
			s.workers[0].Resume()
			t.Fatal("the router never answered the frozen worker's request")
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Logf("answered at +%s while w1 was frozen", time.Since(paused).Round(time.Millisecond))
	s.workers[0].Resume()
	select {
	case <-suppressed:
	case <-time.After(30 * time.Second):
		t.Fatalf("the resumed worker never tried to publish its result\n%s", s.workers[0].Tail(20))
	}
	time.Sleep(time.Second) // a second delivery, were there one, would be here by now
	mu.Lock()
	defer mu.Unlock()
	if len(live) != 1 {
		var got []string
		for _, m := range live {
			got = append(got, string(m.Data))
		}
		t.Fatalf("the live subscriber received %d results for %s, want 1:\n%s", len(live), id, strings.Join(got, "\n"))
	}
	res, err := client.DecodeResult(live[0].Header, live[0].Data)
	if err != nil || res.ID != id || res.WorkerID == "w1" && res.Status == schemas.StatusOK {
		t.Fatalf("live result %+v (%v): want the router's answer, not the frozen worker's late one", res, err)
	}
}
