package stack

import (
	"context"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/switchyard-ai/switchyard/internal/adapter/bus"
	"github.com/switchyard-ai/switchyard/internal/adapter/cachestore"
	"github.com/switchyard-ai/switchyard/internal/core/cache"
	"github.com/switchyard-ai/switchyard/internal/testkit/waitfor"
	"github.com/switchyard-ai/switchyard/schemas"
	"github.com/switchyard-ai/switchyard/services/client"
	"github.com/switchyard-ai/switchyard/services/svc"
	"github.com/switchyard-ai/switchyard/subjects"
)

// admissionStack starts a stack whose admitter uses the given tenants JSON.
func admissionStack(t *testing.T, tenants string, cfg Config) (*Stack, *nats.Conn, *client.Client) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "tenants.json")
	if err := os.WriteFile(path, []byte(tenants), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg.Tenants = path
	st := startStack(t, cfg)
	nc, err := st.Connect("admission-test")
	if err != nil {
		t.Fatal(err)
	}
	cl, err := client.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return st, nc, cl
}

func do(t *testing.T, cl *client.Client, tenant string, req schemas.Request) schemas.Result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	req.ID = client.NewID()
	res, err := cl.Do(ctx, tenant, &req)
	if err != nil {
		t.Fatalf("%s: no result: %v", tenant, err)
	}
	return res
}

// events collects the admitter's events of one kind.
func events(t *testing.T, nc *nats.Conn, kind string) <-chan schemas.Event {
	t.Helper()
	ch := make(chan schemas.Event, 1024)
	sub, err := nc.Subscribe(subjects.Event("admitter", kind), func(m *nats.Msg) {
		evs, _ := svc.DecodeEvents(m.Header, m.Data)
		for _, ev := range evs {
			select {
			case ch <- ev:
			default:
			}
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sub.Unsubscribe() })
	return ch
}

// TestAdmissionCacheHitAndTenantIsolation: a deterministic answer is
// stored when its result arrives; the same request again is answered from
// the cache with no worker running at all; the same request from another
// tenant misses and is computed by a worker.
func TestAdmissionCacheHitAndTenantIsolation(t *testing.T) {
	st, _, cl := admissionStack(t, `{"tenants":{
		"alpha":{"priority":"interactive","cache":{"mode":"exact"}},
		"beta":{"priority":"interactive","cache":{"mode":"exact"}}}}`, Config{Workers: 1})
	zero := 0.0
	req := schemas.Request{Model: "llama-3.1-8b", Prompt: "What is the capital of France?", MaxTokens: 16, Temperature: &zero}
	first := do(t, cl, "alpha", req)
	if first.Status != schemas.StatusOK || first.FromCache != "" || first.WorkerID == "" {
		t.Fatalf("first answer should be computed by a worker: %+v", first)
	}
	// The cache is filled from RESULTS asynchronously: wait for the entry.
	nc, err := st.Connect("cache-peek")
	if err != nil {
		t.Fatal(err)
	}
	js, err := bus.JetStream(nc)
	if err != nil {
		t.Fatal(err)
	}
	key := cache.AnswerKey("alpha", req.Model, &req)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	kv, err := js.KeyValue(ctx, cachestore.DefaultBucket)
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := kv.Get(ctx, key); err == nil {
			break
		}
		if ctx.Err() != nil {
			t.Fatal("cache entry never stored")
		}
		time.Sleep(50 * time.Millisecond)
	}
	// No worker at all: only the cache can answer.
	for _, id := range st.WorkerIDs() {
		if err := st.StopWorker(id); err != nil {
			t.Fatal(err)
		}
	}
	hit := do(t, cl, "alpha", req)
	if hit.Status != schemas.StatusOK || hit.FromCache != cache.KindExact || hit.WorkerID != "" || hit.GPUSeconds != 0 || hit.Text != first.Text {
		t.Fatalf("want an exact cache hit with the first answer and no worker: %+v", hit)
	}
	// Another tenant asking the very same thing must not see alpha's answer.
	if _, err := st.AddWorker(DefaultWorker); err != nil {
		t.Fatal(err)
	}
	other := do(t, cl, "beta", req)
	if other.FromCache != "" || other.Status != schemas.StatusOK || other.WorkerID == "" {
		t.Fatalf("cross-tenant lookup must miss and be computed: %+v", other)
	}
}

// TestAdmissionAutoShortPromptSmallTier: "auto" with a short classify
// prompt is moved to the smallest ladder model, runs on the worker that
// serves it, and the move is an event with its reason.
func TestAdmissionAutoShortPromptSmallTier(t *testing.T) {
	_, nc, cl := admissionStack(t, `{"tenants":{"acme":{"priority":"interactive","allow_auto":true}}}`,
		Config{Fleet: []WorkerSpec{DefaultWorker, {GPU: "l40s", Model: "llama-3.2-1b", Dtype: "bf16", TP: 1}}})
	moved := events(t, nc, "moved")
	res := do(t, cl, "acme", schemas.Request{Model: "auto", Prompt: "Classify this ticket: the app crashes when I upload a photo.",
		MaxTokens: 16, Metadata: map[string]string{"task": "classify"}})
	if res.Status != schemas.StatusOK || res.Model != "llama-3.2-1b" || res.GPU != "l40s" {
		t.Fatalf("auto classify should run on llama-3.2-1b (the l40s worker): %+v", res)
	}
	select {
	case ev := <-moved:
		if ev.RequestID != res.ID || ev.Reason == "" || ev.Fields["to"] != "llama-3.2-1b" {
			t.Fatalf("moved event %+v", ev)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no moved event")
	}
}

// TestAdmissionShedLowestClassFirst floods a one-worker fleet with a mix
// of batch and critical work, more than its batch slots hold (a request
// that fits an idle slot waits nothing, so fewer would rightly be admitted
// whole): the admitter predicts the wait from the router's backlog and the
// fleet's capacity and sheds batch work, while every critical request is
// admitted.
func TestAdmissionShedLowestClassFirst(t *testing.T) {
	_, nc, cl := admissionStack(t, `{"tenants":{
		"high":{"priority":"critical"},
		"low":{"priority":"batch"}}}`, Config{Workers: 1, SpeedUp: 1})
	// Warm up: completions in the heartbeats give the fleet a throughput.
	var beats struct {
		sync.Mutex
		afterWarmUp int // heartbeats that carry the warm-up's completions
	}
	sub, err := nc.Subscribe(subjects.HeartbeatAll, func(m *nats.Msg) {
		var hb schemas.Heartbeat
		if svc.Decode(m.Header, m.Data, &hb) == nil && hb.CompletedTotal >= 4 {
			beats.Lock()
			beats.afterWarmUp++
			beats.Unlock()
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	// The warm-up is the flood's own shape: the admitter learns capacity
	// in requests per second from recent completions, not per token, so
	// 8-token warm-ups taught it a rate many times what 200-token work
	// gets, and whether anything was shed then hung on timing (0 to 100
	// of 480 batch requests between runs).
	var warm sync.WaitGroup
	for i := 0; i < 4; i++ {
		warm.Add(1)
		go func() {
			defer warm.Done()
			if r := do(t, cl, "high", schemas.Request{Model: "llama-3.1-8b", Prompt: "Summarise the attached report in detail.", MaxTokens: 200}); r.Status != schemas.StatusOK {
				t.Errorf("warm-up: %+v", r)
			}
		}()
	}
	warm.Wait()
	// Two such heartbeats: the admitter, subscribed to the same subject,
	// has applied the first by the time this test sees the second.
	waitfor.True(t, "heartbeats carrying the warm-up's completions", 30*time.Second, func() bool {
		beats.Lock()
		defer beats.Unlock()
		return beats.afterWarmUp >= 2
	})
	const n = 640
	ids := map[string]string{}
	for i := 0; i < n; i++ {
		// Batch work here can start at once only within the worker's
		// batch slots; behind them its 3 s cannot be met.
		tenant, dl := "low", int64(3000)
		if i%4 == 0 {
			tenant, dl = "high", 120000
		}
		req := schemas.Request{ID: client.NewID(), Model: "llama-3.1-8b", Prompt: "Summarise the attached report in detail.", MaxTokens: 200, DeadlineMs: dl}
		if _, err := cl.SubmitAsync(tenant, &req); err != nil {
			t.Fatal(err)
		}
		ids[req.ID] = tenant
	}
	<-cl.PublishAsyncComplete()
	shed, outcomes := map[string]int{}, map[string]int{}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for id, tenant := range ids {
		res, err := cl.Result(ctx, tenant, id)
		if err != nil {
			t.Fatalf("%s %s: no result: %v", tenant, id, err)
		}
		if res.Status == schemas.StatusShed {
			shed[tenant]++
		}
		key := tenant + "/" + res.Status
		if res.Error != nil {
			key += "/" + res.Error.Code
		}
		outcomes[key]++
	}
	_ = nc
	t.Logf("outcomes by tenant: %v", outcomes)
	if shed["low"] == 0 || shed["high"] != 0 {
		t.Fatalf("shed by tenant %v: want batch work shed and no critical work shed", shed)
	}
}

// TestAdmissionDoomedWorkflow: a workflow's running step is cancelled —
// the worker aborts it — and its next step refused, once that step makes
// the workflow unable to finish by its deadline.
func TestAdmissionDoomedWorkflow(t *testing.T) {
	// Real speed (SpeedUp 1): step 1 runs its predicted ~13 s, so the
	// cancel that step 2's refusal sends has that long to reach it even on
	// a loaded machine (at 2x a busy CI machine once let step 1 finish
	// first). The test still ends as soon as step 1 is cancelled.
	_, nc, cl := admissionStack(t, `{"tenants":{"agent":{"priority":"interactive"}}}`, Config{Workers: 1, SpeedUp: 1})
	cancelled := events(t, nc, "workflow_cancelled")
	dispatched := make(chan struct{}, 4)
	sub, err := nc.Subscribe(subjects.DispatchAll, func(*nats.Msg) {
		select {
		case dispatched <- struct{}{}:
		default:
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	// Step 1: ~13 s predicted (2,000 tokens alone on an H100, the
	// admitter's roofline estimate); two such steps fit the 40 s budget.
	step1 := schemas.Request{ID: client.NewID(), Model: "llama-3.1-8b", Prompt: "Plan the migration and call the inventory tool.", MaxTokens: 2000,
		Workflow: &schemas.Workflow{ID: "wf-doom", Step: 1, Of: 2, DeadlineMs: 40000, ToolState: "t1"}}
	if _, err := cl.Submit(context.Background(), "agent", &step1); err != nil {
		t.Fatal(err)
	}
	select {
	case <-dispatched:
	case <-time.After(15 * time.Second):
		t.Fatal("step 1 never dispatched")
	}
	// Step 2 predicts three times as long: with step 1 still running the
	// workflow can no longer finish in time.
	step2 := schemas.Request{ID: client.NewID(), Model: "llama-3.1-8b", Prompt: "Write the full migration report from the tool output.", MaxTokens: 6000,
		Workflow: &schemas.Workflow{ID: "wf-doom", Step: 2, Of: 2, DeadlineMs: 40000, ToolState: "t2"}}
	if _, err := cl.Submit(context.Background(), "agent", &step2); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	r2, err := cl.Result(ctx, "agent", step2.ID)
	if err != nil || r2.Error == nil || r2.Error.Code != schemas.CodeWorkflowDoomed {
		t.Fatalf("step 2 should be refused as workflow_doomed: %+v %v", r2, err)
	}
	r1, err := cl.Result(ctx, "agent", step1.ID)
	if err != nil || r1.Error == nil || r1.Error.Code != schemas.CodeCancelled || r1.Usage.CompletionTokens >= 2000 {
		t.Fatalf("running step 1 should be cancelled by the worker before it finished: %+v %v", r1, err)
	}
	select {
	case ev := <-cancelled:
		saved, _ := ev.Fields["gpu_seconds_saved"].(float64)
		if ev.Fields["workflow"] != "wf-doom" || saved <= 0 {
			t.Fatalf("workflow_cancelled event %+v", ev)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no workflow_cancelled event")
	}
}

// TestDuplicateSubmissionChargedOnce: one request id submitted three times
// without a Nats-Msg-Id (so SUBMIT keeps all three) runs once — ADMITTED's
// dedupe answers the second and third as duplicates — and is charged once:
// a tenant with room for two requests per burst still has room for another.
func TestDuplicateSubmissionChargedOnce(t *testing.T) {
	_, nc, cl := admissionStack(t, `{"tenants":{"acme":{"priority":"standard","quota":{"requests_per_min":60,"burst_s":2}}}}`, Config{Workers: 1, SpeedUp: 1})
	body := []byte(`{"id":"twice","model":"llama-3.1-8b","prompt":"a long one","max_tokens":300}`)
	for range 3 {
		if err := nc.Publish(subjects.Submit("acme"), body); err != nil {
			t.Fatal(err)
		}
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	// The three decisions are made well before the 300-token answer.
	time.Sleep(500 * time.Millisecond)
	res := do(t, cl, "acme", schemas.Request{Model: "llama-3.1-8b", Prompt: "one more", MaxTokens: 4})
	if res.Status != schemas.StatusOK {
		t.Fatalf("the next request was refused (%+v): the duplicates were charged", res.Error)
	}
}
