package enginetest

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/switchyard-ai/switchyard/internal/adapter/backend/openai"
	"github.com/switchyard-ai/switchyard/internal/adapter/bus"
	"github.com/switchyard-ai/switchyard/internal/core/catalog"
	"github.com/switchyard-ai/switchyard/internal/core/control"
	"github.com/switchyard-ai/switchyard/schemas"
	"github.com/switchyard-ai/switchyard/services/client"
	"github.com/switchyard-ai/switchyard/services/stack"
	"github.com/switchyard-ai/switchyard/services/svc"
	"github.com/switchyard-ai/switchyard/subjects"
)

const tenant = "acme"

// storedResults counts the final results RESULTS holds for one request.
func storedResults(t *testing.T, st *stack.Stack, id string) int {
	t.Helper()
	nc, err := st.Connect("results-count")
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := bus.JetStream(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, err := js.Stream(ctx, subjects.StreamResults)
	if err != nil {
		t.Fatal(err)
	}
	subj := subjects.Result(tenant, id)
	info, err := s.Info(ctx, jetstream.WithSubjectFilter(subj))
	if err != nil {
		t.Fatal(err)
	}
	return int(info.State.Subjects[subj])
}

func newClient(t *testing.T, st *stack.Stack, name string) *client.Client {
	t.Helper()
	nc, err := st.Connect(name)
	if err != nil {
		t.Fatal(err)
	}
	cl, err := client.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return cl
}

func temp0() *float64 { z := 0.0; return &z }

// TestEndToEndOnOllama: a NATS client's request for a model only the
// engine knows goes admitter → router → worker (openai backend) → Ollama,
// streams its tokens in order on sy.tok, and ends in one final result with
// the engine's own usage counts and a measured TTFT — the same answer the
// engine gives directly. Several requests at once share the engine's
// parallel slots, and the heartbeat reports them running.
func TestEndToEndOnOllama(t *testing.T) {
	o := startEngine(t, 4, "tiny")
	if _, ok := catalog.Default().Model("tiny"); ok {
		t.Fatal("the built-in catalog knows tiny: this test would not exercise serving what the fleet serves")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	msgs := []schemas.Message{{Role: "user", Content: "Switchyard routes this prompt to a real engine."}}
	direct, err := o.Client("tiny").Generate(ctx, openai.Request{Messages: msgs, MaxTokens: 24, Temperature: temp0()}, nil)
	if err != nil {
		t.Fatal(err)
	}
	st := system(t, "tiny", o.URL)
	cl := newClient(t, st, "e2e")
	hbs := watchHeartbeats(t, newNC(t, st))

	hb := hbs.waitFor(t, "the worker advertises tiny with its description", 10*time.Second, func(hb schemas.Heartbeat) bool {
		m, ok := modelState(hb, "tiny")
		return ok && m.Spec != nil && !hb.Simulated && hb.Backend == "openai"
	})
	if m, _ := modelState(hb, "tiny"); m.Spec.Params < 100_000 || m.Spec.Layers != 2 || m.State != schemas.WeightHot {
		t.Fatalf("advertised tiny: %+v spec %+v", m, *m.Spec)
	}

	t.Run("stream and result", func(t *testing.T) {
		s := follow(t, cl, tenant, "e2e-1")
		res, err := cl.Do(ctx, tenant, &schemas.Request{ID: "e2e-1", Model: "tiny", Messages: msgs, MaxTokens: 24, Temperature: temp0(), Stream: true})
		if err != nil {
			t.Fatal(err)
		}
		if res.Status != schemas.StatusOK || res.Simulated || res.Model != "tiny" {
			t.Fatalf("result %+v", res)
		}
		if res.Usage.PromptTokens != direct.PromptTokens || res.Usage.CompletionTokens != direct.CompletionTokens || res.Usage.CompletionTokens != 24 {
			t.Fatalf("usage %+v through Switchyard, direct %d/%d", res.Usage, direct.PromptTokens, direct.CompletionTokens)
		}
		if res.Text != direct.Text || res.FinishReason != "length" {
			t.Fatalf("text %q (%s), direct %q", res.Text, res.FinishReason, direct.Text)
		}
		if res.Timing.TTFTMs <= 0 || res.Timing.TTFTMs > res.Timing.TotalMs {
			t.Fatalf("timing %+v", res.Timing)
		}
		chunks := s.waitDone(t, 10*time.Second)
		var text strings.Builder
		for i, c := range chunks {
			if c.Seq != uint64(i+1) {
				t.Fatalf("chunk %d has seq %d: out of order or lost", i, c.Seq)
			}
			if c.Done != (i == len(chunks)-1) {
				t.Fatalf("chunk %d done=%v", i, c.Done)
			}
			text.WriteString(c.Text)
		}
		if text.String() != res.Text {
			t.Fatalf("streamed %q, result %q", text.String(), res.Text)
		}
		if n := storedResults(t, st, "e2e-1"); n != 1 {
			t.Fatalf("%d final results stored", n)
		}
	})

	t.Run("unknown model", func(t *testing.T) {
		res, err := cl.Do(ctx, tenant, &schemas.Request{ID: "e2e-unknown", Model: "nobody-serves-this", Prompt: "x", MaxTokens: 4})
		if err != nil {
			t.Fatal(err)
		}
		if res.Status != schemas.StatusRejected || res.Error == nil || res.Error.Code != schemas.CodeUnknownModel ||
			!strings.Contains(res.Error.Message, "no live worker serves it") {
			t.Fatalf("result %+v", res)
		}
	})

	t.Run("parallel slots", func(t *testing.T) {
		const n = 4
		streams := make([]*stream, n)
		var wg sync.WaitGroup
		results := make([]schemas.Result, n)
		for i := range n {
			id := "e2e-par-" + string(rune('a'+i))
			streams[i] = follow(t, cl, tenant, id)
			wg.Add(1)
			go func() {
				defer wg.Done()
				r, err := cl.Do(ctx, tenant, &schemas.Request{ID: id, Model: "tiny", Prompt: "parallel " + id, MaxTokens: 600, Stream: true})
				if err != nil {
					t.Error(err)
				}
				results[i] = r
			}()
		}
		running := hbs.waitFor(t, "the heartbeat reports several requests running", 30*time.Second, func(hb schemas.Heartbeat) bool { return hb.Running >= 2 })
		wg.Wait()
		// Every request's first token came before any request's last: they
		// were generated at the same time, not one after another.
		var firstLatest, doneEarliest time.Time
		for i, s := range streams {
			if results[i].Status != schemas.StatusOK || results[i].Usage.CompletionTokens != 600 {
				t.Fatalf("result %d: %+v", i, results[i])
			}
			c := s.waitDone(t, 10*time.Second)
			if first := c[0].At; first.After(firstLatest) {
				firstLatest = first
			}
			if last := c[len(c)-1].At; doneEarliest.IsZero() || last.Before(doneEarliest) {
				doneEarliest = last
			}
		}
		if !firstLatest.Before(doneEarliest) {
			t.Fatalf("a request started only after another finished (first tokens by %s, first finish %s): not served in parallel",
				firstLatest.Format(time.StampMicro), doneEarliest.Format(time.StampMicro))
		}
		t.Logf("heartbeat while serving: running %d of max %d", running.Running, running.MaxBatch)
	})
}

func newNC(t *testing.T, st *stack.Stack) *nats.Conn {
	nc, err := st.Connect("watch-" + t.Name())
	if err != nil {
		t.Fatal(err)
	}
	return nc
}

// TestCancelAbortsOnTheEngine: a cancel for a request the engine is
// generating ends it with one cancelled result, and the engine stops: its
// runner goes idle, and the next request is answered at once, long before
// the cancelled generation could have finished.
//
// The engine has a second slot although one request runs at a time:
// Ollama can keep the slot of an aborted stream for good
// (ollama/ollama#17131; services/worker/stall.go), which would starve the
// next request whatever Switchyard did. Whether that happened is logged;
// the runner's processor time says whether the generation stopped.
func TestCancelAbortsOnTheEngine(t *testing.T) {
	o := startEngine(t, 2, "tiny")
	st := system(t, "tiny", o.URL)
	cl := newClient(t, st, "cancel")
	nc := newNC(t, st)
	// Generous: on a loaded 2-core machine Ollama's start and first token
	// alone have taken most of a minute; what the test judges is the wait
	// after the cancel, measured against the engine's own rate below.
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	const maxTokens = 20000
	s := follow(t, cl, tenant, "long-1")
	if _, err := cl.Submit(ctx, tenant, &schemas.Request{ID: "long-1", Model: "tiny", Prompt: "a long answer", MaxTokens: maxTokens, Stream: true,
		DeadlineMs: 600_000}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-s.first:
	case <-time.After(30 * time.Second):
		res, _ := cl.Result(ctx, tenant, "long-1")
		t.Fatalf("no token streamed; result %+v", res)
	}
	generating, err := o.Busy(500 * time.Millisecond) // and let it generate for a while
	if err != nil {
		t.Fatal(err)
	}
	m, err := svc.Encode(subjects.Cancel(tenant), schemas.JSON, schemas.Cancel{RequestID: "long-1", Tenant: tenant, Reason: "client gave up"}, "")
	if err != nil {
		t.Fatal(err)
	}
	cancelled := time.Now()
	if err := nc.PublishMsg(m); err != nil {
		t.Fatal(err)
	}
	res, err := cl.Result(ctx, tenant, "long-1")
	if err != nil {
		t.Fatal(err)
	}
	if res.Status == schemas.StatusOK || res.Error == nil || res.Error.Code != schemas.CodeCancelled {
		t.Fatalf("result %+v", res)
	}
	chunks := s.waitDone(t, 10*time.Second)
	checkStopped(t, o, generating)
	got := len(chunks) - 1
	if got >= maxTokens {
		t.Fatalf("all %d tokens streamed: nothing was cancelled", got)
	}
	// The engine's rate before the cancel bounds how long the rest would
	// have taken; the next request must not wait for it.
	perToken := chunks[got-1].At.Sub(chunks[0].At) / time.Duration(max(1, got-1))
	remaining := time.Duration(maxTokens-got) * perToken
	// Its own budget: the rest of the cancelled generation plus a margin,
	// so a slow start above cannot eat the time the check below judges.
	nctx, ncancel := context.WithTimeout(context.Background(), remaining+time.Minute)
	defer ncancel()
	next, err := o.Client("tiny").Generate(nctx, openai.Request{Prompt: "next", MaxTokens: 1}, nil)
	if err != nil {
		t.Fatal(err)
	}
	waited := time.Since(cancelled)
	if waited > remaining/2 {
		t.Fatalf("the next request waited %s; the cancelled generation had %d tokens (~%s) left: the engine kept generating", waited, maxTokens-got, remaining)
	}
	t.Logf("cancelled after %d of %d tokens; next request answered %s after the cancel (%d token), the rest would have taken ~%s",
		got, maxTokens, waited.Round(time.Millisecond), next.CompletionTokens, remaining.Round(time.Millisecond))
	if n := storedResults(t, st, "long-1"); n != 1 {
		t.Fatalf("%d final results stored", n)
	}
	logLeakedSlot(t, o)
}

// checkStopped fails unless the engine's processes, which used generating
// of a core while the generation ran, are now close to idle.
func checkStopped(t *testing.T, o *Ollama, generating float64) {
	t.Helper()
	time.Sleep(300 * time.Millisecond) // the abort crosses the bus and two HTTP hops
	idle, err := o.Busy(time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("engine processor use: %.2f of a core generating, %.2f after the cancel", generating, idle)
	if idle > max(0.1, generating/2) {
		t.Fatalf("the engine still uses %.2f of a core after the cancel (%.2f while generating): it kept generating", idle, generating)
	}
}

// logLeakedSlot says whether the engine kept a slot of the aborted stream
// (ollama/ollama#17131): two one-token requests at once must both get in.
func logLeakedSlot(t *testing.T, o *Ollama) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	errs := make([]error, 2)
	for i := range errs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, errs[i] = o.Client("tiny").Generate(ctx, openai.Request{Prompt: "both?", MaxTokens: 1}, nil)
		}()
	}
	wg.Wait()
	if errs[0] != nil || errs[1] != nil {
		t.Logf("the engine kept a slot of the aborted stream (ollama/ollama#17131): %v / %v", errs[0], errs[1])
	}
}

// runningOn waits for the heartbeat of the worker running a request and
// returns that worker's id.
func runningOn(t *testing.T, hbs *heartbeats) string {
	t.Helper()
	return hbs.waitFor(t, "a worker reports the request running", 20*time.Second, func(hb schemas.Heartbeat) bool { return hb.Running > 0 }).WorkerID
}

// TestEngineKilledMidStream: the engine under a streaming request dies.
// The worker goes silent while nothing answers at its engine's address, the
// router's breaker counts it lost and re-places the request on the other
// worker under the retry budget, and the request gets exactly one final
// result — from the other engine, with its real usage. The rest of the
// fleet serves the next request, and the worker takes work again once its
// engine is back.
func TestEngineKilledMidStream(t *testing.T) {
	engines := []*Ollama{startEngine(t, 2, "tiny"), startEngine(t, 2, "tiny")}
	st := system(t, "tiny", engines[0].URL, engines[1].URL)
	byWorker := map[string]*Ollama{"w1-cpu": engines[0], "w2-cpu": engines[1]}
	cl := newClient(t, st, "kill")
	hbs := watchHeartbeats(t, newNC(t, st))
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()

	const maxTokens = 20000
	s := follow(t, cl, tenant, "doomed-1")
	if _, err := cl.Submit(ctx, tenant, &schemas.Request{ID: "doomed-1", Model: "tiny", Prompt: "keep talking", MaxTokens: maxTokens,
		Stream: true, DeadlineMs: 600_000}); err != nil {
		t.Fatal(err)
	}
	<-s.first
	victim := runningOn(t, hbs)
	engine := byWorker[victim]
	if engine == nil {
		t.Fatalf("request running on unknown worker %q", victim)
	}
	engine.Kill()
	res, err := cl.Result(ctx, tenant, "doomed-1")
	if err != nil {
		t.Fatal(err)
	}
	if res.Status != schemas.StatusOK || res.WorkerID == victim || res.Attempt != 1 || res.Usage.CompletionTokens != maxTokens {
		t.Fatalf("result %+v: want ok from the other worker on attempt 1 with %d tokens", res, maxTokens)
	}
	s.waitDone(t, 10*time.Second)
	next, err := cl.Do(ctx, tenant, &schemas.Request{ID: "after-kill", Model: "tiny", Prompt: "still there?", MaxTokens: 8})
	if err != nil {
		t.Fatal(err)
	}
	if next.Status != schemas.StatusOK || next.WorkerID == victim {
		t.Fatalf("next request: %+v", next)
	}
	if err := engine.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	hbs.waitFor(t, "the worker serves again once its engine answers", 20*time.Second, func(hb schemas.Heartbeat) bool {
		return hb.WorkerID == victim && !hb.Draining
	})
	if n := storedResults(t, st, "doomed-1"); n != 1 {
		t.Fatalf("%d final results stored", n)
	}
}

// TestWarmthFromTheEngine: two models on one engine. The heartbeat lists
// both with their engine-read descriptions and reports which are loaded
// (Ollama's /api/ps); a request for the second model, which only the
// engine knows about, loads it, and the engine's own measure of that load
// becomes the model's load_s; the controller's warmth decisions unload and
// load it on the engine.
func TestWarmthFromTheEngine(t *testing.T) {
	o := startEngine(t, 1, "tiny-a", "tiny-b")
	st := system(t, "tiny-a", o.URL)
	cl := newClient(t, st, "warmth")
	nc := newNC(t, st)
	hbs := watchHeartbeats(t, nc)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	state := func(model string) func(schemas.Heartbeat) bool {
		return func(hb schemas.Heartbeat) bool { _, ok := modelState(hb, model); return ok }
	}
	hb := hbs.waitFor(t, "the engine's second model is advertised", 10*time.Second, state("tiny-b"))
	if b, _ := modelState(hb, "tiny-b"); b.Spec == nil || b.State != schemas.WeightCold {
		t.Fatalf("tiny-b before any request: %+v", b)
	}
	res, err := cl.Do(ctx, tenant, &schemas.Request{ID: "warm-b", Model: "tiny-b", Prompt: "wake up", MaxTokens: 8})
	if err != nil {
		t.Fatal(err)
	}
	if res.Status != schemas.StatusOK || res.Usage.CompletionTokens != 8 {
		t.Fatalf("result %+v", res)
	}
	hb = hbs.waitFor(t, "tiny-b hot with a measured load time", 10*time.Second, func(hb schemas.Heartbeat) bool {
		b, ok := modelState(hb, "tiny-b")
		return ok && b.State == schemas.WeightHot && b.LoadSeconds > 0
	})
	b, _ := modelState(hb, "tiny-b")
	if estimate := hb.Models[0].LoadSeconds; b.LoadSeconds > 5 {
		t.Fatalf("tiny-b's load_s %.3f s looks like the roofline's guess, not the engine's load (tiny-a's estimate %.1f s)", b.LoadSeconds, estimate)
	}
	t.Logf("tiny-b loaded by the engine in %.3f s (the roofline guessed %.1f s for its first placement)", b.LoadSeconds, hb.Models[0].LoadSeconds)

	worker := hb.WorkerID
	warmth := func(s string) {
		m, err := svc.Encode(control.WarmthSubject(worker), schemas.JSON, control.WarmthMsg{Worker: worker, Model: "tiny-b", State: s, Reason: "test"}, "")
		if err != nil {
			t.Fatal(err)
		}
		if err := nc.PublishMsg(m); err != nil {
			t.Fatal(err)
		}
	}
	loaded := func() bool {
		ps, err := o.Client("").Running(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range ps {
			if openai.SameModel(l.Name, "tiny-b") {
				return true
			}
		}
		return false
	}
	if !loaded() {
		t.Fatal("the heartbeat says hot but the engine does not hold tiny-b")
	}
	warmth(schemas.WeightCold)
	hbs.waitFor(t, "tiny-b cold after the controller unloads it", 20*time.Second, func(hb schemas.Heartbeat) bool {
		b, ok := modelState(hb, "tiny-b")
		return ok && b.State == schemas.WeightCold && !loaded()
	})
	warmth(schemas.WeightHot)
	hbs.waitFor(t, "tiny-b hot after the controller loads it", 20*time.Second, func(hb schemas.Heartbeat) bool {
		b, ok := modelState(hb, "tiny-b")
		return ok && b.State == schemas.WeightHot && loaded()
	})
}

// TestRepeatedPromptFindsItsEngine: with two engines, a repeated long
// prompt is routed to the worker whose engine computed it before, although
// the other worker wins ties between idle workers (as an unrelated prompt
// shows). Ollama publishes no KV events,
// so the router assumes a dispatched prompt's blocks stay cached where it
// ran (docs/engines.md, "Block hashes"); llama.cpp's prompt cache makes
// that true for the slot's last prompt.
func TestRepeatedPromptFindsItsEngine(t *testing.T) {
	engines := []*Ollama{startEngine(t, 2, "tiny"), startEngine(t, 2, "tiny")}
	st := system(t, "tiny", engines[0].URL, engines[1].URL)
	cl := newClient(t, st, "prefix")
	nc := newNC(t, st)
	hbs := watchHeartbeats(t, nc)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	// Find the worker that wins ties between idle workers, and take its
	// engine away, so the prompt first runs on the other one.
	probe, err := cl.Do(ctx, tenant, &schemas.Request{ID: "tie-probe", Model: "tiny", Prompt: "who wins ties?", MaxTokens: 2})
	if err != nil || probe.Status != schemas.StatusOK {
		t.Fatalf("probe: %+v %v", probe, err)
	}
	tieWinner := probe.WorkerID
	byWorker := map[string]*Ollama{"w1-cpu": engines[0], "w2-cpu": engines[1]}
	byWorker[tieWinner].Kill()
	// With its engine gone the worker goes silent; past the routers'
	// staleness bound (3 s) nothing is placed there.
	hbs.waitSilent(t, tieWinner, 4*time.Second, 20*time.Second)
	prompt := strings.Repeat("The shared system prompt of an agent, long enough to span many KV blocks. ", 12)
	first, err := cl.Do(ctx, tenant, &schemas.Request{ID: "prefix-1", Model: "tiny", Prompt: prompt + "Step one.", MaxTokens: 4})
	if err != nil {
		t.Fatal(err)
	}
	if first.Status != schemas.StatusOK || first.WorkerID == tieWinner {
		t.Fatalf("first run: %+v (tie winner %s has no engine)", first, tieWinner)
	}
	if err := byWorker[tieWinner].Restart(ctx); err != nil {
		t.Fatal(err)
	}
	// A restarted engine has nothing loaded; warm it, so that both workers
	// are alike but for the prompt's blocks.
	if err := byWorker[tieWinner].Ready(ctx, "tiny"); err != nil {
		t.Fatal(err)
	}
	hbs.waitFor(t, "the tie winner serves again, warm", 20*time.Second, func(hb schemas.Heartbeat) bool {
		m, _ := modelState(hb, "tiny")
		return hb.WorkerID == tieWinner && !hb.Draining && m.State == schemas.WeightHot
	})
	// A different prompt still goes to the tie winner: the fleet is whole.
	other, err := cl.Do(ctx, tenant, &schemas.Request{ID: "prefix-other", Model: "tiny", Prompt: "unrelated", MaxTokens: 2})
	if err != nil || other.Status != schemas.StatusOK || other.WorkerID != tieWinner {
		t.Fatalf("unrelated prompt: %+v %v (tie winner %s)", other, err, tieWinner)
	}
	again, err := cl.Do(ctx, tenant, &schemas.Request{ID: "prefix-2", Model: "tiny", Prompt: prompt + "Step two.", MaxTokens: 4})
	if err != nil {
		t.Fatal(err)
	}
	if again.Status != schemas.StatusOK || again.WorkerID != first.WorkerID {
		t.Fatalf("repeated prompt ran on %s, its prefix is on %s", again.WorkerID, first.WorkerID)
	}
}
