package svc

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// LeaseBucket is the KV bucket that holds leader leases.
const LeaseBucket = "sy_leases"

// LeaseKV opens (creating if needed) the lease bucket. Keys expire ttl
// after their last write, so a leader that dies — even by kill -9 — loses
// its lease within ttl and a standby takes over.
func LeaseKV(ctx context.Context, js jetstream.JetStream, ttl time.Duration, replicas int) (jetstream.KeyValue, error) {
	kv, err := js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{
		Bucket:      LeaseBucket,
		Description: "leader leases: one active router",
		TTL:         ttl,
		History:     1,
		Replicas:    max(1, replicas),
	})
	if err != nil {
		return nil, fmt.Errorf("lease bucket: %w", err)
	}
	return kv, nil
}

// RunAsLeader runs fn only while holder holds the lease on key, and keeps
// competing for it until ctx ends. The lease is refreshed every ttl/3 with
// a compare-and-set on its revision; when a refresh fails, fn's context is
// cancelled and RunAsLeader waits for fn before competing again, so two
// holders never run fn at once for longer than one refresh interval.
func RunAsLeader(ctx context.Context, kv jetstream.KeyValue, key, holder string, ttl time.Duration, onChange func(leader bool), fn func(context.Context) error) error {
	tick := ttl / 3
compete:
	for {
		rev, err := kv.Create(ctx, key, []byte(holder))
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			if !errors.Is(err, jetstream.ErrKeyExists) {
				// JetStream can be briefly unavailable (a cluster electing a
				// new meta leader): keep competing rather than exit, or the
				// last router standing would take the fleet down with it.
				slog.Warn("lease unavailable; retrying", "key", key, "err", err)
			}
			select {
			case <-ctx.Done():
				return nil
			case <-time.After(tick):
				continue
			}
		}
		if onChange != nil {
			onChange(true)
		}
		lctx, cancel := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() { done <- fn(lctx) }()
		lost := false
		for !lost {
			select {
			case <-ctx.Done():
				cancel()
				err := <-done
				// Step down at once so a standby need not wait for expiry.
				kv.Delete(context.WithoutCancel(ctx), key, jetstream.LastRevision(rev))
				return err
			case err := <-done:
				cancel()
				kv.Delete(context.WithoutCancel(ctx), key, jetstream.LastRevision(rev))
				if err == nil || ctx.Err() != nil {
					return err
				}
				// The leader's work failed (JetStream unavailable, say):
				// step down and compete again rather than exit.
				slog.Warn("leader work failed; stepping down", "key", key, "err", err)
				if onChange != nil {
					onChange(false)
				}
				select {
				case <-ctx.Done():
					return nil
				case <-time.After(tick):
				}
				continue compete
			case <-time.After(tick):
				r, err := kv.Update(ctx, key, []byte(holder), rev)
				if err != nil {
					lost = true
					break
				}
				rev = r
			}
		}
		cancel()
		<-done
		if onChange != nil {
			onChange(false)
		}
	}
}
