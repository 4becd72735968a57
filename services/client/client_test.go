package client

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

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

// TestReadResultsReadsTheStoredRecordOnce: ReadResults returns every
// stored result of the tenant asked for, in order, from the time asked
// for, across more than one fetch, and then returns rather than waiting
// for more.
func TestReadResultsReadsTheStoredRecordOnce(t *testing.T) {
	env := bustest.StartProvisioned(t, subjects.StreamOptions{})
	cl, err := New(env.NC)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	put := func(tenant, id string) uint64 {
		data := schemas.MustMarshal(schemas.JSON, schemas.Result{ID: id, Tenant: tenant, Status: schemas.StatusOK})
		m := nats.NewMsg(subjects.Final(tenant, id))
		m.Data = data
		m.Header.Set(schemas.HeaderContentType, schemas.JSON.String())
		ack, err := env.JS.PublishMsg(ctx, m)
		if err != nil {
			t.Fatal(err)
		}
		return ack.Sequence
	}
	for i := range 300 {
		put("acme", fmt.Sprintf("a%03d", i))
		if i%100 == 0 {
			put("globex", fmt.Sprintf("g%03d", i))
		}
	}
	late, err := env.JS.Stream(ctx, subjects.StreamResults)
	if err != nil {
		t.Fatal(err)
	}
	stored, err := late.GetMsg(ctx, put("globex", "g-late"))
	if err != nil {
		t.Fatal(err)
	}
	mid := stored.Time // from the last result's own stored time

	tests := []struct {
		tenant    string
		since     time.Time
		n         int
		first     string
		lastShown string
	}{
		{"acme", time.Time{}, 300, "a000", "a299"},
		{"*", time.Time{}, 304, "a000", "g-late"},
		{"globex", time.Time{}, 4, "g000", "g-late"},
		{"globex", mid, 1, "g-late", "g-late"},
		{"nobody", time.Time{}, 0, "", ""},
	}
	for _, tc := range tests {
		t.Run(tc.tenant, func(t *testing.T) {
			var ids []string
			start := time.Now()
			if err := cl.ReadResults(ctx, tc.tenant, tc.since, func(r schemas.Result) { ids = append(ids, r.ID) }); err != nil {
				t.Fatal(err)
			}
			if len(ids) != tc.n || (tc.n > 0 && (ids[0] != tc.first || ids[len(ids)-1] != tc.lastShown)) {
				t.Fatalf("read %d results (%v…), want %d from %q to %q", len(ids), ids[:min(3, len(ids))], tc.n, tc.first, tc.lastShown)
			}
			if !slices.IsSorted(ids[:min(len(ids), 300)]) && tc.tenant == "acme" {
				t.Fatalf("out of stream order: %v", ids)
			}
			t.Logf("%s: %d results in %s", tc.tenant, len(ids), time.Since(start).Round(time.Millisecond))
		})
	}
}

// TestResultStoredAndLive: Result finds a result stored before the call
// (with a context that has no deadline, as a caller's often has not) and
// one published after it, and a missing one waits until the context ends.
func TestResultStoredAndLive(t *testing.T) {
	env := bustest.StartProvisioned(t, subjects.StreamOptions{})
	cl, err := New(env.NC)
	if err != nil {
		t.Fatal(err)
	}
	put := func(id string) {
		m := nats.NewMsg(subjects.Final("acme", id))
		m.Data = schemas.MustMarshal(schemas.JSON, schemas.Result{ID: id, Tenant: "acme", Status: schemas.StatusOK, Text: "answer " + id})
		m.Header.Set(schemas.HeaderContentType, schemas.JSON.String())
		if _, err := env.JS.PublishMsg(context.Background(), m); err != nil {
			t.Fatal(err)
		}
	}
	put("before")
	if r, err := cl.Result(context.Background(), "acme", "before"); err != nil || r.Text != "answer before" {
		t.Fatalf("stored result: %+v %v", r, err)
	}
	go func() { time.Sleep(200 * time.Millisecond); put("after") }()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if r, err := cl.Result(ctx, "acme", "after"); err != nil || r.Text != "answer after" {
		t.Fatalf("live result: %+v %v", r, err)
	}
	short, cancel2 := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel2()
	if _, err := cl.Result(short, "acme", "never"); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("missing result: err %v, want the context's deadline", err)
	}
}
