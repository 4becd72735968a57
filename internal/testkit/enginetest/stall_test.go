package enginetest

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/switchyard-ai/switchyard/internal/adapter/backend/openai"
	"github.com/switchyard-ai/switchyard/schemas"
	"github.com/switchyard-ai/switchyard/services/stack"
	"github.com/switchyard-ai/switchyard/services/svc"
	"github.com/switchyard-ai/switchyard/services/worker"
	"github.com/switchyard-ai/switchyard/subjects"
)

// TestStalledEngineIsTakenOutOfRotation: an engine answers on its address
// but serves nothing of ours — its one slot is held by a client outside
// Switchyard, as a slot leaked by an aborted stream is held
// (ollama/ollama#17131). The worker's watchdog sees the request waiting
// with no byte from the engine and goes silent; the router re-places the
// request on the worker that joined meanwhile, which serves it, with
// exactly one final result. The stalled worker probes, and heartbeats
// again once its engine's slot is free.
func TestStalledEngineIsTakenOutOfRotation(t *testing.T) {
	o, spare := startEngine(t, 1, "tiny"), startEngine(t, 1, "tiny")
	const stallAfter = 3 * time.Second
	st := systemOf(t, "tiny", func(s *stack.WorkerSpec) { s.EngineStallAfter = stallAfter }, o.URL)
	cl := newClient(t, st, "stall")
	nc := newNC(t, st)
	events := watchEvents(t, nc)
	hbs := watchHeartbeats(t, nc)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	engine := o.Client("tiny")
	if _, err := engine.Generate(ctx, openai.Request{Prompt: "warm up", MaxTokens: 1}, nil); err != nil {
		t.Fatal(err)
	}

	// The blocker asks for a long answer without streaming: Ollama's
	// unstreamed handler reads its generation to the end, so cancelling
	// it frees the slot cleanly (the streamed one may not: the bug above).
	bctx, unblock := context.WithCancel(ctx)
	defer unblock()
	var blocked sync.WaitGroup
	blocked.Add(1)
	go func() {
		defer blocked.Done()
		body, _ := json.Marshal(map[string]any{"model": "tiny", "prompt": "hold the slot", "max_tokens": 30000, "stream": false})
		req, _ := http.NewRequestWithContext(bctx, http.MethodPost, o.URL+"/v1/completions", bytes.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		if res, err := http.DefaultClient.Do(req); err == nil {
			res.Body.Close()
		}
	}()
	// Held once one-token requests cannot get in, twice in a row, so a
	// slow answer on a loaded machine is not taken for it (cancelling a
	// request still waiting for the slot is clean too).
	for refused := 0; refused < 2; {
		pctx, pcancel := context.WithTimeout(ctx, time.Second)
		_, err := engine.Generate(pctx, openai.Request{Prompt: "free?", MaxTokens: 1}, nil)
		pcancel()
		if ctx.Err() != nil {
			t.Fatal("the blocker never took the engine's slot")
		}
		refused++
		if err == nil {
			refused = 0
		}
	}

	if _, err := cl.Submit(ctx, tenant, &schemas.Request{ID: "stuck-1", Model: "tiny", Prompt: "are you there?", MaxTokens: 4, DeadlineMs: 180_000}); err != nil {
		t.Fatal(err)
	}
	stuckOn := runningOn(t, hbs)
	// A second worker joins once the request is placed on the first.
	if _, err := st.AddWorker(stack.WorkerSpec{GPU: "cpu", Model: "tiny", Backend: "openai", OpenAIURL: spare.URL}); err != nil {
		t.Fatal(err)
	}
	stalled := events.waitFor(t, "the worker reports its engine stalled", 60*time.Second, func(e schemas.Event) bool {
		return e.Kind == worker.EventEngineStalled && e.RequestID == ""
	})
	handedBack := events.waitFor(t, "the waiting request is handed back for re-placement", 10*time.Second, func(e schemas.Event) bool {
		return e.Kind == worker.EventEngineStalled && e.RequestID == "stuck-1"
	})
	if stalled.WorkerID != stuckOn || handedBack.WorkerID != stuckOn {
		t.Fatalf("stall reported by %s/%s, the request ran on %s", stalled.WorkerID, handedBack.WorkerID, stuckOn)
	}
	t.Logf("stalled: %s; handed back: %s", stalled.Reason, handedBack.Reason)
	res, err := cl.Result(ctx, tenant, "stuck-1")
	if err != nil {
		t.Fatal(err)
	}
	if res.Status != schemas.StatusOK || res.Usage.CompletionTokens == 0 || res.Attempt != 1 || res.WorkerID == stuckOn {
		t.Fatalf("result %+v: want it served by the re-placed attempt on the other worker", res)
	}

	unblock()
	blocked.Wait()
	events.waitFor(t, "the stalled worker's probe finds its engine serving", 60*time.Second, func(e schemas.Event) bool {
		return e.Kind == worker.EventEngineRecovered && e.WorkerID == stuckOn
	})
	hbs.waitFor(t, "the stalled worker heartbeats again, taking work", 20*time.Second, func(hb schemas.Heartbeat) bool {
		return hb.WorkerID == stuckOn && !hb.Draining
	})
	if n := storedResults(t, st, "stuck-1"); n != 1 {
		t.Fatalf("%d final results stored", n)
	}
}

// eventLog records every decision event.
type eventLog struct {
	mu  sync.Mutex
	all []schemas.Event
}

func watchEvents(t *testing.T, nc *nats.Conn) *eventLog {
	t.Helper()
	l := &eventLog{}
	sub, err := nc.Subscribe(subjects.EventAll, func(m *nats.Msg) {
		var e schemas.Event
		if svc.Decode(m.Header, m.Data, &e) == nil {
			l.mu.Lock()
			l.all = append(l.all, e)
			l.mu.Unlock()
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sub.Unsubscribe() })
	return l
}

// waitFor waits for an event, seen since the log started, for which cond
// holds.
func (l *eventLog) waitFor(t *testing.T, what string, d time.Duration, cond func(schemas.Event) bool) schemas.Event {
	t.Helper()
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		l.mu.Lock()
		for _, e := range l.all {
			if cond(e) {
				l.mu.Unlock()
				return e
			}
		}
		l.mu.Unlock()
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("no event within %s: %s", d, what)
	return schemas.Event{}
}
