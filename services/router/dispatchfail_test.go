package router_test

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/switchyard-ai/switchyard/internal/testkit/bustest"
	"github.com/switchyard-ai/switchyard/schemas"
	"github.com/switchyard-ai/switchyard/services/svc"
	"github.com/switchyard-ai/switchyard/subjects"
)

// A dispatch the stream does not store is held again, and the admitted
// message stays unacked until a dispatch is stored: with DISPATCH missing
// the request waits, unacked, through the failed attempts; once the stream
// is back it is dispatched exactly once and only then acked (issue 29's
// router shell paths: re-hold after a failed dispatch, ack order).
func TestFailedDispatchIsHeldAgainAndAckedOnlyOnceStored(t *testing.T) {
	env := bustest.StartProvisioned(t, subjects.StreamOptions{})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var dispatchCfg jetstream.StreamConfig
	for _, c := range subjects.Streams(subjects.StreamOptions{}) {
		if c.Name == subjects.StreamDispatch {
			dispatchCfg = c
		}
	}
	if err := env.JS.DeleteStream(ctx, subjects.StreamDispatch); err != nil {
		t.Fatal(err)
	}
	startRouter(t, ctx, env, "router-df")
	// A worker that serves the model, heartbeating.
	hbCtx, stopHB := context.WithCancel(ctx)
	defer stopHB()
	go func() {
		for seq := uint64(1); hbCtx.Err() == nil; seq++ {
			hb := schemas.Heartbeat{V: schemas.Version, WorkerID: "w1", Pool: "h100", GPU: "h100", Arch: "hopper", Simulated: true, Backend: "sim", TP: 1,
				HBMTotalBytes: 80 << 30, HBMFreeBytes: 40 << 30, KVBlocksTotal: 20000, KVBlocksFree: 20000, BlockSize: 16,
				Models: []schemas.ModelState{{Name: "llama-3.1-8b", Dtype: "bf16", State: schemas.WeightHot}}, MaxBatch: 256, Seq: seq,
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
	class := schemas.PriorityStandard
	var cons jetstream.Consumer
	for {
		c, err := env.JS.Consumer(ctx, subjects.StreamAdmitted, subjects.RouterConsumer(class))
		if err == nil {
			cons = c
			break
		}
		if ctx.Err() != nil {
			t.Fatal("the router's consumer never appeared")
		}
		time.Sleep(20 * time.Millisecond)
	}
	now := time.Now()
	adm := schemas.Admitted{V: schemas.Version, Tenant: "acme", Priority: class, Model: "llama-3.1-8b",
		SubmittedAt: now, Deadline: now.Add(20 * time.Second), PromptTokens: 4,
		Request: schemas.Request{V: schemas.Version, ID: "df-1", Model: "llama-3.1-8b", Prompt: "hello", MaxTokens: 4}}
	m, err := svc.Encode(subjects.Admitted(class, subjects.DeadlineBucket(20*time.Second), "acme"), schemas.Msgpack, adm, adm.Request.ID)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := env.JS.PublishMsg(ctx, m); err != nil {
		t.Fatal(err)
	}
	pending := func() (int, uint64) {
		info, err := cons.Info(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return info.NumAckPending, info.AckFloor.Stream
	}
	// Delivered to the router, and for as long as no dispatch is stored,
	// held unacked (past the router's 4 s ack wait: kept alive).
	for n, _ := pending(); n != 1; n, _ = pending() {
		if ctx.Err() != nil {
			t.Fatal("the admitted message never reached the router")
		}
		time.Sleep(20 * time.Millisecond)
	}
	until := time.Now().Add(5 * time.Second)
	for time.Now().Before(until) {
		if n, floor := pending(); n != 1 || floor != 0 {
			t.Fatalf("with no DISPATCH stream: %d unacked, ack floor %d; want the request held unacked", n, floor)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if _, err := env.JS.CreateStream(ctx, dispatchCfg); err != nil {
		t.Fatal(err)
	}
	for {
		n, floor := pending()
		if n == 0 && floor == 1 {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("after DISPATCH came back: %d unacked, ack floor %d; want the request dispatched and acked", n, floor)
		}
		time.Sleep(20 * time.Millisecond)
	}
	st, err := env.JS.Stream(ctx, subjects.StreamDispatch)
	if err != nil {
		t.Fatal(err)
	}
	info, err := st.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.State.Msgs != 1 {
		t.Fatalf("%d dispatches stored, want 1", info.State.Msgs)
	}
	d, err := st.GetLastMsgForSubject(ctx, subjects.Dispatch("w1"))
	if err != nil {
		t.Fatalf("no dispatch to w1: %v", err)
	}
	var got schemas.Dispatch
	if err := svc.Decode(d.Header, d.Data, &got); err != nil || got.Admitted.Request.ID != "df-1" {
		t.Fatalf("stored dispatch %+v, %v", got, err)
	}
}
