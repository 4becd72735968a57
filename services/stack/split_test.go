package stack

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/switchyard-ai/switchyard/internal/adapter/bus"
	"github.com/switchyard-ai/switchyard/internal/adapter/trail"
	"github.com/switchyard-ai/switchyard/schemas"
	"github.com/switchyard-ai/switchyard/services/client"
	"github.com/switchyard-ai/switchyard/services/worker"
)

// TestSplitRequest runs long-prompt requests on a fleet of one prefill and
// one decode worker (no worker takes whole requests, so every one must
// split): each completes with one final result from the decode worker,
// its text the whole answer, and its trail shows both legs' dispatches and
// the KV handle between them, every one acked.
func TestSplitRequest(t *testing.T) {
	st := startStack(t, Config{Fleet: []WorkerSpec{
		{GPU: "h100", Model: "llama-3.1-8b", Dtype: "bf16", TP: 1, Role: schemas.RolePrefill, Link: "ib-ndr"},
		{GPU: "h100", Model: "llama-3.1-8b", Dtype: "bf16", TP: 1, Role: schemas.RoleDecode, Link: "ib-ndr"},
	}})
	nc, err := st.Connect("test-client")
	if err != nil {
		t.Fatal(err)
	}
	cl, err := client.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 45*time.Second)
	defer cancel()
	const model, maxTokens = "llama-3.1-8b", 64
	ids := []string{"split-a", "split-b", "split-c"}
	for i, id := range ids {
		// Distinct long prompts, so nothing is cached.
		prompt := strings.Repeat(id+" tell me about disaggregated serving ", 300)
		if _, err := cl.Submit(ctx, "acme", &schemas.Request{ID: id, Model: model, Prompt: prompt, MaxTokens: maxTokens,
			Stream: i%2 == 0, DeadlineMs: 30_000}); err != nil {
			t.Fatal(err)
		}
	}
	for _, id := range ids {
		res, err := cl.Result(ctx, "acme", id)
		if err != nil {
			t.Fatalf("%s: %v", id, err)
		}
		if res.Status != schemas.StatusOK || !strings.HasPrefix(res.WorkerID, "w2-") || res.Usage.CompletionTokens != maxTokens {
			t.Fatalf("%s: %s from %s, %d tokens (%+v); want ok from the decode worker with %d tokens",
				id, res.Status, res.WorkerID, res.Usage.CompletionTokens, res.Error, maxTokens)
		}
		if want := worker.SimulatedText(id, model, maxTokens); res.Text != want {
			t.Fatalf("%s: the text is not the whole answer", id)
		}
		t.Logf("%s: ttft %.1f ms, itl %.2f ms, total %.1f ms, gpu %.4f s", id, res.Timing.TTFTMs, res.Timing.ITLMs, res.Timing.TotalMs, res.GPUSeconds)
	}
	time.Sleep(300 * time.Millisecond) // the last acks land
	js, err := bus.JetStream(nc)
	if err != nil {
		t.Fatal(err)
	}
	trails, err := trail.Find(ctx, js, ids, trail.Options{})
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range ids {
		var prefill, decode, handle, results int
		for _, s := range trails[id] {
			switch {
			case strings.HasPrefix(s.What, "prefill leg dispatched to w1-"):
				prefill++
			case strings.HasPrefix(s.What, "decode leg dispatched to w2-") && strings.Contains(s.What, "KV from w1-"):
				decode++
			case strings.HasPrefix(s.What, "KV handle from w1-"):
				handle++
			case strings.HasPrefix(s.What, "result ok"):
				results++
			default:
				continue
			}
			if s.Stream != "RESULTS" && s.Acked != "yes" {
				t.Errorf("%s: %q not acked (%s)", id, s.What, s.Acked)
			}
		}
		if prefill != 1 || decode != 1 || handle != 1 || results != 1 {
			t.Fatalf("%s: trail has %d prefill, %d decode dispatches, %d handles, %d results; want one each:\n%s",
				id, prefill, decode, handle, results, trail.Format(id, trails[id]))
		}
	}
	t.Logf("trail:\n%s", trail.Format(ids[0], trails[ids[0]]))
	if err := st.Err(); err != nil {
		t.Fatal(err)
	}
}
