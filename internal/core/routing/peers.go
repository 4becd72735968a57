package routing

import (
	"fmt"
	"time"

	"github.com/vmihailenco/msgpack/v5"
	"github.com/vmihailenco/msgpack/v5/msgpcode"

	"github.com/switchyard-ai/switchyard/internal/core/fleet"
)

// InPeerBooking carries bookings another router made (active-active
// routing): each router books capacity in its own fleet view as it places,
// and publishes those bookings so its peers count them too until a
// heartbeat absorbs them or the request's result releases them. Without
// it a router would see a peer's placements only a heartbeat later, and
// every router could promise the same free KV blocks and batch slots.
const InPeerBooking = "peer_booking"

// PeerBooking is one booking made by another router: what Core.place
// reserved on Worker for request ID; or, with Released, the end of one:
// the placing router has applied the request's final result.
type PeerBooking struct {
	ID     string `json:"id"`
	Worker string `json:"worker"`
	Class  string `json:"class"`
	// Prefill, Output and Blocks are the booked prompt tokens still to
	// prefill, output tokens and KV blocks (placement.Decision.Booking).
	Prefill int `json:"prefill"`
	Output  int `json:"output"`
	Blocks  int `json:"blocks"`
	// Released ends the booking for ID (only ID is set). A router applies
	// only its own requests' results, so without it a peer would count a
	// finished request's booking until a heartbeat absorbed it, Settle
	// later: at a thousand requests a second, hundreds of phantom
	// bookings that hold back work the workers have room for. A peer
	// older than this field reads a release as a booking on worker "",
	// which it does not know, and skips it.
	Released bool `json:"released,omitempty"`
}

// peerBookings applies a peer's bookings and releases to the fleet view. A
// booking for a worker this router has not heard from yet, or for a request
// it already booked itself (its own dispatch echoed back), is skipped: the
// first heartbeat from that worker carries its real numbers anyway; so is a
// release of a request this router has in flight itself (it re-placed or
// adopted it). A release that freed capacity lets waiting work be placed,
// as the router's own results do.
func (c *Core) peerBookings(bs []PeerBooking, now time.Time) {
	mine := func(id string) bool { _, ok := c.placedOn[id]; return ok }
	if ApplyBookings(c.fleet, bs, now, mine) {
		c.placeReady(now)
	}
}

// ApplyBookings books bs's bookings in f and ends its releases, skipping
// the requests skip names (nil: none) and bookings on a worker f has not
// heard from (its first heartbeat counts the request anyway). It reports
// whether a release freed capacity. A router applies its peers' bookings
// with it, and the controller every router's (control.Inputs.Booked), so
// both count a booking alike.
func ApplyBookings(f *fleet.Fleet, bs []PeerBooking, now time.Time, skip func(id string) bool) (freed bool) {
	for i := range bs {
		b := &bs[i]
		if skip != nil && skip(b.ID) {
			continue
		}
		if b.Released {
			freed = f.Unreserve(b.ID) || freed
			continue
		}
		_ = f.Reserve(b.Worker, b.ID, b.Class, b.Prefill, b.Output, b.Blocks, now)
	}
	return freed
}

// peerBookingFields is how many values a PeerBooking's msgpack array holds.
const peerBookingFields = 7

// EncodeMsgpack writes a booking as a msgpack array [id, worker, class,
// prefill, output, blocks, released]: every peer decodes and journals every
// other router's bookings and releases, two of each per request, and the
// reflective map form (seven keys spelled out, an omit-empty walk per
// struct) cost several times the array's encoding and bytes.
func (b PeerBooking) EncodeMsgpack(e *msgpack.Encoder) error {
	if err := e.EncodeArrayLen(peerBookingFields); err != nil {
		return err
	}
	for _, s := range [...]string{b.ID, b.Worker, b.Class} {
		if err := e.EncodeString(s); err != nil {
			return err
		}
	}
	for _, n := range [...]int{b.Prefill, b.Output, b.Blocks} {
		if err := e.EncodeInt(int64(n)); err != nil {
			return err
		}
	}
	return e.EncodeBool(b.Released)
}

// DecodeMsgpack reads the array form, and the map form (keys as the json
// tags) that journals and peers wrote before it.
func (b *PeerBooking) DecodeMsgpack(d *msgpack.Decoder) error {
	c, err := d.PeekCode()
	if err != nil {
		return err
	}
	*b = PeerBooking{}
	if msgpcode.IsFixedMap(c) || c == msgpcode.Map16 || c == msgpcode.Map32 {
		return b.decodeMap(d)
	}
	n, err := d.DecodeArrayLen()
	if err != nil {
		return fmt.Errorf("peer booking: %w", err)
	}
	if n != peerBookingFields {
		return fmt.Errorf("peer booking: %d values, want %d", n, peerBookingFields)
	}
	for _, s := range [...]*string{&b.ID, &b.Worker, &b.Class} {
		if *s, err = d.DecodeString(); err != nil {
			return fmt.Errorf("peer booking: %w", err)
		}
	}
	for _, p := range [...]*int{&b.Prefill, &b.Output, &b.Blocks} {
		if *p, err = d.DecodeInt(); err != nil {
			return fmt.Errorf("peer booking: %w", err)
		}
	}
	if b.Released, err = d.DecodeBool(); err != nil {
		return fmt.Errorf("peer booking: %w", err)
	}
	return nil
}

func (b *PeerBooking) decodeMap(d *msgpack.Decoder) error {
	n, err := d.DecodeMapLen()
	if err != nil {
		return fmt.Errorf("peer booking: %w", err)
	}
	for i := 0; i < n; i++ {
		key, err := d.DecodeString()
		if err != nil {
			return fmt.Errorf("peer booking key: %w", err)
		}
		switch key {
		case "id":
			b.ID, err = d.DecodeString()
		case "worker":
			b.Worker, err = d.DecodeString()
		case "class":
			b.Class, err = d.DecodeString()
		case "prefill":
			b.Prefill, err = d.DecodeInt()
		case "output":
			b.Output, err = d.DecodeInt()
		case "blocks":
			b.Blocks, err = d.DecodeInt()
		case "released":
			b.Released, err = d.DecodeBool()
		default:
			err = d.Skip()
		}
		if err != nil {
			return fmt.Errorf("peer booking %s: %w", key, err)
		}
	}
	return nil
}
