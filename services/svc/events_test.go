package svc

import (
	"bytes"
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/switchyard-ai/switchyard/internal/core/placement"
	"github.com/switchyard-ai/switchyard/internal/core/routing"
	"github.com/switchyard-ai/switchyard/internal/testkit/bustest"
	"github.com/switchyard-ai/switchyard/schemas"
	"github.com/switchyard-ai/switchyard/subjects"
)

// storedEvents reads every message on sy.event.> back: its subject, its
// HeaderEvents value and its events.
type storedMsg struct {
	subject string
	header  string
	events  []schemas.Event
}

func storedEvents(t *testing.T, js jetstream.JetStream, want int) []storedMsg {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cons, err := js.OrderedConsumer(ctx, subjects.StreamEvents, jetstream.OrderedConsumerConfig{FilterSubjects: []string{subjects.EventAll}})
	if err != nil {
		t.Fatal(err)
	}
	var out []storedMsg
	got := 0
	for got < want {
		m, err := cons.Next(jetstream.FetchMaxWait(5 * time.Second))
		if err != nil {
			t.Fatalf("after %d of %d events: %v", got, want, err)
		}
		evs, err := DecodeEvents(m.Headers(), m.Data())
		if err != nil {
			t.Fatal(err)
		}
		got += len(evs)
		out = append(out, storedMsg{subject: m.Subject(), header: m.Headers().Get(subjects.HeaderEvents), events: evs})
	}
	return out
}

func newShell(t *testing.T) (*Shell, jetstream.JetStream) {
	t.Helper()
	env := bustest.StartProvisioned(t, subjects.StreamOptions{})
	sh, err := New("router", "r1", env.NC, nil)
	if err != nil {
		t.Fatal(err)
	}
	return sh, env.JS
}

// A lone event on a quiet system goes out at once, as a plain one-event
// message that older readers decode unchanged.
func TestEmitQuietEventGoesOutAlone(t *testing.T) {
	sh, js := newShell(t)
	sh.Emit(schemas.Event{Kind: "placed", RequestID: "r1", WorkerID: "w1"})
	msgs := storedEvents(t, js, 1)
	if len(msgs) != 1 || msgs[0].header != "" || msgs[0].subject != subjects.Event("router", "placed") {
		t.Fatalf("stored %+v, want one plain message on %s", msgs, subjects.Event("router", "placed"))
	}
	ev := msgs[0].events[0]
	if ev.RequestID != "r1" || ev.Service != "router" || ev.Fields["instance"] != "r1" || ev.At.IsZero() {
		t.Fatalf("event %+v", ev)
	}
}

// While a batch awaits its ack, events gather; a change of kind or a full
// batch sends what is held, so every message holds one kind and the stream
// keeps the order they were emitted in.
func TestEmitBatchesWhileABatchIsInFlight(t *testing.T) {
	sh, js := newShell(t)
	// Stand in for a batch whose ack has not come back yet.
	sh.events.mu.Lock()
	sh.events.inflight = 1
	sh.events.mu.Unlock()
	var emitted []string
	emit := func(kind string, n int) {
		for range n {
			id := fmt.Sprintf("e%d", len(emitted))
			emitted = append(emitted, kind+"/"+id)
			sh.Emit(schemas.Event{Kind: kind, RequestID: id})
		}
	}
	emit("placed", 10)
	emit("delayed", 1)
	emit("placed", maxBatchEvents+5)
	sh.FlushEvents()

	msgs := storedEvents(t, js, len(emitted))
	tests := []struct {
		kind   string
		events int
	}{
		{"placed", 10},             // sent when the kind changed
		{"delayed", 1},             // sent when the kind changed back
		{"placed", maxBatchEvents}, // a full batch
		{"placed", 5},              // the rest, at FlushEvents
	}
	if len(msgs) != len(tests) {
		t.Fatalf("%d messages, want %d: %+v", len(msgs), len(tests), msgs)
	}
	var stored []string
	for i, tc := range tests {
		m := msgs[i]
		if m.subject != subjects.Event("router", tc.kind) || len(m.events) != tc.events {
			t.Errorf("message %d: %d events on %s, want %d on %s", i, len(m.events), m.subject, tc.events, subjects.Event("router", tc.kind))
		}
		if tc.events > 1 && m.header != fmt.Sprint(tc.events) {
			t.Errorf("message %d: %s %q, want %d", i, subjects.HeaderEvents, m.header, tc.events)
		}
		for _, ev := range m.events {
			stored = append(stored, ev.Kind+"/"+ev.RequestID)
		}
	}
	if fmt.Sprint(stored) != fmt.Sprint(emitted) {
		t.Fatalf("stream order differs from emit order:\n got %v\nwant %v", stored, emitted)
	}
}

func TestDecodeEventsRejectsGarbage(t *testing.T) {
	tests := []struct {
		name        string
		contentType string
		data        []byte
	}{
		{"empty msgpack", schemas.ContentMsgpack, nil},
		{"truncated msgpack", schemas.ContentMsgpack, []byte{0x82, 0xa4}},
		{"bad json", schemas.ContentJSON, []byte("{")},
		{"unknown content type", "text/plain", []byte("x")},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h := map[string][]string{schemas.HeaderContentType: {tc.contentType}}
			if _, err := DecodeEvents(h, tc.data); err == nil {
				t.Fatal("decoded garbage without an error")
			}
		})
	}
}

// placementEvent is a router placement event as the router emits it: the
// pick's breakdown and its three best candidates'.
func placementEvent() schemas.Event {
	t := placement.Terms{QueueSeconds: 0.1, PrefillSeconds: 0.02, DecodeSeconds: 0.01, CompletionSeconds: 0.13, SlackSeconds: 4.2,
		ValueOfTime: 0.001, DelayValue: 0.001, WorkflowFactor: 1, PMiss: 0.01, TimeUSD: 0.0001, GPUUSD: 0.00002, TotalUSD: 0.00013, Blocks: 1}
	cands := []routing.Candidate{{Worker: "w1-h100", GPU: "h100", Terms: t}, {Worker: "w2-h100", GPU: "h100", Terms: t}, {Worker: "w3-a100", GPU: "a100", Terms: t}}
	return schemas.Event{V: schemas.Version, At: time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC), Service: "router", Kind: "placed",
		RequestID: "r1", Tenant: "acme", WorkerID: "w1-h100", Reason: "switchyard",
		Fields: map[string]any{"terms": t, "candidates": cands, "rejected": 0, "considered": 4, "class": "interactive", "queue_ms": int64(3)}}
}

// An event reads back the same whichever encoder wrote it.
func TestMarshalEventDecodesLikeSchemasMarshal(t *testing.T) {
	ev := placementEvent()
	var buf bytes.Buffer
	if err := newEventEncoder(&buf).Encode(&ev); err != nil {
		t.Fatal(err)
	}
	fast := buf.Bytes()
	slow, err := schemas.Marshal(schemas.Msgpack, ev)
	if err != nil {
		t.Fatal(err)
	}
	h := map[string][]string{schemas.HeaderContentType: {schemas.ContentMsgpack}}
	a, errA := DecodeEvents(h, fast)
	b, errB := DecodeEvents(h, slow)
	if errA != nil || errB != nil || len(a) != 1 || len(b) != 1 {
		t.Fatalf("decode: %v %v", errA, errB)
	}
	if !a[0].At.Equal(b[0].At) {
		t.Fatalf("at %v vs %v", a[0].At, b[0].At)
	}
	a[0].At, b[0].At = ev.At, ev.At
	// Zero fields are written now, so a decoded breakdown may hold them
	// where the omit-empty encoding left them out; every value the
	// omit-empty encoding kept must read back the same.
	if !containsAll(a[0].Fields, b[0].Fields) || a[0].RequestID != b[0].RequestID || a[0].Kind != b[0].Kind {
		t.Fatalf("decoded differently:\n fast %+v\n slow %+v", a[0], b[0])
	}
}

// containsAll reports whether got holds every value of want, recursively,
// where absent from want means zero.
func containsAll(got, want any) bool {
	switch w := want.(type) {
	case map[string]any:
		g, ok := got.(map[string]any)
		if !ok {
			return false
		}
		for k, v := range w {
			if !containsAll(g[k], v) {
				return false
			}
		}
		return true
	case []any:
		g, ok := got.([]any)
		if !ok || len(g) != len(w) {
			return false
		}
		for i := range w {
			if !containsAll(g[i], w[i]) {
				return false
			}
		}
		return true
	}
	return fmt.Sprint(got) == fmt.Sprint(want)
}

func BenchmarkMarshalEvent(b *testing.B) {
	ev := placementEvent()
	b.Run("schemas.Marshal", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := schemas.Marshal(schemas.Msgpack, ev); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("batch encoder", func(b *testing.B) {
		b.ReportAllocs()
		var buf bytes.Buffer
		enc := newEventEncoder(&buf)
		for b.Loop() {
			buf.Reset()
			if err := enc.Encode(&ev); err != nil {
				b.Fatal(err)
			}
		}
	})
}
