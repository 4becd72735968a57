package ledger

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/switchyard-ai/switchyard/internal/testkit/bustest"
	"github.com/switchyard-ai/switchyard/schemas"
	"github.com/switchyard-ai/switchyard/subjects"
)

type env struct {
	js      jetstream.JetStream
	results jetstream.Stream
	events  jetstream.Stream
}

func setup(t *testing.T, so subjects.StreamOptions) (env, *Ledger) {
	t.Helper()
	js := bustest.StartProvisioned(t, so).JS
	l, err := New(js, WithService("test"))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	results, _ := js.Stream(ctx, subjects.StreamResults)
	events, _ := js.Stream(ctx, subjects.StreamEvents)
	return env{js, results, events}, l
}

// count returns how many messages a stream holds on subject.
func count(t *testing.T, st jetstream.Stream, subject string) int {
	t.Helper()
	info, err := st.Info(context.Background(), jetstream.WithSubjectFilter(subject))
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, c := range info.State.Subjects {
		n += int(c)
	}
	return n
}

func result(tenant, id, worker string, attempt int) schemas.Result {
	return schemas.Result{ID: id, Tenant: tenant, Status: schemas.StatusOK, Text: "answer from " + worker,
		WorkerID: worker, Attempt: attempt, SLOMet: true, Simulated: true, FinishedAt: time.Now().UTC()}
}

func TestConcurrentFinishersPublishExactlyOnce(t *testing.T) {
	e, l := setup(t, subjects.StreamOptions{})
	ctx := context.Background()
	const finishers = 8
	for _, format := range []schemas.Format{schemas.JSON, schemas.Msgpack} {
		id := fmt.Sprintf("req-%d", format)
		var wg sync.WaitGroup
		wins := make(chan string, finishers)
		start := make(chan struct{})
		for i := 0; i < finishers; i++ {
			wg.Add(1)
			go func(i int) {
				defer wg.Done()
				<-start
				w := fmt.Sprintf("w%d", i)
				ok, err := l.Finish(ctx, result("acme", id, w, i), format)
				if err != nil {
					t.Errorf("finisher %s: %v", w, err)
				}
				if ok {
					wins <- w
				}
			}(i)
		}
		close(start)
		wg.Wait()
		close(wins)
		var winners []string
		for w := range wins {
			winners = append(winners, w)
		}
		if len(winners) != 1 {
			t.Fatalf("%d finishers won, want 1: %v", len(winners), winners)
		}
		if n := count(t, e.results, subjects.Result("acme", id)); n != 1 {
			t.Fatalf("%d result messages for %s, want 1", n, id)
		}
		m, err := e.results.GetLastMsgForSubject(ctx, subjects.Result("acme", id))
		if err != nil {
			t.Fatal(err)
		}
		var got schemas.Result
		f, _ := schemas.FormatFromContentType(m.Header.Get(schemas.HeaderContentType))
		if err := schemas.Unmarshal(f, m.Data, &got); err != nil || got.WorkerID != winners[0] || f != format {
			t.Fatalf("stored result %+v (format %v, err %v), winner %s", got, f, err, winners[0])
		}
		if n := count(t, e.events, subjects.Event("test", EventDuplicateSuppressed)); n != finishers-1+int(format)*(finishers-1) {
			t.Fatalf("%d duplicate_suppressed events, want %d", n, finishers-1+int(format)*(finishers-1))
		}
		if done, err := l.Done(ctx, "acme", id); !done || err != nil {
			t.Fatalf("Done = %v, %v", done, err)
		}
	}
	if done, err := l.Done(ctx, "acme", "never-finished"); done || err != nil {
		t.Fatalf("Done for an unknown id = %v, %v", done, err)
	}
}

// TestDedupeOutlivesDuplicateWindow: a worker that comes back after its
// request was re-placed and finished elsewhere is suppressed even after the
// stream's Nats-Msg-Id window has passed, because the compare-and-set on
// the result subject still sees the first result.
func TestDedupeOutlivesDuplicateWindow(t *testing.T) {
	e, l := setup(t, subjects.StreamOptions{DuplicateWindow: 500 * time.Millisecond})
	ctx := context.Background()
	subj := subjects.Result("acme", "late")
	if ok, err := l.Finish(ctx, result("acme", "late", "w-new", 1), schemas.JSON); !ok || err != nil {
		t.Fatalf("first finish: %v %v", ok, err)
	}
	time.Sleep(time.Second)
	if ok, err := l.Finish(ctx, result("acme", "late", "w-old", 0), schemas.JSON); ok || err != nil {
		t.Fatalf("late finisher: published=%v err=%v, want false, nil", ok, err)
	}
	if n := count(t, e.results, subj); n != 1 {
		t.Fatalf("%d result messages, want 1", n)
	}
	// The suppression is reported.
	if n := count(t, e.events, subjects.Event("test", EventDuplicateSuppressed)); n != 1 {
		t.Fatalf("%d duplicate_suppressed events, want 1", n)
	}
}

// TestRetryAfterLostAckReportsPublished: a finisher whose ack was lost
// calls Finish again with the same result, after the duplicate window: it
// is told its result is the final one, and nothing is added.
func TestRetryAfterLostAckReportsPublished(t *testing.T) {
	e, l := setup(t, subjects.StreamOptions{DuplicateWindow: 200 * time.Millisecond})
	ctx := context.Background()
	r := result("acme", "retry-1", "w1", 0)
	if ok, err := l.Finish(ctx, r, schemas.Msgpack); !ok || err != nil {
		t.Fatalf("first: %v %v", ok, err)
	}
	time.Sleep(300 * time.Millisecond)
	if ok, err := l.Finish(ctx, r, schemas.Msgpack); !ok || err != nil {
		t.Fatalf("retry of the same result: %v %v", ok, err)
	}
	if n := count(t, e.results, subjects.Result("acme", "retry-1")); n != 1 {
		t.Fatalf("%d result messages, want 1", n)
	}
	if done, err := l.Done(ctx, "acme", "retry-1"); !done || err != nil {
		t.Fatalf("Done = %v %v", done, err)
	}
	if done, err := l.Done(ctx, "acme", "never"); done || err != nil {
		t.Fatalf("Done(never) = %v %v", done, err)
	}
}

func TestFinishRejectsBadTokens(t *testing.T) {
	_, l := setup(t, subjects.StreamOptions{})
	for _, r := range []schemas.Result{{Tenant: "a.b", ID: "x"}, {Tenant: "a", ID: ""}, {Tenant: "a", ID: "x*"}} {
		if ok, err := l.Finish(context.Background(), r, schemas.JSON); ok || err == nil {
			t.Fatalf("Finish(%q,%q) = %v, %v; want an error", r.Tenant, r.ID, ok, err)
		}
	}
}

// TestLiveSubscriberSeesOneResult: a core-NATS subscriber on the result
// subject — `nats sub sy.result.acme.>` — receives exactly the result the
// ledger kept, once, however many finishers race for it and however late a
// loser comes back: finishers publish on sy.final.…, which only RESULTS
// hears, and RESULTS republishes only what it stored.
func TestLiveSubscriberSeesOneResult(t *testing.T) {
	e, l := setup(t, subjects.StreamOptions{DuplicateWindow: 300 * time.Millisecond})
	ctx := context.Background()
	nc := e.js.Conn()
	sub, err := nc.SubscribeSync(subjects.Result("acme", ">"))
	if err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	const finishers = 6
	var wg sync.WaitGroup
	for i := range finishers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := l.Finish(ctx, result("acme", "raced", fmt.Sprintf("w%d", i), i), schemas.JSON); err != nil {
				t.Errorf("finisher %d: %v", i, err)
			}
		}()
	}
	wg.Wait()
	// A loser back after the duplicate window (a paused worker resumed).
	time.Sleep(500 * time.Millisecond)
	if ok, err := l.Finish(ctx, result("acme", "raced", "w-resumed", 0), schemas.JSON); ok || err != nil {
		t.Fatalf("resumed finisher: published=%v err=%v, want false, nil", ok, err)
	}
	m, err := sub.NextMsg(5 * time.Second)
	if err != nil {
		t.Fatalf("no live result: %v", err)
	}
	if m.Subject != subjects.Result("acme", "raced") || m.Header.Get("Nats-Sequence") == "" {
		t.Fatalf("live result on %q with headers %v, want the stream's republish on the result subject", m.Subject, m.Header)
	}
	stored, err := e.results.GetLastMsgForSubject(ctx, subjects.Result("acme", "raced"))
	if err != nil {
		t.Fatal(err)
	}
	if string(stored.Data) != string(m.Data) {
		t.Fatalf("live result %s differs from the stored one %s", m.Data, stored.Data)
	}
	if extra, err := sub.NextMsg(500 * time.Millisecond); err == nil {
		t.Fatalf("a second live result for one id: %s", extra.Data)
	}
}
