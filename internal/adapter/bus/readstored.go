package bus

import (
	"context"
	"errors"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// ReadStored calls fn, in stream order, for each message an ordered
// consumer with cfg delivers, from cfg's start up to the stream's last
// message when the read began, and at most limit messages (0: no limit).
// It is how a reader reconciles against the durable record in one pass:
// loadgen's count of results, an incident's trail.
//
// The first fetch asks for one message: its metadata says how many are
// left after it, so no fetch waits for a batch the stream (or the filter)
// cannot fill. A fetch that waits out wait empty means there is nothing
// more from where the read is — aged out, or all before cfg's start.
func ReadStored(ctx context.Context, st jetstream.Stream, cfg jetstream.OrderedConsumerConfig, limit int, wait time.Duration,
	fn func(jetstream.Msg, *jetstream.MsgMetadata)) error {
	info, err := st.Info(ctx)
	if err != nil {
		return err
	}
	last := info.State.LastSeq
	if info.State.Msgs == 0 || last == 0 {
		return nil
	}
	cons, err := st.OrderedConsumer(ctx, cfg)
	if err != nil {
		return err
	}
	read := 0
	for ask := 1; limit <= 0 || read < limit; {
		if limit > 0 {
			ask = min(ask, limit-read)
		}
		batch, err := cons.Fetch(ask, jetstream.FetchMaxWait(wait))
		if err != nil {
			return err
		}
		got, done := 0, false
		for m := range batch.Messages() {
			got++
			read++
			md, err := m.Metadata()
			if err != nil {
				continue
			}
			done = done || md.Sequence.Stream >= last || md.NumPending == 0
			ask = int(min(md.NumPending, 256))
			fn(m, md)
		}
		if err := batch.Error(); err != nil && !errors.Is(err, jetstream.ErrNoMessages) && !errors.Is(err, nats.ErrTimeout) {
			return err
		}
		if done || got == 0 || ask == 0 {
			return ctx.Err()
		}
	}
	return ctx.Err()
}
