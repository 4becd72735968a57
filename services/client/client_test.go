package client

import (
	"context"
	"testing"
	"time"

	"github.com/switchyard-ai/switchyard/internal/testkit/bustest"
	"github.com/switchyard-ai/switchyard/schemas"
	"github.com/switchyard-ai/switchyard/subjects"
)

// TestResubmitRidesOutAMissingStream: while no stream answers (as during a
// JetStream leader election) a plain Submit fails at once; Resubmit backs
// off until the stream is there, and a second Resubmit of the same id is
// deduped — the stream holds the request once.
func TestResubmitRidesOutAMissingStream(t *testing.T) {
	env := bustest.Start(t)
	cl, err := New(env.NC)
	if err != nil {
		t.Fatal(err)
	}
	req := &schemas.Request{ID: "rs-1", Model: "llama-3.1-8b", Prompt: "hi", MaxTokens: 4}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	_, err = cl.Submit(ctx, "acme", req)
	cancel()
	if err == nil {
		t.Fatal("Submit succeeded with no SUBMIT stream")
	}

	go func() {
		time.Sleep(700 * time.Millisecond)
		pctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := subjects.Provision(pctx, env.JS, subjects.StreamOptions{}); err != nil {
			t.Errorf("provision: %v", err)
		}
	}()
	ctx, cancel = context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for i := 0; i < 2; i++ {
		if id, err := cl.Resubmit(ctx, "acme", req); err != nil || id != "rs-1" {
			t.Fatalf("Resubmit #%d: %q, %v", i+1, id, err)
		}
	}
	st, err := env.JS.Stream(ctx, subjects.StreamSubmit)
	if err != nil {
		t.Fatal(err)
	}
	info, err := st.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if n := info.State.Msgs; n != 1 {
		t.Fatalf("SUBMIT holds %d messages after two resubmits of one id, want 1", n)
	}

	// A context that ends first is reported, not retried forever.
	gone := &schemas.Request{ID: "rs-2", Model: "llama-3.1-8b", Prompt: "hi", MaxTokens: 4}
	if err := env.JS.DeleteStream(ctx, subjects.StreamSubmit); err != nil {
		t.Fatal(err)
	}
	short, cancel2 := context.WithTimeout(context.Background(), 400*time.Millisecond)
	defer cancel2()
	if _, err := cl.Resubmit(short, "acme", gone); err == nil {
		t.Fatal("Resubmit succeeded with no stream and an expiring context")
	}
}
