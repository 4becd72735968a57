package bus

import (
	"context"
	"errors"
	"fmt"

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
func OpenKV(ctx context.Context, js jetstream.JetStream, cfg jetstream.KeyValueConfig, existing KVExisting) (jetstream.KeyValue, error) {
	if cfg.History == 0 {
		cfg.History = 1
	}
	cfg.Replicas = max(1, cfg.Replicas)
	var kv jetstream.KeyValue
	var err error
	switch existing {
	case KVUpdate:
		kv, err = js.CreateOrUpdateKeyValue(ctx, cfg)
	case KVKeep:
		kv, err = js.KeyValue(ctx, cfg.Bucket)
		if errors.Is(err, jetstream.ErrBucketNotFound) {
			kv, err = js.CreateKeyValue(ctx, cfg)
			if errors.Is(err, jetstream.ErrBucketExists) {
				kv, err = js.KeyValue(ctx, cfg.Bucket)
			}
		}
	default:
		return nil, fmt.Errorf("kv bucket %s: unknown existing-bucket mode %d", cfg.Bucket, existing)
	}
	if err != nil {
		return nil, fmt.Errorf("kv bucket %s: %w", cfg.Bucket, err)
	}
	return kv, nil
}
