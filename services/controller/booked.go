package controller

import (
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/switchyard-ai/switchyard/internal/core/fleet"
	"github.com/switchyard-ai/switchyard/internal/core/routing"
	"github.com/switchyard-ai/switchyard/schemas"
	"github.com/switchyard-ai/switchyard/services/svc"
	"github.com/switchyard-ai/switchyard/subjects"
)

// The requests routers dispatched that no heartbeat shows yet
// (control.Inputs.Booked). A router acks an admitted message once its
// dispatch is stored, so a request placed at once leaves the consumers'
// backlog before its worker's next heartbeat counts it; at a burst's onset
// that is most of the burst. Every router publishes its dispatches'
// bookings on sy.rpc.book.<router> (the messages active-active peers book
// from), and the controller keeps them in the routers' own fleet view,
// fleet.Fleet, fed the same heartbeats: the booking a heartbeat absorbs
// there (the first one at least fleet.DefaultSettle after it, the routers'
// setting) is the one it absorbs here, and a request's result releases it.
// A lost core-NATS message costs one booking until that result.

// bookedBook is the routers' bookings as the controller follows them.
type bookedBook struct {
	mu sync.Mutex
	f  *fleet.Fleet
}

func newBookedBook() *bookedBook { return &bookedBook{f: fleet.New(fleet.Options{})} }

// follow subscribes to every router's bookings; the returned function
// unsubscribes.
func (b *bookedBook) follow(nc *nats.Conn, now func() time.Time) (func(), error) {
	sub, err := nc.Subscribe(subjects.PeerBookingsAll, func(m *nats.Msg) {
		var bs []routing.PeerBooking
		if err := svc.Decode(m.Header, m.Data, &bs); err != nil {
			return
		}
		b.book(bs, now())
	})
	if err != nil {
		return nil, fmt.Errorf("controller: router bookings: %w", err)
	}
	return func() { _ = sub.Unsubscribe() }, nil
}

// book applies bookings and releases as a router applies its peers'
// (routing.ApplyBookings).
func (b *bookedBook) book(bs []routing.PeerBooking, now time.Time) {
	b.mu.Lock()
	defer b.mu.Unlock()
	routing.ApplyBookings(b.f, bs, now, nil)
}

// heartbeat absorbs the bookings the worker's heartbeat now counts.
func (b *bookedBook) heartbeat(hb *schemas.Heartbeat, now time.Time) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.f.ApplyHeartbeat(hb, now)
}

// release ends a request's booking on its final result.
func (b *bookedBook) release(id string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.f.Unreserve(id)
}

// forget drops a worker the controller no longer counts (stale), with its
// bookings.
func (b *bookedBook) forget(worker string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.f.Remove(worker)
}

// byWorker is the bookings no heartbeat has absorbed, by worker ID; nil
// when there are none.
func (b *bookedBook) byWorker() map[string]int {
	b.mu.Lock()
	defer b.mu.Unlock()
	var out map[string]int
	for _, w := range b.f.Workers() {
		if w == nil || w.BookedRequests <= 0 {
			continue
		}
		if out == nil {
			out = map[string]int{}
		}
		out[w.ID] = w.BookedRequests
	}
	return out
}

// total is the bookings no heartbeat has absorbed, over every worker.
func (b *bookedBook) total() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.f.Bookings()
}
