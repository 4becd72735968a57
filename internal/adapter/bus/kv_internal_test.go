package bus

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

func TestTimedOut(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want bool
	}{
		{context.DeadlineExceeded, true},
		{fmt.Errorf("create: %w", nats.ErrTimeout), true},
		{nats.ErrNoResponders, true},
		{jetstream.ErrJetStreamNotEnabled, true},
		{jetstream.ErrBucketExists, false},
		{jetstream.ErrInvalidBucketName, false},
		{errors.New("nats: maximum payload exceeded"), false},
		{context.Canceled, false},
	} {
		if got := timedOut(tc.err); got != tc.want {
			t.Errorf("timedOut(%v) = %v, want %v", tc.err, got, tc.want)
		}
	}
}
