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
// reserved on Worker for request ID.
type PeerBooking struct {
	ID     string `json:"id"`
	Worker string `json:"worker"`
	Class  string `json:"class"`
	// Prefill, Output and Blocks are the booked prompt tokens still to
	// prefill, output tokens and KV blocks (placement.Decision.Booking).
	Prefill int `json:"prefill"`
	Output  int `json:"output"`
	Blocks  int `json:"blocks"`
}

// peerBookings applies a peer's bookings to the fleet view. A booking for
// a worker this router has not heard from yet, or for a request it already
// booked itself (its own dispatch echoed back), is skipped: the first
// heartbeat from that worker carries its real numbers anyway.
func (c *Core) peerBookings(bs []PeerBooking, now time.Time) {
	for i := range bs {
		b := &bs[i]
		if _, mine := c.placedOn[b.ID]; mine {
			continue
		}
		_ = c.fleet.Reserve(b.Worker, b.ID, b.Class, b.Prefill, b.Output, b.Blocks, now)
	}
}
