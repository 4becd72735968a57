package stack

import (
	"context"
	"fmt"
	"sort"
	"testing"
	"time"

	"github.com/switchyard-ai/switchyard/internal/control"
	"github.com/switchyard-ai/switchyard/schemas"
	"github.com/switchyard-ai/switchyard/services/client"
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
	})
	t.Run("scale up joins by heartbeat", func(t *testing.T) {
		st := startStack(t, Config{Workers: 1, Control: &ControlConfig{Min: 2, Max: 3, Control: fast}})
		deadline := time.Now().Add(30 * time.Second)
		for len(st.WorkerIDs()) < 2 {
			if time.Now().After(deadline) {
				t.Fatalf("no worker added: %v", st.WorkerIDs())
			}
			time.Sleep(50 * time.Millisecond)
		}
		// Heartbeats from both reach the controller: the pool counts 2.
		for {
			d := st.Controller().Desired()
			keys := make([]string, 0, len(d))
			for k := range d {
				keys = append(keys, k)
			}
			sort.Strings(keys)
			if len(keys) == 1 && d[keys[0]] == 2 && len(st.WorkerIDs()) == 2 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("desired %v, workers %v", d, st.WorkerIDs())
			}
			time.Sleep(50 * time.Millisecond)
		}
	})
}
