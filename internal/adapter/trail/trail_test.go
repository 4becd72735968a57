package trail

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/switchyard-ai/switchyard/internal/testkit/bustest"
	"github.com/switchyard-ai/switchyard/schemas"
	"github.com/switchyard-ai/switchyard/subjects"
)

func publish(t *testing.T, js jetstream.JetStream, subject, msgID string, v any) {
	t.Helper()
	m := nats.NewMsg(subject)
	m.Data = schemas.MustMarshal(schemas.Msgpack, v)
	m.Header.Set(schemas.HeaderContentType, schemas.Msgpack.String())
	if msgID != "" {
		m.Header.Set(schemas.HeaderMsgID, msgID)
	}
	if _, err := js.PublishMsg(context.Background(), m); err != nil {
		t.Fatal(err)
	}
}

// TestFindFollowsARequestThroughTheStreams stores the messages a request
// leaves on its way (in the services' wire shapes) for two requests and
// checks each trail names only its own, in order, with the worker
// consumer's ack state: one dispatch acked, the re-placement pending.
func TestFindFollowsARequestThroughTheStreams(t *testing.T) {
	env := bustest.StartProvisioned(t, subjects.StreamOptions{})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	js := env.JS

	for _, id := range []string{"req-a", "req-b"} {
		publish(t, js, subjects.Submit("acme"), id, schemas.Request{ID: id, Model: "m"})
		publish(t, js, subjects.Admitted("interactive", "b0", "acme"), id, schemas.Admitted{Request: schemas.Request{ID: id}})
	}
	publish(t, js, subjects.Dispatch("w1"), "req-a-a0", schemas.Dispatch{WorkerID: "w1"})
	// The worker reads its dispatches with a durable consumer and acks
	// the first; the re-placement on w2 stays unacked.
	cons, err := js.CreateOrUpdateConsumer(ctx, subjects.StreamDispatch, jetstream.ConsumerConfig{
		Durable: subjects.WorkerConsumer("w1"), FilterSubject: subjects.Dispatch("w1"), AckPolicy: jetstream.AckExplicitPolicy})
	if err != nil {
		t.Fatal(err)
	}
	batch, err := cons.Fetch(1, jetstream.FetchMaxWait(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	for m := range batch.Messages() {
		if err := m.DoubleAck(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := js.CreateOrUpdateConsumer(ctx, subjects.StreamDispatch, jetstream.ConsumerConfig{
		Durable: subjects.WorkerConsumer("w2"), FilterSubject: subjects.Dispatch("w2"), AckPolicy: jetstream.AckExplicitPolicy}); err != nil {
		t.Fatal(err)
	}
	publish(t, js, subjects.Dispatch("w2"), "req-a-a1", schemas.Dispatch{WorkerID: "w2"})
	// Two events in one batch message, as the router sends them: one for
	// each request.
	evs := nats.NewMsg(subjects.Event("router", "placed"))
	evs.Data = append(schemas.MustMarshal(schemas.Msgpack, schemas.Event{Service: "router", Kind: "placed", RequestID: "req-a", WorkerID: "w1"}),
		schemas.MustMarshal(schemas.Msgpack, schemas.Event{Service: "router", Kind: "shed", RequestID: "req-b", Reason: "queue full"})...)
	evs.Header.Set(schemas.HeaderContentType, schemas.Msgpack.String())
	evs.Header.Set(subjects.HeaderEvents, "2")
	if _, err := js.PublishMsg(ctx, evs); err != nil {
		t.Fatal(err)
	}
	publish(t, js, subjects.Final("acme", "req-b"), "req-b", schemas.Result{ID: "req-b", Status: schemas.StatusShed,
		Error: &schemas.Error{Code: "overloaded", Message: "queue full"}})

	got, err := Find(ctx, js, []string{"req-a", "req-b", "req-none"}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	whats := func(id string) []string {
		var w []string
		for _, s := range got[id] {
			w = append(w, s.Stream+": "+s.What+" "+s.Acked)
		}
		return w
	}
	tests := []struct {
		id   string
		want []string
	}{
		{"req-a", []string{
			"SUBMIT: submitted ", "ADMITTED: admitted ",
			"DISPATCH: dispatched to w1, attempt 0 yes", "DISPATCH: dispatched to w2, attempt 1 not yet delivered",
			"EVENTS: event router.placed on w1 ",
		}},
		{"req-b", []string{
			"SUBMIT: submitted ", "ADMITTED: admitted ",
			"EVENTS: event router.shed: queue full ", "RESULTS: result shed (overloaded: queue full) ",
		}},
		{"req-none", nil},
	}
	for _, tc := range tests {
		t.Run(tc.id, func(t *testing.T) {
			w := whats(tc.id)
			if strings.Join(w, "\n") != strings.Join(tc.want, "\n") {
				t.Errorf("trail:\n%s\nwant:\n%s", strings.Join(w, "\n"), strings.Join(tc.want, "\n"))
			}
		})
	}
	if f := Format("req-none", got["req-none"]); !strings.Contains(f, "no stored message") {
		t.Errorf("empty trail formats as %q", f)
	}
	if f := Format("req-a", got["req-a"]); !strings.Contains(f, "[acked: yes]") || !strings.Contains(f, "#") {
		t.Errorf("trail formats as %q", f)
	}
}

func TestSubjectMatches(t *testing.T) {
	tests := []struct {
		filter, subject string
		want            bool
	}{
		{"sy.dispatch.w1", "sy.dispatch.w1", true},
		{"sy.dispatch.w1", "sy.dispatch.w10", false},
		{"sy.dispatch.*", "sy.dispatch.w1", true},
		{"sy.admitted.interactive.>", "sy.admitted.interactive.b0.acme", true},
		{"sy.admitted.interactive.>", "sy.admitted.interactive", false},
		{"sy.admitted.standard.>", "sy.admitted.interactive.b0.acme", false},
	}
	for _, tc := range tests {
		if got := subjectMatches(tc.filter, tc.subject); got != tc.want {
			t.Errorf("subjectMatches(%q, %q) = %v, want %v", tc.filter, tc.subject, got, tc.want)
		}
	}
}
