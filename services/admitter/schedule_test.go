package admitter

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/switchyard-ai/switchyard/internal/testkit/bustest"
	"github.com/switchyard-ai/switchyard/subjects"
)

// TestDeferredScheduleFiresOnTarget checks the deferral wire format against
// a real JetStream server: a schedule held on sy.sched.<tenant>.<id> (which
// no router consumer sees) is republished on the admitted subject at its
// time, not before, and a second schedule for the same request id is
// dropped as a duplicate.
func TestDeferredScheduleFiresOnTarget(t *testing.T) {
	e := bustest.StartProvisioned(t, subjects.StreamOptions{})
	js := e.JS
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	target := subjects.Admitted("batch", subjects.DeadlineBucket(time.Hour), "acme")
	cons, err := js.CreateOrUpdateConsumer(ctx, subjects.StreamAdmitted, jetstream.ConsumerConfig{
		FilterSubject: subjects.AdmittedClass("batch"), AckPolicy: jetstream.AckNonePolicy})
	if err != nil {
		t.Fatal(err)
	}
	at := time.Now().Add(2 * time.Second).Truncate(time.Second).Add(time.Second)
	for i := 0; i < 2; i++ {
		m := nats.NewMsg(subjects.Schedule("acme", "req-1"))
		m.Data = []byte("admitted envelope")
		m.Header.Set("Nats-Msg-Id", "req-1")
		SetSchedule(m, at, target)
		ack, err := js.PublishMsg(ctx, m)
		if err != nil {
			t.Fatalf("publish schedule: %v", err)
		}
		if i == 1 && !ack.Duplicate {
			t.Fatal("second schedule for the same request id was not deduplicated")
		}
	}
	msg, err := cons.Next(jetstream.FetchMaxWait(10 * time.Second))
	if err != nil {
		t.Fatalf("scheduled message never arrived: %v", err)
	}
	got := time.Now()
	if msg.Subject() != target || string(msg.Data()) != "admitted envelope" {
		t.Fatalf("fired on %q with %q", msg.Subject(), msg.Data())
	}
	// Second resolution: allow the server's tick, but never early by more.
	if got.Before(at.Add(-time.Second)) {
		t.Fatalf("fired at %s, scheduled for %s", got.Format(time.RFC3339Nano), at.Format(time.RFC3339))
	}
	if _, err := cons.Next(jetstream.FetchMaxWait(1500 * time.Millisecond)); err == nil {
		t.Fatal("the schedule fired twice")
	}
}
