package bus_test

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/switchyard-ai/switchyard/internal/adapter/bus"
	"github.com/switchyard-ai/switchyard/internal/testkit/bustest"
)

func TestOpenKV(t *testing.T) {
	ctx := context.Background()
	tests := []struct {
		name     string
		existing bus.KVExisting
		wantTTL  time.Duration // the bucket's TTL after the second open
	}{
		{"update applies the new config", bus.KVUpdate, 2 * time.Hour},
		{"keep binds the bucket as it is", bus.KVKeep, time.Hour},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			js := bustest.Start(t).JS
			first, err := bus.OpenKV(ctx, js, jetstream.KeyValueConfig{Bucket: "b", TTL: time.Hour}, tc.existing)
			if err != nil {
				t.Fatal(err)
			}
			st, err := first.Status(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if st.History() != 1 || st.TTL() != time.Hour {
				t.Fatalf("created with history %d ttl %v, want 1 and 1h", st.History(), st.TTL())
			}
			if _, err := first.Put(ctx, "k", []byte("v")); err != nil {
				t.Fatal(err)
			}
			second, err := bus.OpenKV(ctx, js, jetstream.KeyValueConfig{Bucket: "b", TTL: 2 * time.Hour}, tc.existing)
			if err != nil {
				t.Fatal(err)
			}
			if e, err := second.Get(ctx, "k"); err != nil || string(e.Value()) != "v" {
				t.Fatalf("second open lost the value: %v", err)
			}
			st, err = second.Status(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if st.TTL() != tc.wantTTL {
				t.Fatalf("ttl after second open %v, want %v", st.TTL(), tc.wantTTL)
			}
		})
	}
}

func TestOpenKVErrors(t *testing.T) {
	ctx := context.Background()
	js := bustest.Start(t).JS
	if _, err := bus.OpenKV(ctx, js, jetstream.KeyValueConfig{Bucket: "bad.name"}, bus.KVUpdate); err == nil {
		t.Error("a bucket name with a dot was accepted")
	}
	if _, err := bus.OpenKV(ctx, js, jetstream.KeyValueConfig{Bucket: "b"}, bus.KVExisting(7)); err == nil {
		t.Error("an unknown mode was accepted")
	}
}

// TestOpenKVRefusalIsNotRetried: a config the server refuses returns at
// once; only timeouts are retried (timedOut, kv_internal_test.go).
func TestOpenKVRefusalIsNotRetried(t *testing.T) {
	js := bustest.Start(t).JS
	start := time.Now()
	if _, err := bus.OpenKV(context.Background(), js, jetstream.KeyValueConfig{Bucket: "bad.name"}, bus.KVUpdate); err == nil || time.Since(start) > time.Second {
		t.Fatalf("a refused config: %v after %v, want an error at once", err, time.Since(start))
	}
}
