package controller_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/switchyard-ai/switchyard/internal/core/control"
	"github.com/switchyard-ai/switchyard/internal/testkit/waitfor"
	"github.com/switchyard-ai/switchyard/schemas"
	"github.com/switchyard-ai/switchyard/services/client"
	"github.com/switchyard-ai/switchyard/services/controller"
	"github.com/switchyard-ai/switchyard/services/stack"
)

// TestScaleDownDrainsWithoutLossOrDuplicates runs the whole system on a
// real embedded JetStream server, loads it, and has the scaler take the
// pool from 3 workers to 0 mid-load and then back to 1: the drained
// workers finish what they hold, the new one serves what waited, and every
// request gets exactly one result.
func TestScaleDownDrainsWithoutLossOrDuplicates(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	st, err := stack.Start(ctx, stack.Config{Workers: 3, SpeedUp: 4})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	pool := control.Pool{GPU: stack.DefaultWorker.GPU, Model: stack.DefaultWorker.Model, Dtype: stack.DefaultWorker.Dtype, TP: 1, Min: 0, Max: 3}
	nc, err := st.Connect("scaler")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var stopped []string
	sc, err := controller.NewScaler(nc, controller.ScalerConfig{
		Pools: []control.Pool{pool},
		Add: func(p control.Pool) (string, error) {
			return st.AddWorker(stack.WorkerSpec{GPU: p.GPU, Model: p.Model, Dtype: p.Dtype, TP: p.TP})
		},
		Stop: func(id string) error {
			mu.Lock()
			stopped = append(stopped, id)
			mu.Unlock()
			return st.StopWorker(id)
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	sctx, stopScaler := context.WithCancel(ctx)
	scalerDone := make(chan error, 1)
	go func() { scalerDone <- sc.Run(sctx) }()
	waitfor.True(t, "the scaler to see 3 workers", 10*time.Second, func() bool { return sc.Known(pool.Key()) == 3 })

	cnc, err := st.Connect("client")
	if err != nil {
		t.Fatal(err)
	}
	cl, err := client.New(cnc)
	if err != nil {
		t.Fatal(err)
	}
	var rmu sync.Mutex
	got := map[string][]schemas.Result{}
	rctx, stopResults := context.WithCancel(ctx)
	defer stopResults()
	go cl.Results(rctx, "*", func(r schemas.Result) {
		rmu.Lock()
		got[r.ID] = append(got[r.ID], r)
		rmu.Unlock()
	})
	count := func() int {
		rmu.Lock()
		defer rmu.Unlock()
		return len(got)
	}

	const n = 120
	ids := make([]string, n)
	submit := func(i int) {
		ids[i] = fmt.Sprintf("drain-%03d", i)
		req := &schemas.Request{ID: ids[i], Model: pool.Model, Prompt: fmt.Sprintf("request %d about scaling", i), MaxTokens: 500, Priority: schemas.PriorityBatch}
		if _, err := cl.Submit(ctx, "acme", req); err != nil {
			t.Error(err)
		}
	}
	for i := 0; i < n/2; i++ {
		submit(i)
	}
	waitfor.True(t, "the first results", 30*time.Second, func() bool { return count() >= 10 })
	// Mid-load, with requests still arriving, the pool goes to zero: every
	// worker drains what it holds while the rest waits in the router.
	go sc.Reconcile(pool.Key(), 0)
	for i := n / 2; i < n; i++ {
		submit(i)
		time.Sleep(5 * time.Millisecond)
	}
	waitfor.True(t, "every worker drained", 60*time.Second, func() bool { return len(st.WorkerIDs()) == 0 })
	// Back to one: a new worker joins by heartbeat and serves the rest.
	waitfor.True(t, "the scaler to forget the drained workers", 10*time.Second, func() bool { return sc.Known(pool.Key()) == 0 })
	sc.Reconcile(pool.Key(), 1)
	waitfor.True(t, "every result", 60*time.Second, func() bool { return count() == n })
	time.Sleep(300 * time.Millisecond) // room for a duplicate to show up

	rmu.Lock()
	defer rmu.Unlock()
	byWorker := map[string]int{}
	for _, id := range ids {
		rs := got[id]
		if len(rs) != 1 {
			t.Errorf("%s: %d results", id, len(rs))
			continue
		}
		if rs[0].Status != schemas.StatusOK {
			t.Errorf("%s: status %s %+v", id, rs[0].Status, rs[0].Error)
		}
		byWorker[rs[0].WorkerID]++
	}
	mu.Lock()
	defer mu.Unlock()
	if len(stopped) != 3 {
		t.Fatalf("stopped %v, want 3 workers", stopped)
	}
	drainedServed := 0
	for _, id := range stopped {
		drainedServed += byWorker[id]
	}
	if drainedServed == 0 {
		t.Errorf("the drained workers served nothing: the test did not stop them mid-load (%v)", byWorker)
	}
	t.Logf("results per worker: %v; drained %v", byWorker, stopped)
	stopScaler()
	if err := <-scalerDone; err != nil {
		t.Error(err)
	}
}
