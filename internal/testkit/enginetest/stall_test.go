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
		// Consecutive events of one kind share a message (Sy-Events: n).
		evs, err := svc.DecodeEvents(m.Header, m.Data)
		if err != nil {
			return
		}
		l.mu.Lock()
		l.all = append(l.all, evs...)
		l.mu.Unlock()
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

// TestWorkerFreesASlotOllamaKept: the engine's only slot is lost the way
// ollama/ollama#17131 loses it — streams aborted at the engine until one
// aborts at the moment that keeps its slot (a few per hundred here) — and
// then the system starts in front of it. The request placed there stalls;
// the worker hands it back, unloads the engine's model (Ollama drops the
// kept slot with it) and its probe loads the model afresh: the engine
// serves again with nobody restarting it, and the request gets exactly one
// final result, ok.
func TestWorkerFreesASlotOllamaKept(t *testing.T) {
	o, spare := startEngine(t, 1, "tiny"), startEngine(t, 1, "tiny")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	engine := o.Client("tiny")
	keepASlot(ctx, t, engine)

	st := systemOf(t, "tiny", func(s *stack.WorkerSpec) { s.EngineStallAfter = 3 * time.Second }, o.URL)
	cl := newClient(t, st, "kept")
	nc := newNC(t, st)
	events := watchEvents(t, nc)
	hbs := watchHeartbeats(t, nc)
	if _, err := cl.Submit(ctx, tenant, &schemas.Request{ID: "kept-1", Model: "tiny", Prompt: "are you there?", MaxTokens: 4, DeadlineMs: 180_000}); err != nil {
		t.Fatal(err)
	}
	stuckOn := runningOn(t, hbs)
	if _, err := st.AddWorker(stack.WorkerSpec{GPU: "cpu", Model: "tiny", Backend: "openai", OpenAIURL: spare.URL}); err != nil {
		t.Fatal(err)
	}
	events.waitFor(t, "the worker reports its engine stalled", 60*time.Second, func(e schemas.Event) bool {
		return e.Kind == worker.EventEngineStalled && e.RequestID == "" && e.WorkerID == stuckOn
	})
	recovered := events.waitFor(t, "the worker frees the kept slot and serves again", 60*time.Second, func(e schemas.Event) bool {
		return e.Kind == worker.EventEngineRecovered && e.WorkerID == stuckOn
	})
	t.Logf("recovered: %s", recovered.Reason)
	pctx, pcancel := context.WithTimeout(ctx, 30*time.Second)
	defer pcancel()
	if _, err := engine.Generate(pctx, openai.Request{Prompt: "free again?", MaxTokens: 1}, nil); err != nil {
		t.Fatalf("the engine's slot is still kept after the worker recovered: %v", err)
	}
	res, err := cl.Result(ctx, tenant, "kept-1")
	if err != nil {
		t.Fatal(err)
	}
	if res.Status != schemas.StatusOK || res.Usage.CompletionTokens == 0 {
		t.Fatalf("result %+v: want it served", res)
	}
	t.Logf("served by %s on attempt %d", res.WorkerID, res.Attempt)
	if n := storedResults(t, st, "kept-1"); n != 1 {
		t.Fatalf("%d final results stored", n)
	}
}

// keepASlot aborts streams at the engine until Ollama keeps the slot of
// one (ollama/ollama#17131), which a one-token request then cannot get.
func keepASlot(ctx context.Context, t *testing.T, engine *openai.Client) {
	t.Helper()
	// The race is Ollama's and depends on scheduling: a few aborts per
	// hundred kept a slot on this 2-core machine, idle or loaded. Two
	// minutes of aborts without one is a machine where it does not show,
	// and there is then nothing for the worker to heal.
	kept, tries, until := false, 0, time.Now().Add(2*time.Minute)
	for ; time.Now().Before(until) && !kept; tries++ {
		actx, abort := context.WithCancel(ctx)
		n := 0
		_, _ = engine.Generate(actx, openai.Request{Prompt: "a long answer", MaxTokens: 4000}, func(string) {
			if n++; n == 20 {
				abort()
			}
		})
		abort()
		pctx, pcancel := context.WithTimeout(ctx, 5*time.Second)
		_, err := engine.Generate(pctx, openai.Request{Prompt: "next", MaxTokens: 1}, nil)
		pcancel()
		if ctx.Err() != nil {
			t.Fatal(ctx.Err())
		}
		if kept = err != nil; kept {
			t.Logf("the engine kept a slot after %d aborted streams", tries+1)
		}
	}
	if !kept {
		t.Skipf("%d aborted streams in two minutes and the engine kept no slot: ollama/ollama#17131 did not show here", tries)
	}

}

// TestWorkerFreesAKeptSlotAfterACancel: with a slot Ollama kept, the next
// request waits at the engine; when it is cancelled, the worker checks the
// idle engine with one token, finds no slot, and frees it by unloading the
// models — long before the stall watchdog (its default bound here) would
// — so the request after it is served at once.
func TestWorkerFreesAKeptSlotAfterACancel(t *testing.T) {
	o := startEngine(t, 1, "tiny")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	st := system(t, "tiny", o.URL)
	cl := newClient(t, st, "audit")
	nc := newNC(t, st)
	events := watchEvents(t, nc)
	hbs := watchHeartbeats(t, nc)
	keepASlot(ctx, t, o.Client("tiny"))

	if _, err := cl.Submit(ctx, tenant, &schemas.Request{ID: "waits-1", Model: "tiny", Prompt: "hello?", MaxTokens: 4, DeadlineMs: 180_000}); err != nil {
		t.Fatal(err)
	}
	runningOn(t, hbs)
	m, err := svc.Encode(subjects.Cancel(tenant), schemas.JSON, schemas.Cancel{RequestID: "waits-1", Tenant: tenant, Reason: "gave up"}, "")
	if err != nil {
		t.Fatal(err)
	}
	if err := nc.PublishMsg(m); err != nil {
		t.Fatal(err)
	}
	if res, err := cl.Result(ctx, tenant, "waits-1"); err != nil || res.Error == nil || res.Error.Code != schemas.CodeCancelled {
		t.Fatalf("result %+v, %v: want cancelled", res, err)
	}
	freed := events.waitFor(t, "the worker frees the kept slot after the cancel", 30*time.Second, func(e schemas.Event) bool {
		return e.Kind == worker.EventEngineSlotFreed
	})
	t.Logf("freed: %s", freed.Reason)
	start := time.Now()
	res, err := cl.Do(ctx, tenant, &schemas.Request{ID: "next-1", Model: "tiny", Prompt: "now?", MaxTokens: 4, DeadlineMs: 60_000})
	if err != nil || res.Status != schemas.StatusOK {
		t.Fatalf("next request: %+v, %v", res, err)
	}
	if waited := time.Since(start); waited > 20*time.Second {
		t.Fatalf("the next request took %s: the slot was not free", waited)
	}
}
