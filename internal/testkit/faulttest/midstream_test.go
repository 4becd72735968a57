package faulttest

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/switchyard-ai/switchyard/schemas"
	"github.com/switchyard-ai/switchyard/services/client"
	"github.com/switchyard-ai/switchyard/services/svc"
	"github.com/switchyard-ai/switchyard/services/worker"
	"github.com/switchyard-ai/switchyard/subjects"
)

// TestWorkerKilledMidStream: a streamed request's worker is killed with
// SIGKILL after it has streamed part of the answer. The router re-places
// the request, and the worker that takes it over continues the stream from
// what TOKENS stored: the client receives every token exactly once, in
// order, with no gap, and one final result whose text is the concatenated
// chunks and whose usage counts every token the client got, with the
// re-prefill of prompt + streamed tokens in its reliability block.
func TestWorkerKilledMidStream(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the system as separate processes")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	s := launch(ctx, t, sysConfig{natsNodes: 1, admitters: 1, routers: 1, workers: 2})
	nc, js := s.observer()
	cl, err := client.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	const (
		tenant    = "acme"
		id        = "midstream-1"
		model     = "llama-3.1-8b"
		maxTokens = 1200 // about 8 s of decode on a simulated H100
	)

	// Where the first attempt went, from the dispatch itself.
	placed := watchPlacements(t, nc, id)

	// What the client library delivers, and every raw chunk on the wire.
	var mu sync.Mutex
	var delivered, raw []schemas.TokenChunk
	enough, done := make(chan struct{}), make(chan struct{})
	sub, err := cl.Stream(tenant, id, func(c schemas.TokenChunk) {
		mu.Lock()
		defer mu.Unlock()
		delivered = append(delivered, c)
		if len(delivered) == 10 {
			close(enough)
		}
		if c.Done {
			close(done)
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	rawSub, err := nc.Subscribe(subjects.Tokens(tenant, id), func(m *nats.Msg) {
		var c schemas.TokenChunk
		if svc.Decode(m.Header, m.Data, &c) == nil {
			mu.Lock()
			raw = append(raw, c)
			mu.Unlock()
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	defer rawSub.Unsubscribe()
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}

	prompt := strings.Repeat("continue the story of the switchyard ", 40)
	if _, err := cl.Submit(ctx, tenant, &schemas.Request{ID: id, Model: model, Prompt: prompt, MaxTokens: maxTokens,
		Stream: true, DeadlineMs: 60_000}); err != nil {
		t.Fatal(err)
	}
	var victim string
	select {
	case victim = <-placed:
	case <-ctx.Done():
		t.Fatal("the request was never dispatched")
	}
	select {
	case <-enough:
	case <-ctx.Done():
		t.Fatal("no 10 chunks streamed")
	}
	var victimProc *Proc
	for _, w := range s.workers {
		if w.Name == victim {
			victimProc = w
		}
	}
	if victimProc == nil {
		t.Fatalf("dispatched to unknown worker %q", victim)
	}
	victimProc.Kill()
	mu.Lock()
	atKill := len(delivered)
	mu.Unlock()
	t.Logf("SIGKILL %s after %d chunks", victim, atKill)

	res, err := cl.Result(ctx, tenant, id)
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("no final chunk after the result")
	}
	time.Sleep(200 * time.Millisecond) // a straggler would show up in raw
	mu.Lock()
	defer mu.Unlock()

	if res.Status != schemas.StatusOK || res.WorkerID == victim || res.Attempt < 1 {
		t.Fatalf("result %s from %s on attempt %d (%+v): want ok from the other worker on a retry", res.Status, res.WorkerID, res.Attempt, res.Error)
	}
	var text strings.Builder
	tokens := 0
	for i, c := range delivered {
		if c.Seq != uint64(i+1) {
			t.Fatalf("chunk %d delivered has seq %d: a gap or a repeat", i+1, c.Seq)
		}
		if c.Done != (i == len(delivered)-1) {
			t.Fatalf("chunk %d: done=%v, want the last chunk only", c.Seq, c.Done)
		}
		text.WriteString(c.Text)
		tokens += c.Tokens
	}
	if text.String() != res.Text {
		t.Fatalf("the chunks concatenate to %d bytes that differ from the result's %d bytes", text.Len(), len(res.Text))
	}
	// The simulated answer is a fixed sequence of words: the same words in
	// the same order, none repeated and none skipped across the failover.
	if want := worker.SimulatedText(id, model, maxTokens); res.Text != want {
		t.Fatalf("the result text is not the uninterrupted answer of %d words (got %d words)", maxTokens, len(strings.Fields(res.Text)))
	}
	if tokens != maxTokens || res.Usage.CompletionTokens != maxTokens {
		t.Fatalf("client received %d tokens, result counts %d, want %d", tokens, res.Usage.CompletionTokens, maxTokens)
	}
	rel := res.Reliability
	if rel == nil || rel.ResumedTokens <= 0 || rel.ResumedFromSeq < uint64(atKill) || rel.ReprefillGPUSeconds <= 0 ||
		rel.ReprefillTokens < rel.ResumedTokens || !contains(rel.LostWorkers, victim) {
		t.Fatalf("reliability block %+v: want the resume after ≥ %d chunks, its re-prefill priced, %s named lost", rel, atKill, victim)
	}
	if res.Usage.PromptTokens+rel.ResumedTokens < rel.ReprefillTokens {
		t.Fatalf("re-prefilled %d tokens, more than the prompt (%d) and the resumed tokens (%d)", rel.ReprefillTokens, res.Usage.PromptTokens, rel.ResumedTokens)
	}
	for _, c := range delivered {
		if c.Seq > rel.ResumedFromSeq && c.Attempt != res.Attempt {
			t.Fatalf("chunk %d from attempt %d, want %d (after the resume point %d)", c.Seq, c.Attempt, res.Attempt, rel.ResumedFromSeq)
		}
	}
	// What the client received is exactly what TOKENS holds: the record a
	// later failover would continue from.
	stored, err := readAll(ctx, js, subjects.StreamTokens, subjects.Tokens(tenant, id), decodeOne[schemas.TokenChunk])
	if err != nil {
		t.Fatal(err)
	}
	if len(stored) != len(delivered) {
		t.Fatalf("TOKENS holds %d chunks, the client received %d", len(stored), len(delivered))
	}
	for i, c := range stored {
		if d := delivered[i]; c.V.Seq != d.Seq || c.V.Text != d.Text || c.V.Done != d.Done || c.V.Attempt != d.Attempt {
			t.Fatalf("stored chunk %d (seq %d, attempt %d, done %v) differs from the one delivered (seq %d, attempt %d, done %v)",
				i, c.V.Seq, c.V.Attempt, c.V.Done, d.Seq, d.Attempt, d.Done)
		}
	}
	rec := s.recorded(ctx, js)
	if n := len(rec.finals()[id]); n != 1 {
		t.Fatalf("%d final results stored for %s, want 1", n, id)
	}
	t.Logf("%d chunks delivered (%d on the wire), resumed on %s after seq %d with %d tokens; re-prefill %d tokens, %.4f GPU-s of %.4f",
		len(delivered), len(raw), res.WorkerID, rel.ResumedFromSeq, rel.ResumedTokens, rel.ReprefillTokens, rel.ReprefillGPUSeconds, res.GPUSeconds)
}
