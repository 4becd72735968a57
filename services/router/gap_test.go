package router_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/switchyard-ai/switchyard/internal/core/catalog"
	"github.com/switchyard-ai/switchyard/internal/core/routing"
	"github.com/switchyard-ai/switchyard/internal/testkit/bustest"
	"github.com/switchyard-ai/switchyard/schemas"
	"github.com/switchyard-ai/switchyard/services/router"
	"github.com/switchyard-ai/switchyard/services/svc"
	"github.com/switchyard-ai/switchyard/services/worker"
	"github.com/switchyard-ai/switchyard/subjects"
)

// TestJournalGapBatchesABusyRouter: a router that stored a journal batch
// less than JournalGap ago holds the next batch's inputs and actions until
// the gap ends, so a burst is journaled (and its events and peer bookings
// sent) in one message instead of one per round trip; a router that has
// been quiet for a gap journals and dispatches at once. The gap here is two
// seconds, so that what it holds back is unmistakable on a loaded machine;
// the default is DefaultJournalGap.
func TestJournalGapBatchesABusyRouter(t *testing.T) {
	const gap = 2 * time.Second
	env := bustest.StartProvisioned(t, subjects.StreamOptions{})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	startInstantWorker(t, ctx, env, "w1-h100")
	tr := startRouterWith(t, ctx, env, "router-gap", router.Config{JournalGap: gap})

	// Each result's arrival time, taken as it arrives: the test reads them
	// only after the burst is sent.
	arrivals := make(chan time.Time, 64)
	sub, err := env.NC.Subscribe(subjects.Result("acme", ">"), func(*nats.Msg) { arrivals <- time.Now() })
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	submit := func(id string) {
		t.Helper()
		now := time.Now()
		adm := schemas.Admitted{V: schemas.Version, Tenant: "acme", Priority: schemas.PriorityInteractive, Model: "llama-3.1-8b",
			SubmittedAt: now, Deadline: now.Add(30 * time.Second), PromptTokens: 4,
			Request: schemas.Request{V: schemas.Version, ID: id, Model: "llama-3.1-8b", Prompt: "hello", MaxTokens: 1}}
		m, err := svc.Encode(subjects.Admitted(adm.Priority, subjects.DeadlineBucket(30*time.Second), "acme"), schemas.Msgpack, adm, id)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := env.JS.PublishMsg(ctx, m); err != nil {
			t.Fatal(err)
		}
	}
	result := func(within time.Duration) time.Time {
		t.Helper()
		select {
		case at := <-arrivals:
			return at
		case <-time.After(within):
			t.Fatalf("no result within %s", within)
			return time.Time{}
		}
	}
	// A first request, once the worker's heartbeats have reached the
	// router; then quiet for longer than the gap.
	submit("warm")
	result(20 * time.Second)
	time.Sleep(gap + 200*time.Millisecond)

	sent := time.Now()
	submit("quiet")
	if took := result(10 * time.Second).Sub(sent); took > gap/2 {
		t.Errorf("a request to a router quiet for longer than the gap took %s to answer: the gap held it", took)
	}
	// The burst follows the quiet request's batch by less than the gap.
	const burst = 20
	burstAt := time.Now()
	for i := range burst {
		submit(fmt.Sprintf("burst-%02d", i))
		time.Sleep(10 * time.Millisecond)
	}
	first := result(10 * time.Second)
	for range burst - 1 {
		result(10 * time.Second)
	}
	if held := first.Sub(burstAt); held < gap/2 {
		t.Errorf("the burst's first result came %s after it began: the gap did not hold it", held)
	}
	if err := tr.stop(); err != nil {
		t.Fatalf("router: %v", err)
	}

	// Which journal messages hold the burst's admissions.
	cons, err := env.JS.OrderedConsumer(ctx, subjects.StreamJournal, jetstream.OrderedConsumerConfig{FilterSubjects: []string{subjects.Journal("router", "router-gap")}})
	if err != nil {
		t.Fatal(err)
	}
	withBurst, admitted := 0, 0
	for {
		m, err := cons.Next(jetstream.FetchMaxWait(time.Second))
		if err != nil {
			break
		}
		es, err := routing.DecodeJournal(m.Data())
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, e := range es {
			if e.Kind == routing.InAdmitted && e.AdmittedSeq != 0 {
				n++
			}
		}
		admitted += n
		if n > 0 {
			withBurst++
		}
	}
	if admitted != burst+2 {
		t.Fatalf("%d admissions journaled, want %d", admitted, burst+2)
	}
	// warm, quiet, and the burst in one or two batches (two if the
	// burst's pulls straddle the gap's end).
	if withBurst > 4 {
		t.Errorf("%d journal messages carry the %d admissions: the gap did not batch the burst", withBurst, burst+2)
	}
	t.Logf("%d admissions in %d journal messages; burst held %s", admitted, withBurst, first.Sub(burstAt).Round(time.Millisecond))
}

// startInstantWorker runs a zero-GPU-time worker (bench bus's) until the
// test ends.
func startInstantWorker(t *testing.T, ctx context.Context, env bustest.Env, id string) {
	t.Helper()
	sh, err := svc.New("worker", id, env.NC, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := sh.UseLedger(); err != nil {
		t.Fatal(err)
	}
	w, err := worker.New(sh, worker.Config{ID: id, GPU: "h100", Model: "llama-3.1-8b", Catalog: catalog.Default(), Instant: true})
	if err != nil {
		t.Fatal(err)
	}
	wctx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); w.Run(wctx) }()
	t.Cleanup(func() { stop(); <-done })
}
