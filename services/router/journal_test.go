package router_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/switchyard-ai/switchyard/internal/core/routing"
	"github.com/switchyard-ai/switchyard/internal/testkit/bustest"
	"github.com/switchyard-ai/switchyard/schemas"
	"github.com/switchyard-ai/switchyard/services/svc"
	"github.com/switchyard-ai/switchyard/subjects"
)

// TestJournalLingersWithoutActions: inputs that decide nothing (here
// heartbeats, one every 20 ms, each longer apart than a JOURNAL round trip
// on an idle server) are journaled together rather than one stored message
// each, every one of them is in the journal, in order, and those still
// lingering when the router stops are journaled as it stops.
func TestJournalLingersWithoutActions(t *testing.T) {
	env := bustest.StartProvisioned(t, subjects.StreamOptions{})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	tr := startRouter(t, ctx, env, "router-linger")
	time.Sleep(300 * time.Millisecond) // subscribed

	const beats = 30
	for i := range beats {
		hb := schemas.Heartbeat{V: schemas.Version, WorkerID: fmt.Sprintf("w%02d", i), Pool: "p", GPU: "h100"}
		m, err := svc.Encode(subjects.Heartbeat("p", hb.WorkerID), schemas.JSON, hb, "")
		if err != nil {
			t.Fatal(err)
		}
		if err := env.NC.PublishMsg(m); err != nil {
			t.Fatal(err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	env.NC.Flush()
	time.Sleep(50 * time.Millisecond) // the last beats reach the loop
	if err := tr.stop(); err != nil {
		t.Fatalf("router: %v", err)
	}

	cons, err := env.JS.OrderedConsumer(ctx, subjects.StreamJournal, jetstream.OrderedConsumerConfig{FilterSubjects: []string{subjects.Journal("router", "router-linger")}})
	if err != nil {
		t.Fatal(err)
	}
	var workers []string
	msgs := 0
	for {
		m, err := cons.Next(jetstream.FetchMaxWait(time.Second))
		if err != nil {
			break
		}
		msgs++
		es, err := routing.DecodeJournal(m.Data())
		if err != nil {
			t.Fatalf("journal message %d: %v", msgs, err)
		}
		for _, e := range es {
			if e.Kind == routing.InHeartbeat {
				workers = append(workers, e.Heartbeat.WorkerID)
			}
		}
	}
	if len(workers) != beats {
		t.Fatalf("%d heartbeats journaled, want %d: %v", len(workers), beats, workers)
	}
	for i, w := range workers {
		if want := fmt.Sprintf("w%02d", i); w != want {
			t.Fatalf("journaled heartbeat %d is %s, want %s (out of order)", i, w, want)
		}
	}
	// 30 beats over ~0.6 s with a 250 ms linger: a handful of messages,
	// where one per beat was 30 (ticks add inputs, not messages).
	if msgs > 8 {
		t.Errorf("%d journal messages for %d heartbeats and ticks: the batch did not linger", msgs, beats)
	}
	t.Logf("%d heartbeats in %d journal messages", beats, msgs)
}
