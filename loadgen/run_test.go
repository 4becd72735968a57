package loadgen

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// future is a PubAckFuture whose outcome the test controls; a nil channel
// never delivers, as an ack lost with a killed NATS node never does.
type future struct {
	ok  chan *jetstream.PubAck
	err chan error
}

func (f future) Ok() <-chan *jetstream.PubAck { return f.ok }
func (f future) Err() <-chan error            { return f.err }
func (f future) Msg() *nats.Msg               { return nil }

func TestAwaitAck(t *testing.T) {
	acked := future{ok: make(chan *jetstream.PubAck, 1)}
	acked.ok <- &jetstream.PubAck{Stream: "SUBMIT", Sequence: 1}
	failed := future{err: make(chan error, 1)}
	failed.err <- errors.New("no responders")
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	for _, tc := range []struct {
		name    string
		ctx     context.Context
		f       future
		wantErr bool
	}{
		{"acked", context.Background(), acked, false},
		{"publish failed", context.Background(), failed, true},
		{"ack never comes: bounded, then resubmitted", context.Background(), future{}, true},
		{"run cancelled", cancelled, future{}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			done := make(chan error, 1)
			go func() { done <- awaitAck(tc.ctx, tc.f, 50*time.Millisecond) }()
			select {
			case err := <-done:
				if (err != nil) != tc.wantErr {
					t.Fatalf("err %v, want error %v", err, tc.wantErr)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("awaitAck did not return: an unresolved ack hangs the run")
			}
		})
	}
}
