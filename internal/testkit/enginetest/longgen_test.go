package enginetest

import (
	"context"
	"fmt"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/switchyard-ai/switchyard/internal/core/catalog"
	"github.com/switchyard-ai/switchyard/internal/testkit/bustest"
	"github.com/switchyard-ai/switchyard/schemas"
	"github.com/switchyard-ai/switchyard/services/svc"
	"github.com/switchyard-ai/switchyard/services/worker"
	"github.com/switchyard-ai/switchyard/subjects"
)

// The worker in front of a real Ollama, alone on a real JetStream: what it
// does with its dispatch consumer while real generations run (issue 29).

// longTokens is a generation of the tiny model that runs for seconds on
// this machine's CPU (20,000 tokens took 15 s; past its context the engine
// shifts it, which is slower per token).
const longTokens = 6000

// engineWorker runs a worker fronting o's model "tiny" with a short ack
// wait; stop is its SIGTERM, and returns once Run has.
func engineWorker(t *testing.T, env bustest.Env, o *Ollama, id string, ackWait time.Duration) (stop func()) {
	t.Helper()
	// A drain bound far past any generation here: on a loaded 2-core CI
	// machine four real generations outran the 30 s default, and the
	// drain test checks that the worker waits, not how fast the CPU is.
	cfg := worker.Config{ID: id, GPU: "cpu", Model: "tiny", Backend: "openai", OpenAIURL: o.URL,
		AckWait: ackWait, HeartbeatInterval: 100 * time.Millisecond, DrainTimeout: 3 * time.Minute}
	cat, err := worker.LearnServedModel(context.Background(), catalog.Default(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Catalog = cat
	sh, err := svc.New("worker", id, env.NC, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	w, err := worker.New(sh, cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	stopped := false
	stop = func() {
		if stopped {
			return
		}
		stopped = true
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	}
	t.Cleanup(stop)
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if _, err := env.JS.Consumer(ctx, subjects.StreamDispatch, subjects.WorkerConsumer(id)); err == nil {
			return stop
		}
		if time.Now().After(deadline) {
			t.Fatal("the worker's consumer never appeared")
		}
	}
}

func dispatchTo(t *testing.T, env bustest.Env, worker, id string, maxTokens int) {
	t.Helper()
	now := time.Now()
	d := schemas.Dispatch{V: schemas.Version, WorkerID: worker, PlacedAt: now, Admitted: schemas.Admitted{
		Tenant: "acme", Model: "tiny", Priority: schemas.PriorityStandard, PromptTokens: 2, SubmittedAt: now,
		Deadline: now.Add(2 * time.Minute), Request: schemas.Request{ID: id, Model: "tiny", Prompt: "hi", MaxTokens: maxTokens}}}
	m, err := svc.Encode(subjects.Dispatch(worker), schemas.Msgpack, d, id+"-a0")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := env.JS.PublishMsg(context.Background(), m); err != nil {
		t.Fatal(err)
	}
}

// okResults counts the OK final results published for tenant acme.
func okResults(t *testing.T, nc *nats.Conn) *atomic.Int32 {
	var n atomic.Int32
	sub, err := nc.Subscribe(subjects.Final("acme", "*"), func(m *nats.Msg) {
		var res schemas.Result
		if svc.Decode(m.Header, m.Data, &res) == nil && res.Status == schemas.StatusOK && !res.Simulated {
			n.Add(1)
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sub.Unsubscribe() })
	return &n
}

func consumerInfo(t *testing.T, env bustest.Env, worker string) (delivered uint64, pending int) {
	t.Helper()
	cons, err := env.JS.Consumer(context.Background(), subjects.StreamDispatch, subjects.WorkerConsumer(worker))
	if err != nil {
		t.Fatal(err)
	}
	info, err := cons.Info(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return info.Delivered.Consumer, info.NumAckPending
}

// A real generation longer than twice the dispatch's ack wait is delivered
// once and acked once: the worker sends in-progress acks while it runs.
func TestLongGenerationOnOllamaIsNotRedelivered(t *testing.T) {
	o := startEngine(t, 1, "tiny")
	env := bustest.StartProvisioned(t, subjects.StreamOptions{})
	results := okResults(t, env.NC)
	const ackWait = time.Second
	engineWorker(t, env, o, "long-0", ackWait)
	start := time.Now()
	dispatchTo(t, env, "long-0", "long-gen", longTokens)
	for results.Load() == 0 {
		if time.Since(start) > time.Minute {
			t.Fatal("no result in a minute")
		}
		time.Sleep(20 * time.Millisecond)
	}
	took := time.Since(start)
	if took < 2*ackWait {
		t.Fatalf("the generation took %s, under twice the ack wait: the test proves nothing (raise longTokens)", took)
	}
	time.Sleep(ackWait + 200*time.Millisecond) // a redelivery would show now
	delivered, pending := consumerInfo(t, env, "long-0")
	if delivered != 1 || pending != 0 || results.Load() != 1 {
		t.Fatalf("a %s generation under a %s ack wait: %d deliveries, %d unacked, %d results; want 1, 0, 1",
			took.Round(time.Millisecond), ackWait, delivered, pending, results.Load())
	}
	t.Logf("%d tokens in %s under a %s ack wait: delivered once", longTokens, took.Round(time.Millisecond), ackWait)
}

// SIGTERM of a worker with four real generations at the engine waits for
// them: four results, every dispatch acked, before Run returns.
func TestSIGTERMWaitsForRealGenerations(t *testing.T) {
	o := startEngine(t, 4, "tiny")
	env := bustest.StartProvisioned(t, subjects.StreamOptions{})
	results := okResults(t, env.NC)
	hbs := watchHeartbeats(t, env.NC)
	stop := engineWorker(t, env, o, "term-0", 5*time.Second)
	for i := range 4 {
		dispatchTo(t, env, "term-0", fmt.Sprintf("term-%d", i), longTokens/2)
	}
	hbs.waitFor(t, "four generations running at the engine", time.Minute, func(hb schemas.Heartbeat) bool {
		return hb.WorkerID == "term-0" && hb.Running == 4
	})
	if n := results.Load(); n != 0 {
		t.Fatalf("%d results before the SIGTERM: the generations were too short to test a drain", n)
	}
	stop()
	env.NC.Flush()
	// Every result was stored before Run returned; its copy to this
	// subscription may still be in the client's queue.
	for deadline := time.Now().Add(2 * time.Second); results.Load() < 4 && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
	}
	if n := results.Load(); n != 4 {
		t.Fatalf("the worker returned with %d of 4 results", n)
	}
	if delivered, pending := consumerInfo(t, env, "term-0"); delivered != 4 || pending != 0 {
		t.Fatalf("%d deliveries, %d unacked after the drain; want 4, 0", delivered, pending)
	}
}
