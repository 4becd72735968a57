package routing

import "time"

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
	freed := false
	for i := range bs {
		b := &bs[i]
		if _, mine := c.placedOn[b.ID]; mine {
			continue
		}
		if b.Released {
			freed = c.fleet.Unreserve(b.ID) || freed
			continue
		}
		_ = c.fleet.Reserve(b.Worker, b.ID, b.Class, b.Prefill, b.Output, b.Blocks, now)
	}
	if freed {
		c.placeReady(now)
	}
}
