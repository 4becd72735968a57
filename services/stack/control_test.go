package stack

import (
	"context"
	"fmt"
	"reflect"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/switchyard-ai/switchyard/internal/core/control"
	"github.com/switchyard-ai/switchyard/schemas"
	"github.com/switchyard-ai/switchyard/services/client"
	"github.com/switchyard-ai/switchyard/services/svc"
	"github.com/switchyard-ai/switchyard/subjects"
)

// TestControlScalesTheStack runs the controller and the local scaler in a
// stack on the real embedded server: an idle three-worker fleet with the
// scale-down damping shortened drains to the pool minimum while requests
// are in flight, each request getting exactly one successful result; and
// a one-worker fleet below its minimum gets a new worker that joins by
// heartbeat.
func TestControlScalesTheStack(t *testing.T) {
	fast := control.Config{Interval: 200 * time.Millisecond, DownWindow: time.Second, DownCooldown: 500 * time.Millisecond, UpCooldown: 500 * time.Millisecond}
	t.Run("scale down drains with nothing lost", func(t *testing.T) {
		st := startStack(t, Config{Workers: 3, Control: &ControlConfig{Min: 1, Max: 3, Control: fast}})
		nc, err := st.Connect("control-test")
		if err != nil {
			t.Fatal(err)
		}
		cl, err := client.New(nc)
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 45*time.Second)
		defer cancel()
		var ids []string
		for i := 0; i < 30; i++ {
			id := fmt.Sprintf("cs-%02d", i)
			ids = append(ids, id)
			if _, err := cl.Submit(ctx, "acme", &schemas.Request{ID: id, Model: "llama-3.1-8b", Prompt: "scale me down", MaxTokens: 32}); err != nil {
				t.Fatal(err)
			}
			time.Sleep(20 * time.Millisecond)
		}
		for _, id := range ids {
			r, err := cl.Result(ctx, "acme", id)
			if err != nil {
				t.Fatalf("%s: %v", id, err)
			}
			if r.Status != schemas.StatusOK {
				t.Fatalf("%s: status %s %+v", id, r.Status, r.Error)
			}
		}
		for len(st.WorkerIDs()) > 1 {
			if ctx.Err() != nil {
				t.Fatalf("fleet never drained to the minimum: workers %v, desired %v", st.WorkerIDs(), st.Controller().Desired())
			}
			time.Sleep(50 * time.Millisecond)
		}
		// Once their drains finish, the drained workers stop costing:
		// GPU-hours grow at one GPU-second per second, not three. Each
		// reading is bracketed by clock reads, so the bounds hold however
		// loaded the machine is.
		for {
			outer0 := time.Now()
			g0 := st.GPUHours()
			inner0 := time.Now()
			time.Sleep(300 * time.Millisecond)
			inner1 := time.Now()
			g1 := st.GPUHours()
			outer1 := time.Now()
			grew := (g1 - g0) * 3600
			lo, hi := inner1.Sub(inner0).Seconds(), outer1.Sub(outer0).Seconds()
			if grew >= lo && grew <= hi {
				break
			}
			if ctx.Err() != nil {
				t.Fatalf("GPU-seconds grew %.3f over [%.3f, %.3f] s of wall time with one worker left: drained workers still counted", grew, lo, hi)
			}
		}
	})
	t.Run("scale up joins by heartbeat once loaded", func(t *testing.T) {
		// SpeedUp 20 compresses the 29.4 s cold load to 1.5 s.
		st := startStack(t, Config{Workers: 1, SpeedUp: 20, Control: &ControlConfig{Min: 2, Max: 3, Control: fast}})
		first := st.WorkerIDs()
		nc, err := st.Connect("control-test-hb")
		if err != nil {
			t.Fatal(err)
		}
		var mu sync.Mutex
		states := map[string][]string{} // weight states heartbeated, by worker
		sub, err := nc.Subscribe(subjects.HeartbeatAll, func(m *nats.Msg) {
			var hb schemas.Heartbeat
			if svc.Decode(m.Header, m.Data, &hb) != nil || len(hb.Models) == 0 {
				return
			}
			mu.Lock()
			states[hb.WorkerID] = append(states[hb.WorkerID], hb.Models[0].State)
			mu.Unlock()
		})
		if err != nil {
			t.Fatal(err)
		}
		defer sub.Unsubscribe()
		deadline := time.Now().Add(30 * time.Second)
		for len(st.WorkerIDs()) < 2 {
			if time.Now().After(deadline) {
				t.Fatalf("no worker added: %v", st.WorkerIDs())
			}
			time.Sleep(50 * time.Millisecond)
		}
		var added string
		for _, id := range st.WorkerIDs() {
			if id != first[0] {
				added = id
			}
		}
		// The new worker is provisioned (paid for) while it loads, and its
		// heartbeats, once they come, already say its weights are hot: it
		// never joins as a cold worker that placement would avoid.
		for {
			mu.Lock()
			got := slices.Clone(states[added])
			mu.Unlock()
			for _, state := range got {
				if state != schemas.WeightHot {
					t.Fatalf("worker %s heartbeated weights %q before it was loaded (states %v)", added, state, got)
				}
			}
			if len(got) >= 2 && reflect.DeepEqual(st.Controller().Desired(), map[string]int{control.PoolKey("h100", "llama-3.1-8b"): 2}) {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("worker %s heartbeats %v, desired %v", added, got, st.Controller().Desired())
			}
			time.Sleep(50 * time.Millisecond)
		}
	})
}
