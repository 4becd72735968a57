package enginetest

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/switchyard-ai/switchyard/internal/backend/openai"
	"github.com/switchyard-ai/switchyard/internal/bus"
	"github.com/switchyard-ai/switchyard/internal/catalog"
	"github.com/switchyard-ai/switchyard/internal/stack"
	"github.com/switchyard-ai/switchyard/schemas"
	"github.com/switchyard-ai/switchyard/services/client"
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
// single slot is free for the next request at once, long before the
// cancelled generation could have finished.
func TestCancelAbortsOnTheEngine(t *testing.T) {
	o := startEngine(t, 1, "tiny")
	st := system(t, "tiny", o.URL)
	cl := newClient(t, st, "cancel")
	nc := newNC(t, st)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
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
	time.Sleep(200 * time.Millisecond) // let it generate for a while
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
	got := len(chunks) - 1
	if got >= maxTokens {
		t.Fatalf("all %d tokens streamed: nothing was cancelled", got)
	}
	// The engine's rate before the cancel bounds how long the rest would
	// have taken; the next request must not wait for it.
	perToken := chunks[got-1].At.Sub(chunks[0].At) / time.Duration(max(1, got-1))
	remaining := time.Duration(maxTokens-got) * perToken
	next, err := o.Client("tiny").Generate(ctx, openai.Request{Prompt: "next", MaxTokens: 1}, nil)
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
}
