package bus

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/nats-io/nats.go/jetstream"
)

// KVExisting says what OpenKV does with a bucket that already exists.
type KVExisting int

const (
	// KVUpdate applies the given config to an existing bucket, so a
	// changed TTL or description takes effect at the next start. For the
	// stores whose one owner sets their size.
	KVUpdate KVExisting = iota
	// KVKeep binds an existing bucket as it is and creates it only when
	// missing. For buckets that several processes open with different
	// options (the batch store: the CLI creates it with --replicas, the
	// gateway opens it with defaults), where an update from the one with
	// defaults would scale the bucket down.
	KVKeep
)

// OpenKV creates the KV bucket cfg describes, or opens it if it exists.
// A zero History keeps one value per key and a Replicas below one means
// one replica, the defaults every Switchyard bucket uses. It is safe to
// call from every replica of a service at once: a create that loses the
// race binds the bucket the winner made.
//
// A call that times out is retried with backoff for up to a minute (or
// until ctx ends), as stream provisioning is: on a cluster under load, or
// while a replicated bucket's group forms, a create can time out, and a
// router that exited on it (seen in the chaos drill: "lease bucket:
// context deadline exceeded") left the fleet a router short. Other errors
// — a bad config, a bucket that cannot be bound — return at once.
func OpenKV(ctx context.Context, js jetstream.JetStream, cfg jetstream.KeyValueConfig, existing KVExisting) (jetstream.KeyValue, error) {
	if cfg.History == 0 {
		cfg.History = 1
	}
	cfg.Replicas = max(1, cfg.Replicas)
	if existing != KVUpdate && existing != KVKeep {
		return nil, fmt.Errorf("kv bucket %s: unknown existing-bucket mode %d", cfg.Bucket, existing)
	}
	wait := 250 * time.Millisecond
	deadline := time.Now().Add(time.Minute)
	for {
		actx, cancel := context.WithTimeout(ctx, 10*time.Second)
		kv, err := openKV(actx, js, cfg, existing)
		cancel()
		if err == nil {
			return kv, nil
		}
		if !timedOut(err) || ctx.Err() != nil || time.Now().After(deadline) {
			return nil, fmt.Errorf("kv bucket %s: %w", cfg.Bucket, err)
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("kv bucket %s: %w", cfg.Bucket, ctx.Err())
		case <-time.After(wait):
		}
		wait = min(2*wait, 4*time.Second)
	}
}

func openKV(ctx context.Context, js jetstream.JetStream, cfg jetstream.KeyValueConfig, existing KVExisting) (jetstream.KeyValue, error) {
	if existing == KVUpdate {
		return js.CreateOrUpdateKeyValue(ctx, cfg)
	}
	kv, err := js.KeyValue(ctx, cfg.Bucket)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		kv, err = js.CreateKeyValue(ctx, cfg)
		if errors.Is(err, jetstream.ErrBucketExists) {
			kv, err = js.KeyValue(ctx, cfg.Bucket)
		}
	}
	return kv, err
}

// timedOut reports whether err is a request that got no answer in time
// (worth retrying), as opposed to an answer that refused it.
func timedOut(err error) bool {
	return errors.Is(err, context.DeadlineExceeded) || errors.Is(err, nats.ErrTimeout) || errors.Is(err, nats.ErrNoResponders) ||
		errors.Is(err, jetstream.ErrJetStreamNotEnabled)
}
