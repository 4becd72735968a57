package worker

import (
	"testing"
	"time"
)

func TestTombstones(t *testing.T) {
	w := &Worker{}
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	w.bury("acme", "r1", "client_disconnected", now)
	if _, ok := w.exhume("other", "r1", now); ok {
		t.Fatal("a cancel from another tenant must not match")
	}
	if reason, ok := w.exhume("acme", "r1", now.Add(time.Second)); !ok || reason != "client_disconnected" {
		t.Fatalf("exhume = %q %v", reason, ok)
	}
	if _, ok := w.exhume("acme", "r1", now); ok {
		t.Fatal("a tombstone is used once")
	}
	w.bury("acme", "r2", "x", now)
	if _, ok := w.exhume("acme", "r2", now.Add(tombstoneTTL+time.Second)); ok {
		t.Fatal("an expired tombstone must not cancel")
	}
	for i := 0; i < maxTombstones+10; i++ {
		w.bury("acme", string(rune('a'+i%26))+time.Duration(i).String(), "x", now)
	}
	if len(w.tombstones) > maxTombstones {
		t.Fatalf("%d tombstones, cap %d", len(w.tombstones), maxTombstones)
	}
}
