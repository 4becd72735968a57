package svc

import (
	"bytes"
	"fmt"
	"io"
	"strconv"
	"sync"
	"time"

	"github.com/VictoriaMetrics/metrics"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/vmihailenco/msgpack/v5"

	"github.com/switchyard-ai/switchyard/internal/adapter/bus"
	"github.com/switchyard-ai/switchyard/schemas"
	"github.com/switchyard-ai/switchyard/subjects"
)

// Event batches close at maxBatchEvents events or maxBatchBytes bytes.
const (
	maxBatchEvents = 256
	maxBatchBytes  = 128 << 10
	// eventAckWait bounds how long a batch's missing ack may hold the
	// next one back (a lost ack must not stall events for good).
	eventAckWait = 2 * time.Second
)

// eventBatcher groups decision events into fewer stored messages, Nagle's
// way: with no batch awaiting its stored ack an event goes out at once
// (a quiet system sees every event immediately); while one is in flight
// the next events wait for its ack and then leave together. Under load
// the batches grow with the round trip, and each stored message — a
// file-store write on the server whatever its size — carries many
// events. Only consecutive events of the same kind share a message, so
// every subject still names exactly what it holds and the stream keeps
// each service's events in the order they were emitted.
type eventBatcher struct {
	mu       sync.Mutex
	subject  string
	buf      bytes.Buffer
	enc      *msgpack.Encoder // writes into buf
	n        int
	inflight int
}

// newEventEncoder encodes a batch's events one after another in msgpack,
// as schemas.Marshal encodes one: json tags, only omitempty fields left out.
func newEventEncoder(w io.Writer) *msgpack.Encoder {
	enc := msgpack.NewEncoder(w)
	enc.SetCustomStructTag("json")
	return enc
}

// addEvent encodes one event straight into the batch for subject and
// sends what is due.
func (s *Shell) addEvent(subject string, ev *schemas.Event) error {
	b := &s.events
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.n > 0 && b.subject != subject {
		s.sendEventsLocked()
	}
	if b.enc == nil {
		b.enc = newEventEncoder(&b.buf)
	}
	mark := b.buf.Len()
	// By value, not through the pointer: msgpack checks each omitempty
	// field with reflect's Interface, which copies the field onto the heap
	// when it is addressable (reached through a pointer) and not when it
	// sits in a value's own copy — one allocation for the copy instead of
	// one per string field.
	if err := b.enc.Encode(*ev); err != nil {
		b.buf.Truncate(mark) // the batch keeps only whole events
		return fmt.Errorf("msgpack encode event %s: %w", ev.Kind, err)
	}
	b.subject = subject
	b.n++
	if b.inflight == 0 || b.n >= maxBatchEvents || b.buf.Len() >= maxBatchBytes {
		s.sendEventsLocked()
	}
	return nil
}

// FlushEvents sends the events held for a batch now, without waiting for
// the one in flight: a service calls it as it stops.
func (s *Shell) FlushEvents() {
	s.events.mu.Lock()
	defer s.events.mu.Unlock()
	s.sendEventsLocked()
}

func (s *Shell) sendEventsLocked() {
	b := &s.events
	if b.n == 0 {
		return
	}
	m := nats.NewMsg(b.subject)
	m.Data = bytes.Clone(b.buf.Bytes())
	m.Header.Set(schemas.HeaderContentType, schemas.ContentMsgpack)
	if b.n > 1 {
		m.Header.Set(subjects.HeaderEvents, strconv.Itoa(b.n))
	}
	n := b.n
	b.buf.Reset()
	b.n = 0
	fut, err := s.JS.PublishMsgAsync(m)
	if err != nil {
		s.Log.Warn("publish events", "subject", m.Subject, "events", n, "err", err)
		return
	}
	s.handles.eventMessages.Get(Labels{}, func() *metrics.Counter {
		return s.Metrics.GetOrCreateCounter(fmt.Sprintf(`switchyard_event_messages_total{service=%q}`, s.Service))
	}).Inc()
	b.inflight++
	go s.awaitEvents(fut)
}

// awaitEvents waits for a batch's stored ack, then sends whatever
// gathered meanwhile.
func (s *Shell) awaitEvents(fut jetstream.PubAckFuture) {
	select {
	case <-fut.Ok():
	case err := <-fut.Err():
		s.Log.Warn("events not stored", "err", err)
	case <-time.After(eventAckWait):
	}
	b := &s.events
	b.mu.Lock()
	defer b.mu.Unlock()
	b.inflight--
	if b.inflight == 0 {
		s.sendEventsLocked()
	}
}

// DecodeEvents reads every event in one message from sy.event.>: one, or
// a batch (subjects.HeaderEvents). The decoding is bus.DecodeEvents; services call
// it here beside Emit, which writes the same format.
func DecodeEvents(h nats.Header, data []byte) ([]schemas.Event, error) {
	return bus.DecodeEvents(h, data)
}
