package worker

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/switchyard-ai/switchyard/internal/testkit/bustest"
	"github.com/switchyard-ai/switchyard/schemas"
	"github.com/switchyard-ai/switchyard/services/svc"
	"github.com/switchyard-ai/switchyard/subjects"
)

// slowEngine is an OpenAI-compatible server that streams n one-token
// chunks, one every every: a generation as long as the test needs.
func slowEngine(t *testing.T, n int, every time.Duration) *httptest.Server {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/v1/completions" {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		fl := w.(http.Flusher)
		for i := range n {
			select {
			case <-r.Context().Done():
				return
			case <-time.After(every):
			}
			fmt.Fprintf(w, "data: {\"choices\":[{\"text\":\"t%d \"}]}\n\n", i)
			fl.Flush()
		}
		fmt.Fprintf(w, "data: {\"choices\":[{\"text\":\"\",\"finish_reason\":\"length\"}],\"usage\":{\"prompt_tokens\":4,\"completion_tokens\":%d}}\n\n", n)
		fmt.Fprint(w, "data: [DONE]\n\n")
		fl.Flush()
	}))
	t.Cleanup(srv.Close)
	return srv
}

// startWorker runs a worker until the test ends.
func startWorker(t *testing.T, env bustest.Env, cfg Config) *Worker {
	t.Helper()
	sh, err := svc.New("worker", cfg.ID, env.NC, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	w, err := New(sh, cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	// The consumer exists once Run has created it.
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if _, err := env.JS.Consumer(ctx, subjects.StreamDispatch, subjects.WorkerConsumer(cfg.ID)); err == nil {
			return w
		}
		if time.Now().After(deadline) {
			t.Fatal("the worker's consumer never appeared")
		}
	}
}

// dispatch publishes one dispatch of id to worker.
func dispatch(t *testing.T, env bustest.Env, worker, id, model string, maxTokens int) {
	t.Helper()
	now := time.Now()
	d := schemas.Dispatch{V: schemas.Version, WorkerID: worker, PlacedAt: now, Admitted: schemas.Admitted{
		Tenant: "acme", Model: model, Priority: schemas.PriorityStandard, PromptTokens: 4, SubmittedAt: now,
		Deadline: now.Add(time.Minute), Request: schemas.Request{ID: id, Model: model, Prompt: "long one", MaxTokens: maxTokens}}}
	m, err := svc.Encode(subjects.Dispatch(worker), schemas.Msgpack, d, id+"-a0")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := env.JS.PublishMsg(context.Background(), m); err != nil {
		t.Fatal(err)
	}
}

// A dispatch that runs several times the consumer's ack wait is kept alive
// while it runs: never redelivered, acked once, one result — in the
// simulated engine and at a real engine's API alike (issue 29).
func TestLongWorkIsNotRedelivered(t *testing.T) {
	const ackWait = time.Second
	engine := slowEngine(t, 60, 50*time.Millisecond) // 3 s
	for _, tc := range []struct {
		name      string
		cfg       Config
		maxTokens int
	}{
		// ~6.4 ms a token for the 8B model on an H100 at batch 1: ~3.8 s.
		{"simulated", Config{ID: "ka-sim", GPU: "h100", Model: "llama-3.1-8b"}, 600},
		{"openai", Config{ID: "ka-real", GPU: "h100", Model: "llama-3.1-8b", Backend: "openai", OpenAIURL: engine.URL}, 60},
	} {
		t.Run(tc.name, func(t *testing.T) {
			env := bustest.StartProvisioned(t, subjects.StreamOptions{})
			var results atomic.Int32
			sub, err := env.NC.Subscribe(subjects.Final("acme", "long-1"), func(*nats.Msg) { results.Add(1) })
			if err != nil {
				t.Fatal(err)
			}
			defer sub.Unsubscribe()
			cfg := tc.cfg
			cfg.AckWait, cfg.HeartbeatInterval = ackWait, 100*time.Millisecond
			startWorker(t, env, cfg)
			start := time.Now()
			dispatch(t, env, cfg.ID, "long-1", cfg.Model, tc.maxTokens)
			for results.Load() == 0 {
				if time.Since(start) > 30*time.Second {
					t.Fatal("no result in 30 s")
				}
				time.Sleep(20 * time.Millisecond)
			}
			took := time.Since(start)
			if took < 2*ackWait {
				t.Fatalf("the work took %s, not longer than twice the ack wait (%s): the test proves nothing", took, ackWait)
			}
			time.Sleep(ackWait + 200*time.Millisecond) // a redelivery after the result would show now
			cons, err := env.JS.Consumer(context.Background(), subjects.StreamDispatch, subjects.WorkerConsumer(cfg.ID))
			if err != nil {
				t.Fatal(err)
			}
			info, err := cons.Info(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			// Delivered.Consumer counts every delivery, redeliveries included
			// (NumRedelivered counts only those still unacked).
			if info.Delivered.Consumer != 1 || info.NumAckPending != 0 || info.AckFloor.Stream != 1 || results.Load() != 1 {
				t.Fatalf("after %s of work: %d deliveries, ack pending %d, ack floor %d, results %d; want 1, 0, 1, 1",
					took.Round(time.Millisecond), info.Delivered.Consumer, info.NumAckPending, info.AckFloor.Stream, results.Load())
			}
			t.Logf("%s: %s of work under a %s ack wait, never redelivered", tc.name, took.Round(time.Millisecond), ackWait)
		})
	}
}

// A real-engine worker told to stop waits for its generations at the
// engine (only the simulated engine's were counted, so it returned with
// them running); past DrainTimeout it hands them back unacked, unanswered,
// for the routers to re-place (issue 29).
func TestDrainWaitsForTheEngine(t *testing.T) {
	engine := slowEngine(t, 30, 50*time.Millisecond) // 1.5 s each
	for _, tc := range []struct {
		name         string
		drainTimeout time.Duration
		wantResults  int32
	}{
		{"within the drain timeout", 10 * time.Second, 4},
		{"past the drain timeout", 300 * time.Millisecond, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			env := bustest.StartProvisioned(t, subjects.StreamOptions{})
			var results atomic.Int32
			sub, err := env.NC.Subscribe(subjects.Final("acme", "*"), func(m *nats.Msg) {
				var res schemas.Result
				if svc.Decode(m.Header, m.Data, &res) == nil && res.Status == schemas.StatusOK {
					results.Add(1)
				}
			})
			if err != nil {
				t.Fatal(err)
			}
			defer sub.Unsubscribe()
			id := "drain-" + fmt.Sprint(tc.drainTimeout.Milliseconds())
			sh, err := svc.New("worker", id, env.NC, slog.New(slog.DiscardHandler))
			if err != nil {
				t.Fatal(err)
			}
			w, err := New(sh, Config{ID: id, GPU: "h100", Model: "llama-3.1-8b", Backend: "openai", OpenAIURL: engine.URL,
				HeartbeatInterval: 100 * time.Millisecond, DrainTimeout: tc.drainTimeout})
			if err != nil {
				t.Fatal(err)
			}
			ctx, stop := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() { done <- w.Run(ctx) }()
			for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
				if _, err := env.JS.Consumer(ctx, subjects.StreamDispatch, subjects.WorkerConsumer(id)); err == nil {
					break
				}
				if time.Now().After(deadline) {
					t.Fatal("the worker's consumer never appeared")
				}
			}
			for i := range 4 {
				dispatch(t, env, id, fmt.Sprintf("%s-%d", id, i), "llama-3.1-8b", 30)
			}
			for w.holding() < 4 {
				time.Sleep(10 * time.Millisecond)
			}
			stop() // SIGTERM
			if err := <-done; err != nil {
				t.Fatal(err)
			}
			env.NC.Flush()
			time.Sleep(100 * time.Millisecond)
			cons, err := env.JS.Consumer(context.Background(), subjects.StreamDispatch, subjects.WorkerConsumer(id))
			if err != nil {
				t.Fatal(err)
			}
			info, err := cons.Info(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			if got := results.Load(); got != tc.wantResults || info.NumAckPending != 4-int(tc.wantResults) {
				t.Fatalf("after the worker returned: %d results, %d dispatches unacked; want %d and %d",
					got, info.NumAckPending, tc.wantResults, 4-tc.wantResults)
			}
		})
	}
}
