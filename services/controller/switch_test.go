package controller_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/switchyard-ai/switchyard/internal/core/control"
	"github.com/switchyard-ai/switchyard/schemas"
	"github.com/switchyard-ai/switchyard/services/client"
	"github.com/switchyard-ai/switchyard/services/stack"
	"github.com/switchyard-ai/switchyard/services/svc"
	"github.com/switchyard-ai/switchyard/services/worker"
	"github.com/switchyard-ai/switchyard/subjects"
)

// TestGPUsChangeModelLive is issue 30's GPUs that change model on the real
// embedded JetStream server with simulated workers: three H100s, two
// serving Llama (each with Qwen asleep in host memory) and one serving
// Qwen. Traffic moves to Qwen; the live controller (ShiftModels) orders a
// switch, a Llama worker drains, sleeps Llama and wakes Qwen, and Qwen's
// requests are then served by it too. Llama's requests sent meanwhile are
// all served by the Llama worker left; every request gets exactly one
// result, the scaler starts and stops no worker, and the fleet stays
// three GPUs.
func TestGPUsChangeModelLive(t *testing.T) {
	const llama, qwen = "llama-3.1-8b", "qwen2.5-7b"
	ctx, cancel := context.WithTimeout(context.Background(), 45*time.Second)
	defer cancel()
	fast := control.Config{Interval: 200 * time.Millisecond, ShiftModels: true}
	st, err := stack.Start(ctx, stack.Config{SpeedUp: 1, Fleet: []stack.WorkerSpec{
		{GPU: "h100", Model: llama}, {GPU: "h100", Model: llama}, {GPU: "h100", Model: qwen},
	}, Control: &stack.ControlConfig{Control: fast}})
	if err != nil {
		t.Fatalf("start stack: %v", err)
	}
	defer st.Close()
	if got := st.Controller().ShiftPools(); !got[control.PoolKey("h100", llama)] || !got[control.PoolKey("h100", qwen)] {
		t.Fatalf("shift pools %v: want both models' H100 pools", got)
	}
	first := st.WorkerIDs()
	nc, err := st.Connect("switch-test")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var ordered, switched, refused []schemas.Event
	results := map[string]int{}
	watch := func(subject string, fn func(ev schemas.Event)) {
		sub, err := nc.Subscribe(subject, func(m *nats.Msg) {
			evs, _ := svc.DecodeEvents(m.Header, m.Data)
			mu.Lock()
			defer mu.Unlock()
			for _, ev := range evs {
				fn(ev)
			}
		})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = sub.Unsubscribe() })
	}
	watch(subjects.Event("controller", control.KindSwitch), func(ev schemas.Event) { ordered = append(ordered, ev) })
	watch(subjects.Event("worker", worker.EventSwitched), func(ev schemas.Event) { switched = append(switched, ev) })
	watch(subjects.Event("worker", worker.EventSwitchRefused), func(ev schemas.Event) { refused = append(refused, ev) })
	lastPlan := map[string]string{}
	plans, err := nc.Subscribe(control.ReplicasAll, func(m *nats.Msg) {
		var r control.ReplicasMsg
		if svc.Decode(m.Header, m.Data, &r) == nil {
			mu.Lock()
			lastPlan[r.Pool] = fmt.Sprintf("desired %d: %s", r.Desired, r.Reason)
			mu.Unlock()
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	defer plans.Unsubscribe()
	res, err := nc.Subscribe(subjects.ResultAll, func(m *nats.Msg) {
		var r schemas.Result
		if svc.Decode(m.Header, m.Data, &r) == nil {
			mu.Lock()
			results[r.ID]++
			mu.Unlock()
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	defer res.Unsubscribe()
	cl, err := client.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	models := map[string]string{}
	submit := func(model string, i int) {
		t.Helper()
		id := fmt.Sprintf("%s-%03d", model[:4], i)
		models[id] = model
		if _, err := cl.Submit(ctx, "acme", &schemas.Request{ID: id, Model: model, Prompt: "which model answers me", MaxTokens: 512, DeadlineMs: 30000}); err != nil {
			t.Fatal(err)
		}
	}
	// Qwen's traffic at about 100 requests a second, Llama's at 5, until a
	// worker has switched (bounded).
	done := func() bool { mu.Lock(); defer mu.Unlock(); return len(switched) > 0 }
	i := 0
	for deadline := time.Now().Add(15 * time.Second); !done(); i++ {
		if time.Now().After(deadline) {
			mu.Lock()
			t.Fatalf("no switch after 15 s of Qwen traffic: ordered %+v, refused %+v; last plans %q", ordered, refused, lastPlan)
		}
		submit(qwen, i)
		if i%20 == 0 {
			submit(llama, i)
		}
		time.Sleep(10 * time.Millisecond)
	}
	mu.Lock()
	sw := switched[0]
	mu.Unlock()
	to := fmt.Sprint(sw.Fields["to"])
	if sw.Fields["from"] != llama || to != qwen || sw.Fields["from_tier"] != schemas.TierHost {
		t.Fatalf("switched %+v: want Llama to Qwen, Qwen woken from host memory", sw.Fields)
	}
	// After the switch: Qwen's requests reach the switched worker too.
	for j := 0; j < 150; j++ {
		submit(qwen, i+j)
		time.Sleep(10 * time.Millisecond)
	}
	byWorker := map[string]int{}
	for id, model := range models {
		r, err := cl.Result(ctx, "acme", id)
		if err != nil {
			t.Fatalf("%s: %v", id, err)
		}
		if r.Status != schemas.StatusOK || r.Model != model {
			t.Fatalf("%s (%s): status %s, model %s, worker %s, error %+v: want served", id, model, r.Status, r.Model, r.WorkerID, r.Error)
		}
		if model == qwen {
			byWorker[r.WorkerID]++
		}
		if model == llama && r.WorkerID == sw.WorkerID && r.FinishedAt.After(sw.At) {
			t.Errorf("%s: Llama served by %s after its switch", id, sw.WorkerID)
		}
	}
	if byWorker[sw.WorkerID] == 0 {
		t.Errorf("Qwen's requests by worker %v: none on the switched worker %s", byWorker, sw.WorkerID)
	}
	time.Sleep(300 * time.Millisecond) // late duplicates would land by now
	mu.Lock()
	defer mu.Unlock()
	for id := range models {
		if results[id] != 1 {
			t.Errorf("%s: %d results on the live subject, want exactly 1", id, results[id])
		}
	}
	if len(ordered) == 0 || ordered[0].WorkerID != sw.WorkerID {
		t.Errorf("controller's switch events %+v: want the switch of %s ordered", ordered, sw.WorkerID)
	}
	if ids := st.WorkerIDs(); len(ids) != len(first) {
		t.Errorf("workers %v after the switch, %v before: the scaler must start and stop none", ids, first)
	}
	t.Logf("%d requests; switch %s: %s; drain %.2fs, load %.2fs (simulated) from %s; Qwen by worker %v; refused %d",
		len(models), sw.WorkerID, ordered[0].Reason, sw.Fields["drain_s"], sw.Fields["load_s"], sw.Fields["from_tier"], byWorker, len(refused))
}
