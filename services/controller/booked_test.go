package controller

import (
	"context"
	"fmt"
	"maps"
	"testing"
	"time"

	"github.com/switchyard-ai/switchyard/internal/core/control"
	"github.com/switchyard-ai/switchyard/internal/core/fleet"
	"github.com/switchyard-ai/switchyard/internal/core/routing"
	"github.com/switchyard-ai/switchyard/internal/testkit/bustest"
	"github.com/switchyard-ai/switchyard/internal/testkit/waitfor"
	"github.com/switchyard-ai/switchyard/schemas"
	"github.com/switchyard-ai/switchyard/services/svc"
	"github.com/switchyard-ai/switchyard/subjects"
)

// TestBookedBook: a dispatch counts on its worker from its booking until
// a heartbeat at least the routers' settle time later absorbs it, or its
// result releases it; a booking on a worker never heard from, or one the
// controller stopped counting, is not counted.
func TestBookedBook(t *testing.T) {
	t0 := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	hb := func(id string) *schemas.Heartbeat {
		return &schemas.Heartbeat{V: schemas.Version, WorkerID: id, Pool: "h100", GPU: "h100", MaxBatch: 256}
	}
	booking := func(id, worker string) routing.PeerBooking {
		return routing.PeerBooking{ID: id, Worker: worker, Class: schemas.PriorityStandard, Prefill: 100, Output: 10, Blocks: 7}
	}
	tests := []struct {
		name string
		then func(b *bookedBook)
		want map[string]int
	}{
		{"booked, not yet absorbed", func(*bookedBook) {}, map[string]int{"w1": 2, "w2": 1}},
		{"a heartbeat sooner than the settle time absorbs nothing",
			func(b *bookedBook) { b.heartbeat(hb("w1"), t0.Add(fleet.DefaultSettle/2)) }, map[string]int{"w1": 2, "w2": 1}},
		{"a heartbeat past the settle time absorbs its worker's",
			func(b *bookedBook) { b.heartbeat(hb("w1"), t0.Add(fleet.DefaultSettle)) }, map[string]int{"w2": 1}},
		{"a result releases its booking", func(b *bookedBook) { b.release("a") }, map[string]int{"w1": 1, "w2": 1}},
		{"a peer's release ends one too",
			func(b *bookedBook) { b.book([]routing.PeerBooking{{ID: "c", Released: true}}, t0) }, map[string]int{"w1": 2}},
		{"a worker no longer counted takes its bookings", func(b *bookedBook) { b.forget("w1") }, map[string]int{"w2": 1}},
		{"everything absorbed", func(b *bookedBook) {
			b.heartbeat(hb("w1"), t0.Add(2*fleet.DefaultSettle))
			b.heartbeat(hb("w2"), t0.Add(2*fleet.DefaultSettle))
		}, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			b := newBookedBook()
			b.heartbeat(hb("w1"), t0.Add(-time.Second))
			b.heartbeat(hb("w2"), t0.Add(-time.Second))
			b.book([]routing.PeerBooking{booking("a", "w1"), booking("b", "w1"), booking("c", "w2"), booking("d", "never-heard")}, t0)
			tc.then(b)
			if got := b.byWorker(); !maps.Equal(got, tc.want) || (got == nil) != (tc.want == nil) {
				t.Fatalf("booked %v, want %v", got, tc.want)
			}
			sum := 0
			for _, n := range tc.want {
				sum += n
			}
			if n := b.total(); n != sum { // switchyard_controller_booked_requests
				t.Errorf("total %d, want %d", n, sum)
			}
		})
	}
}

// TestInputsCountRoutersDispatches: on the real embedded server, a router
// dispatches five requests at once to a worker whose heartbeats have not
// counted them yet; the live controller's inputs count them on that
// worker (control.Inputs.Booked), and no longer once its heartbeats do.
// Before, a request dispatched at once was in neither the consumers'
// backlog nor any heartbeat until the worker's next one.
func TestInputsCountRoutersDispatches(t *testing.T) {
	env := bustest.StartProvisioned(t, subjects.StreamOptions{})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c := withRouter(t, ctx, env, Config{Control: control.Config{
		Pools: []control.Pool{{GPU: "h100", Model: llama, Max: 2}}, Interval: time.Hour}})
	// A worker heartbeating every 200 ms with nothing running: it never
	// takes its dispatches, so only their bookings say they exist.
	hbCtx, stopHB := context.WithCancel(ctx)
	defer stopHB()
	go func() {
		for seq := uint64(1); hbCtx.Err() == nil; seq++ {
			hb := schemas.Heartbeat{V: schemas.Version, WorkerID: "w1", Pool: "h100", GPU: "h100", Arch: "hopper", Simulated: true, Backend: "sim", TP: 1,
				HBMTotalBytes: 80 << 30, HBMFreeBytes: 40 << 30, KVBlocksTotal: 20000, KVBlocksFree: 20000, BlockSize: 16,
				Models: []schemas.ModelState{{Name: llama, Dtype: "bf16", State: schemas.WeightHot}}, MaxBatch: 256, Seq: seq,
				SentAt: time.Now(), PricePerHour: 3}
			if m, err := svc.Encode(subjects.Heartbeat("h100", "w1"), schemas.Msgpack, hb, ""); err == nil {
				env.NC.PublishMsg(m)
			}
			select {
			case <-hbCtx.Done():
			case <-time.After(200 * time.Millisecond):
			}
		}
	}()
	waitfor.True(t, "the router's consumers", 10*time.Second, func() bool {
		_, err := env.JS.Consumer(ctx, subjects.StreamAdmitted, subjects.RouterConsumer(schemas.PriorityStandard))
		return err == nil
	})
	time.Sleep(300 * time.Millisecond) // the router has heard the worker
	const n = 5
	for i := range n {
		admit(t, ctx, env, fmt.Sprintf("b-%d", i), llama)
	}
	// Every booking lives at least the settle time; poll well inside it.
	var got control.Inputs
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if got = c.inputs(ctx); got.Booked["w1"] == n {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after 10 s the controller's inputs count %v booked: want %d on w1", got.Booked, n)
		}
	}
	waitfor.True(t, "the worker's heartbeats absorbing the bookings", 10*time.Second, func() bool {
		return c.inputs(ctx).Booked == nil
	})
}
