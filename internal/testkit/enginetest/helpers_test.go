package enginetest

import (
	"bytes"
	"context"
	"errors"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/switchyard-ai/switchyard/internal/adapter/fleetlearn"
	"github.com/switchyard-ai/switchyard/internal/adapter/gguf"
	"github.com/switchyard-ai/switchyard/internal/core/catalog"
	"github.com/switchyard-ai/switchyard/schemas"
	"github.com/switchyard-ai/switchyard/services/client"
	"github.com/switchyard-ai/switchyard/services/stack"
	"github.com/switchyard-ai/switchyard/services/svc"
	"github.com/switchyard-ai/switchyard/services/worker"
	"github.com/switchyard-ai/switchyard/subjects"
)

// requireOllama skips when the pinned engine is not installed, unless
// SWITCHYARD_REQUIRE_TOOLS=1 (set by .ci/run once install-tools.sh ran),
// which turns the skip into a failure: CI cannot pass by not running these.
func requireOllama(t *testing.T) string {
	t.Helper()
	bin, err := FindOllama()
	if err == nil {
		return bin
	}
	if !errors.Is(err, ErrNoOllama) {
		t.Fatal(err)
	}
	if os.Getenv("SWITCHYARD_REQUIRE_TOOLS") == "1" {
		t.Fatal(err.Error() + " (SWITCHYARD_REQUIRE_TOOLS=1)")
	}
	t.Skip(err.Error())
	return ""
}

// syncBuffer collects the engine's log for a failing test's output.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// startEngine runs an Ollama serving the named tiny models (seeded by
// their position), stopped when the test ends; its log is printed if the
// test failed.
func startEngine(t *testing.T, parallel int, models ...string) *Ollama {
	t.Helper()
	bin := requireOllama(t)
	logs := &syncBuffer{}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	o, err := Start(ctx, Options{Binary: bin, NumParallel: parallel, MaxLoaded: len(models), Log: logs})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		o.Stop()
		if t.Failed() {
			t.Logf("ollama log:\n%s", tail(logs.String(), 4000))
		}
	})
	for i, m := range models {
		if err := o.CreateTiny(ctx, m, gguf.TinyOptions{Name: m, Seed: uint64(i + 1), Context: 32768}); err != nil {
			t.Fatal(err)
		}
	}
	return o
}

func tail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[len(s)-n:]
}

// system starts Switchyard in-process (real embedded JetStream, admitter,
// router) with one openai-backend worker per engine URL, all serving
// model — a name the built-in catalog does not know, learned from the
// engine as `switchyard worker` does. A fleet follower teaches the shared
// catalog what heartbeats describe later (an engine's other models).
func system(t *testing.T, model string, urls ...string) *stack.Stack {
	t.Helper()
	return systemOf(t, model, nil, urls...)
}

// systemOf is system with each worker's spec adjusted by tweak.
func systemOf(t *testing.T, model string, tweak func(*stack.WorkerSpec), urls ...string) *stack.Stack {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cat, err := worker.LearnServedModel(ctx, catalog.Default(), worker.Config{ID: "probe", Model: model, Backend: "openai", OpenAIURL: urls[0]})
	if err != nil {
		t.Fatal(err)
	}
	var fleet []stack.WorkerSpec
	for _, u := range urls {
		spec := stack.WorkerSpec{GPU: "cpu", Model: model, Backend: "openai", OpenAIURL: u}
		if tweak != nil {
			tweak(&spec)
		}
		fleet = append(fleet, spec)
	}
	st, err := stack.Start(context.Background(), stack.Config{Fleet: fleet, Catalog: cat})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(st.Close)
	nc, err := st.Connect("fleet-learner")
	if err != nil {
		t.Fatal(err)
	}
	learner, err := fleetlearn.Follow(nc, fleetlearn.Options{Catalog: cat})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(learner.Stop)
	return st
}

// heartbeats records every worker heartbeat.
type heartbeats struct {
	mu  sync.Mutex
	all []schemas.Heartbeat
}

func watchHeartbeats(t *testing.T, nc *nats.Conn) *heartbeats {
	h := &heartbeats{}
	sub, err := nc.Subscribe(subjects.HeartbeatAll, func(m *nats.Msg) {
		var hb schemas.Heartbeat
		if svc.Decode(m.Header, m.Data, &hb) == nil {
			h.mu.Lock()
			h.all = append(h.all, hb)
			h.mu.Unlock()
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sub.Unsubscribe() })
	return h
}

// waitFor waits for a heartbeat sent from now on for which cond holds.
// waitSilent waits until worker has sent no heartbeat for quiet (a worker
// whose engine is down goes silent, so routers count it lost).
func (h *heartbeats) waitSilent(t *testing.T, worker string, quiet, d time.Duration) {
	t.Helper()
	deadline := time.Now().Add(d)
	last := time.Now()
	h.mu.Lock()
	seen := len(h.all)
	h.mu.Unlock()
	for time.Now().Before(deadline) {
		h.mu.Lock()
		for ; seen < len(h.all); seen++ {
			if h.all[seen].WorkerID == worker {
				last = time.Now()
			}
		}
		h.mu.Unlock()
		if time.Since(last) >= quiet {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("%s kept heartbeating for %s: want it silent for %s", worker, d, quiet)
}

func (h *heartbeats) waitFor(t *testing.T, what string, d time.Duration, cond func(schemas.Heartbeat) bool) schemas.Heartbeat {
	t.Helper()
	deadline := time.Now().Add(d)
	h.mu.Lock()
	seen := len(h.all) // only what is reported from now on
	h.mu.Unlock()
	for time.Now().Before(deadline) {
		h.mu.Lock()
		for ; seen < len(h.all); seen++ {
			if hb := h.all[seen]; cond(hb) {
				h.mu.Unlock()
				return hb
			}
		}
		h.mu.Unlock()
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("no heartbeat within %s: %s", d, what)
	return schemas.Heartbeat{}
}

func modelState(hb schemas.Heartbeat, name string) (schemas.ModelState, bool) {
	for _, m := range hb.Models {
		if m.Name == name {
			return m, true
		}
	}
	return schemas.ModelState{}, false
}

// stream collects one request's token chunks in arrival order.
type stream struct {
	mu     sync.Mutex
	chunks []schemas.TokenChunk
	first  chan struct{}
	once   sync.Once
}

func follow(t *testing.T, cl *client.Client, tenant, id string) *stream {
	s := &stream{first: make(chan struct{})}
	sub, err := cl.Stream(tenant, id, func(c schemas.TokenChunk) {
		s.mu.Lock()
		s.chunks = append(s.chunks, c)
		s.mu.Unlock()
		if c.Text != "" {
			s.once.Do(func() { close(s.first) })
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sub.Unsubscribe() })
	return s
}

func (s *stream) snapshot() []schemas.TokenChunk {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]schemas.TokenChunk(nil), s.chunks...)
}

// waitDone waits for the stream's final marker.
func (s *stream) waitDone(t *testing.T, d time.Duration) []schemas.TokenChunk {
	t.Helper()
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		c := s.snapshot()
		if len(c) > 0 && c[len(c)-1].Done {
			return c
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("token stream did not end within %s", d)
	return nil
}
