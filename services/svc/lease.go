package svc

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/switchyard-ai/switchyard/internal/adapter/bus"
)

// LeaseBucket is the KV bucket that holds leader leases.
const LeaseBucket = "sy_leases"

// LeaseKV opens (creating if needed) the lease bucket. Keys expire ttl
// after their last write, so a leader that dies — even by kill -9 — loses
// its lease within ttl and a standby takes over.
func LeaseKV(ctx context.Context, js jetstream.JetStream, ttl time.Duration, replicas int) (jetstream.KeyValue, error) {
	kv, err := bus.OpenKV(ctx, js, jetstream.KeyValueConfig{
		Bucket:      LeaseBucket,
		Description: "leader leases: one active router",
		TTL:         ttl,
		Replicas:    replicas,
	}, bus.KVUpdate)
	if err != nil {
		return nil, fmt.Errorf("leases: %w", err)
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

// MemberBucket is the KV bucket in which active-active routers announce
// themselves: one key per live router, expiring ttl after its last write.
const MemberBucket = "sy_routers"

// MemberKV opens (creating if needed) the membership bucket. As with the
// leases, a member killed by kill -9 drops out within ttl.
func MemberKV(ctx context.Context, js jetstream.JetStream, ttl time.Duration, replicas int) (jetstream.KeyValue, error) {
	kv, err := bus.OpenKV(ctx, js, jetstream.KeyValueConfig{
		Bucket:      MemberBucket,
		Description: "live active-active routers, one key each",
		TTL:         ttl,
		Replicas:    replicas,
	}, bus.KVUpdate)
	if err != nil {
		return nil, fmt.Errorf("router membership: %w", err)
	}
	return kv, nil
}

// RunMember keeps holder's key alive in kv and reports the sorted set of
// live members to onView whenever it changes, until ctx ends; it always
// includes holder itself. Every ttl/3 it rewrites its key (a
// compare-and-set on its revision, so a key that expired and was written
// again by a restarted namesake is not silently shared). It watches the
// bucket rather than listing it: a listing races the rewrites (a key
// rewritten while the listing runs can be missed, and a live member would
// read as dead). A member is live while its latest write is younger than
// ttl plus one refresh; a member silent that long is dead, or cut off
// from JetStream and so unable to store a dispatch. On the way out it
// deletes its own key, so peers need not wait for expiry.
func RunMember(ctx context.Context, kv jetstream.KeyValue, holder string, ttl time.Duration, onView func(live []string)) error {
	tick := ttl / 3
	var rev uint64
	defer func() {
		if rev != 0 {
			kv.Delete(context.WithoutCancel(ctx), holder, jetstream.LastRevision(rev))
		}
	}()
	w, err := kv.WatchAll(ctx)
	if err != nil {
		return fmt.Errorf("watch %s: %w", MemberBucket, err)
	}
	defer w.Stop()
	// seen holds each member's latest write time as the server stamped it;
	// skew is the server's clock minus ours, measured on our own writes, so
	// a server whose clock runs ahead or behind this host's neither keeps
	// the dead alive nor kills the living.
	seen := map[string]time.Time{}
	var skew time.Duration
	var wroteAt time.Time // our clock when we last wrote our own key
	replayed := false     // past the watch's initial values (an old incarnation's key among them)
	var last []string
	view := func() {
		live := liveMembers(holder, seen, skew, time.Now(), ttl+tick)
		if !slices.Equal(live, last) {
			last = live
			onView(live)
		}
	}
	wroteAt = time.Now()
	rev = refreshKey(ctx, kv, holder, 0)
	refresh := time.NewTicker(tick)
	defer refresh.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case e, ok := <-w.Updates():
			if !ok {
				return fmt.Errorf("watch %s ended", MemberBucket)
			}
			if e == nil {
				replayed = true // the initial values are all in
				continue
			}
			if e.Operation() == jetstream.KeyValuePut {
				// The write's own time, so a replayed old key (a member
				// killed just before we started) counts from when it was
				// written, not from when we heard of it.
				seen[e.Key()] = e.Created()
				if e.Key() == holder && replayed {
					// Our own write: the server's stamp against our clock
					// at the write (off by at most half a round trip).
					skew = e.Created().Sub(wroteAt)
				}
			} else {
				delete(seen, e.Key())
			}
			view()
		case <-refresh.C:
			view() // members whose writes stopped age out
			wroteAt = time.Now()
			rev = refreshKey(ctx, kv, holder, rev)
		}
	}
}

// liveMembers is holder and every member whose latest write, stamped by
// the server at written and moved onto this host's clock by skew (server
// minus local), is younger than maxAge at now; sorted.
func liveMembers(holder string, written map[string]time.Time, skew time.Duration, now time.Time, maxAge time.Duration) []string {
	live := []string{holder}
	for m, at := range written {
		if m != holder && now.Sub(at.Add(-skew)) < maxAge {
			live = append(live, m)
		}
	}
	slices.Sort(live)
	return live
}

// refreshKey rewrites holder's key, returning its new revision (0 when
// JetStream is unavailable; the next refresh tries again).
func refreshKey(ctx context.Context, kv jetstream.KeyValue, holder string, rev uint64) uint64 {
	var err error
	if rev != 0 {
		if rev, err = kv.Update(ctx, holder, []byte(holder), rev); err == nil {
			return rev
		}
	}
	// Expired (a long pause) or overwritten: announce afresh.
	if rev, err = kv.Put(ctx, holder, []byte(holder)); err != nil {
		if ctx.Err() == nil {
			slog.Warn("membership unavailable; retrying", "member", holder, "err", err)
		}
		return 0
	}
	return rev
}
