package routing

import (
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/vmihailenco/msgpack/v5"

	"github.com/switchyard-ai/switchyard/schemas"
)

// TestPeerBookingsPreventDoubleBooking: two routers (two Cores) see the
// same worker with room for one request's KV blocks. Router A places the
// first request; when router B counts A's booking (InPeerBooking) it holds
// the second request instead of promising the same blocks again, and
// places it once A's request's result releases them. Without the shared
// booking B double-books at once: the case the bound is about.
func TestPeerBookingsPreventDoubleBooking(t *testing.T) {
	for _, tc := range []struct {
		name  string
		share bool
	}{{"shared bookings", true}, {"no sharing", false}} {
		t.Run(tc.name, func(t *testing.T) {
			a, b := newSim(t, Config{}), newSim(t, Config{})
			hb := heartbeat("w1", 1)
			hb.KVBlocksTotal, hb.KVBlocksFree = 120, 100 // 1,600 tokens free at 16 a block
			for _, s := range []*sim{a, b} {
				s.apply(Input{Kind: InHeartbeat, Heartbeat: hb})
			}
			acts := a.admit(admitted("r1", "acme", 60e9, 1200, 16, a.now))
			d := dispatches(acts)
			if len(d) != 1 {
				t.Fatalf("router A: %d dispatches, want 1: %+v", len(d), acts)
			}
			bk := d[0].Booking
			if bk.ID != "r1" || bk.Worker != "w1" || bk.Blocks < 60 || bk.Class != "standard" {
				t.Fatalf("dispatch booking %+v: want r1 on w1, >= 60 blocks, class standard", bk)
			}
			if tc.share {
				b.apply(Input{Kind: InPeerBooking, Bookings: []PeerBooking{bk}})
			}
			got := dispatches(b.admit(admitted("r2", "acme", 60e9, 1200, 16, b.now)))
			if tc.share && len(got) != 0 {
				t.Fatalf("router B placed r2 on blocks router A booked: %+v", got)
			}
			if !tc.share {
				if len(got) != 1 {
					t.Fatalf("without sharing router B should double-book (the hazard); got %d dispatches", len(got))
				}
				return
			}
			// A's result releases its booking everywhere.
			got = dispatches(b.apply(Input{Kind: InReleased, ID: "r1", Result: &ResultSummary{Status: "ok", WorkerID: "w1"}}))
			if len(got) != 1 || got[0].ID != "r2" {
				t.Fatalf("after r1's result router B dispatched %+v, want r2", got)
			}
		})
	}
}

// TestPeerBookingOfOwnRequestIgnored: a router never counts its own
// booking twice (an echo, or a redelivery a peer also placed).
func TestPeerBookingOfOwnRequestIgnored(t *testing.T) {
	a := newSim(t, Config{})
	a.apply(Input{Kind: InHeartbeat, Heartbeat: heartbeat("w1", 1)})
	d := dispatches(a.admit(admitted("r1", "acme", 60e9, 1200, 16, a.now)))
	if len(d) != 1 {
		t.Fatalf("%d dispatches, want 1", len(d))
	}
	before := a.core.Fleet().Get("w1").BookedBlocks
	a.apply(Input{Kind: InPeerBooking, Bookings: []PeerBooking{d[0].Booking, {ID: "x", Worker: "unknown-worker", Blocks: 5}}})
	if after := a.core.Fleet().Get("w1").BookedBlocks; after != before {
		t.Fatalf("booked blocks %d -> %d after its own booking came back", before, after)
	}
}

func dispatches(acts []Action) []Action {
	var out []Action
	for _, a := range acts {
		if a.Kind == ActDispatch {
			out = append(out, a)
		}
	}
	return out
}

// TestPeerReleaseFreesTheBooking: a peer applies only its own requests'
// results, so the placing router's release (a Released entry in its next
// bookings message) is what ends a peer's copy of the booking. Router B
// holds r2 behind A's booking of r1 and places it when A's release of r1
// arrives; a release of a request B has in flight itself, or of one it
// never heard of, changes nothing.
func TestPeerReleaseFreesTheBooking(t *testing.T) {
	a, b := newSim(t, Config{}), newSim(t, Config{})
	hb := heartbeat("w1", 1)
	hb.KVBlocksTotal, hb.KVBlocksFree = 120, 100
	for _, s := range []*sim{a, b} {
		s.apply(Input{Kind: InHeartbeat, Heartbeat: hb})
	}
	d := dispatches(a.admit(admitted("r1", "acme", 60e9, 1200, 16, a.now)))
	if len(d) != 1 {
		t.Fatalf("router A: %d dispatches, want 1", len(d))
	}
	b.apply(Input{Kind: InPeerBooking, Bookings: []PeerBooking{d[0].Booking}})
	if got := dispatches(b.admit(admitted("r2", "acme", 60e9, 1200, 16, b.now))); len(got) != 0 {
		t.Fatalf("router B placed r2 on blocks A booked: %+v", got)
	}
	booked := b.core.Fleet().Get("w1").BookedBlocks
	if got := dispatches(b.apply(Input{Kind: InPeerBooking, Bookings: []PeerBooking{{ID: "never-booked", Released: true}}})); len(got) != 0 {
		t.Fatalf("a release of an unknown request dispatched %+v", got)
	}
	if after := b.core.Fleet().Get("w1").BookedBlocks; after != booked {
		t.Fatalf("booked blocks %d -> %d after releasing an unknown request", booked, after)
	}
	got := dispatches(b.apply(Input{Kind: InPeerBooking, Bookings: []PeerBooking{{ID: "r1", Released: true}}}))
	if len(got) != 1 || got[0].ID != "r2" {
		t.Fatalf("after A released r1 router B dispatched %+v, want r2", got)
	}
	// r2 is B's own now: a peer's release of it (a stale echo) must not
	// drop B's booking.
	mine := b.core.Fleet().Get("w1").BookedBlocks
	b.apply(Input{Kind: InPeerBooking, Bookings: []PeerBooking{{ID: "r2", Released: true}}})
	if after := b.core.Fleet().Get("w1").BookedBlocks; after != mine {
		t.Fatalf("B's own booking of r2: %d -> %d blocks after a peer released it", mine, after)
	}
}

// TestPeerBookingCodec: bookings and releases survive the wire and the
// journal in the array form; the map form that journals and peers wrote
// before it still decodes; a wrong-sized array is an error, not a guess.
func TestPeerBookingCodec(t *testing.T) {
	bs := []PeerBooking{
		{ID: "r1", Worker: "w1", Class: "interactive", Prefill: 1200, Output: 64, Blocks: 80},
		{ID: "r2", Released: true},
		{ID: "r3", Worker: "w-ü", Class: "batch", Prefill: 1 << 40, Output: 0, Blocks: -1},
	}
	t.Run("message", func(t *testing.T) {
		data, err := schemas.Marshal(schemas.Msgpack, bs)
		if err != nil {
			t.Fatal(err)
		}
		var got []PeerBooking
		if err := schemas.Unmarshal(schemas.Msgpack, data, &got); err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got, bs) {
			t.Fatalf("round trip:\n got %+v\nwant %+v", got, bs)
		}
	})
	t.Run("journal", func(t *testing.T) {
		j := NewJournal()
		in := Input{Kind: InPeerBooking, At: time.Unix(1700000000, 5).UTC(), Bookings: bs}
		if err := j.Add(in, 0); err != nil {
			t.Fatal(err)
		}
		es, err := DecodeJournal(j.Take())
		if err != nil || len(es) != 1 {
			t.Fatalf("decode: %d entries, %v", len(es), err)
		}
		got := es[0].Input
		if got.Kind != in.Kind || !got.At.Equal(in.At) || !reflect.DeepEqual(got.Bookings, in.Bookings) {
			t.Fatalf("journal round trip:\n got %+v\nwant %+v", got, in)
		}
	})
	t.Run("old map form", func(t *testing.T) {
		// What the reflective encoder wrote before PeerBooking had its own.
		type oldBooking struct {
			ID      string `json:"id"`
			Worker  string `json:"worker"`
			Class   string `json:"class"`
			Prefill int    `json:"prefill"`
			Output  int    `json:"output"`
			Blocks  int    `json:"blocks"`
			Extra   string `json:"extra"`
		}
		data, err := schemas.Marshal(schemas.Msgpack, []oldBooking{{ID: "r1", Worker: "w1", Class: "standard", Prefill: 7, Output: 8, Blocks: 9, Extra: "ignored"}})
		if err != nil {
			t.Fatal(err)
		}
		var got []PeerBooking
		if err := schemas.Unmarshal(schemas.Msgpack, data, &got); err != nil {
			t.Fatal(err)
		}
		want := []PeerBooking{{ID: "r1", Worker: "w1", Class: "standard", Prefill: 7, Output: 8, Blocks: 9}}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("old form: got %+v, want %+v", got, want)
		}
	})
	t.Run("wrong size", func(t *testing.T) {
		data, err := msgpack.Marshal([][]any{{"r1", "w1", "standard"}})
		if err != nil {
			t.Fatal(err)
		}
		var got []PeerBooking
		err = schemas.Unmarshal(schemas.Msgpack, data, &got)
		if err == nil || !strings.Contains(err.Error(), "3 values, want 7") {
			t.Fatalf("a 3-value booking: err %v, want one naming the count", err)
		}
	})
}
