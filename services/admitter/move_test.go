package admitter

import (
	"context"
	"encoding/json"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/switchyard-ai/switchyard/internal/core/admission"
	"github.com/switchyard-ai/switchyard/internal/core/control"
	"github.com/switchyard-ai/switchyard/internal/core/perf"
	"github.com/switchyard-ai/switchyard/internal/testkit/bustest"
	"github.com/switchyard-ai/switchyard/internal/testkit/waitfor"
	"github.com/switchyard-ai/switchyard/schemas"
	"github.com/switchyard-ai/switchyard/services/svc"
	"github.com/switchyard-ai/switchyard/subjects"
)

// beatServing publishes a heartbeat for each worker, serving model hot, every
// 200 ms until ctx ends — what a fleet of simulated 8B workers does.
func beatServing(ctx context.Context, t *testing.T, nc *nats.Conn, model string, workers ...string) {
	t.Helper()
	send := func() {
		for _, id := range workers {
			hb := schemas.Heartbeat{V: schemas.Version, WorkerID: id, Pool: "h100", GPU: "h100", Simulated: true,
				Models: []schemas.ModelState{{Name: model, State: schemas.WeightHot}}, SentAt: time.Now(), PricePerHour: 2}
			m, err := svc.Encode(subjects.Heartbeat("h100", id), schemas.Msgpack, hb, "")
			if err != nil {
				t.Error(err)
				return
			}
			if err := nc.PublishMsg(m); err != nil {
				return
			}
		}
	}
	send()
	go func() {
		tk := time.NewTicker(200 * time.Millisecond)
		defer tk.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tk.C:
				send()
			}
		}
	}()
}

// TestMoveOnlyWhereTheFleetServes is the new-user case on the real
// server: with only 8B workers live, an "auto" classify request is admitted
// on the 8B model (it went to the 1B one, which nobody serves, and waited
// there until its deadline), and a request naming a model no worker serves
// is answered at once with unplaceable, naming what the fleet serves.
func TestMoveOnlyWhereTheFleetServes(t *testing.T) {
	nc, _, a := startAdmitter(t, Config{NoCache: true})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	beatServing(ctx, t, nc, "llama-3.1-8b", "gpu-0", "gpu-1")
	admitted, err := nc.SubscribeSync(subjects.AdmittedAll)
	if err != nil {
		t.Fatal(err)
	}
	defer admitted.Unsubscribe()
	waitfor.True(t, "the admitter to hear the 8B workers", 10*time.Second, serving(a, "llama-3.1-8b"))

	auto := schemas.Request{ID: "auto-1", Model: "auto", MaxTokens: 16, DeadlineMs: 8000,
		Metadata: map[string]string{"task": "classify"}, Messages: []schemas.Message{{Role: "user", Content: "Classify this ticket: the app crashes"}}}
	data, _ := json.Marshal(auto)
	m := nats.NewMsg(subjects.Submit("acme"))
	m.Data = data
	m.Header.Set(schemas.HeaderContentType, "application/json")
	m.Header.Set(schemas.HeaderMsgID, auto.ID)
	if err := nc.PublishMsg(m); err != nil {
		t.Fatal(err)
	}
	msg, err := admitted.NextMsg(10 * time.Second)
	if err != nil {
		t.Fatalf("auto request never admitted: %v", err)
	}
	var adm schemas.Admitted
	if err := svc.Decode(msg.Header, msg.Data, &adm); err != nil {
		t.Fatal(err)
	}
	if adm.Request.ID != auto.ID || adm.Model != "llama-3.1-8b" {
		t.Fatalf("admitted %s on %q, want auto-1 on llama-3.1-8b (the only model served)", adm.Request.ID, adm.Model)
	}

	waitfor.True(t, "the admitter to have listened for a staleness bound", 10*time.Second, heardAll(a))
	start := time.Now()
	res := submit(t, nc, "acme", schemas.Request{ID: "big-1", Model: "llama-3.1-70b", MaxTokens: 16, DeadlineMs: 30000,
		Messages: []schemas.Message{{Role: "user", Content: "hello"}}})
	if res.Error == nil || res.Error.Code != schemas.CodeUnplaceable {
		t.Fatalf("named unserved model: got %s %+v, want unplaceable", res.Status, res.Error)
	}
	if !strings.Contains(res.Error.Message, "llama-3.1-8b") || !strings.Contains(res.Error.Message, "llama-3.1-70b") {
		t.Errorf("reason %q should name the model asked for and what the fleet serves", res.Error.Message)
	}
	if waited := time.Since(start); waited > 10*time.Second {
		t.Errorf("answered after %s: that is the deadline, not at once", waited)
	}
}

// TestFreshAdmitterRefusesNoUnheardModel: an admitter that has listened
// to heartbeats for less than the staleness bound may not have heard every
// live worker yet — a restarted admitter decides its backlog within
// milliseconds of subscribing, before most workers beat again — so a
// request for a model no worker it has heard serves is admitted (the
// router holds it for the worker), not refused unplaceable; once it has
// listened that long, the same request is refused at once.
func TestFreshAdmitterRefusesNoUnheardModel(t *testing.T) {
	// The admitter's clock stands still at its start until released, so
	// the first request is decided inside the listening window however
	// loaded the machine is, then jumps past the window.
	start := time.Now()
	var released atomic.Bool
	clock := func() time.Time {
		if released.Load() {
			return time.Now().Add(10 * time.Second)
		}
		return start
	}
	nc, _, a := startAdmitterAt(t, Config{NoCache: true}, clock)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	beatServing(ctx, t, nc, "llama-3.1-8b", "gpu-0")
	waitfor.True(t, "the admitter to hear gpu-0", 10*time.Second, serving(a, "llama-3.1-8b"))
	admitted, err := nc.SubscribeSync(subjects.AdmittedAll)
	if err != nil {
		t.Fatal(err)
	}
	defer admitted.Unsubscribe()
	answered, err := nc.SubscribeSync(subjects.Result("acme", "early-1"))
	if err != nil {
		t.Fatal(err)
	}
	defer answered.Unsubscribe()
	req := func(id string) schemas.Request {
		return schemas.Request{ID: id, Model: "qwen2.5-7b", MaxTokens: 16, DeadlineMs: 30000,
			Messages: []schemas.Message{{Role: "user", Content: "hello"}}}
	}
	data, _ := json.Marshal(req("early-1"))
	m := nats.NewMsg(subjects.Submit("acme"))
	m.Data = data
	m.Header.Set(schemas.HeaderContentType, "application/json")
	m.Header.Set(schemas.HeaderMsgID, "early-1")
	if err := nc.PublishMsg(m); err != nil {
		t.Fatal(err)
	}
	msg, err := admitted.NextMsg(10 * time.Second)
	if err != nil {
		if res, rerr := answered.NextMsg(10 * time.Millisecond); rerr == nil {
			t.Fatalf("inside the listening window, a model no heard worker serves was answered: %s", res.Data)
		}
		t.Fatalf("early-1 never admitted: %v", err)
	}
	var adm schemas.Admitted
	if err := svc.Decode(msg.Header, msg.Data, &adm); err != nil {
		t.Fatal(err)
	}
	if adm.Request.ID != "early-1" || adm.Model != "qwen2.5-7b" {
		t.Fatalf("admitted %s on %q, want early-1 on qwen2.5-7b (the view cannot tell its worker is absent)", adm.Request.ID, adm.Model)
	}

	released.Store(true)
	waitfor.True(t, "the admitter to have listened for a staleness bound", 10*time.Second, heardAll(a))
	waitfor.True(t, "the admitter to hear gpu-0 again", 10*time.Second, serving(a, "llama-3.1-8b"))
	res := submit(t, nc, "acme", req("late-1"))
	if res.Error == nil || res.Error.Code != schemas.CodeUnplaceable {
		t.Fatalf("after the listening window: got %s %+v, want unplaceable", res.Status, res.Error)
	}
}

// TestWarmingHeldApart checks the count of requests waiting for a model:
// held until their result or their deadline, per class.
func TestWarmingHeldApart(t *testing.T) {
	now := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	var s moveState
	s.hold("a", schemas.PriorityCritical, now.Add(10*time.Second))
	s.hold("b", schemas.PriorityCritical, now.Add(2*time.Second))
	s.hold("c", schemas.PriorityBatch, now.Add(10*time.Second))
	if got := s.warmingByClass(now); got[schemas.PriorityCritical] != 2 || got[schemas.PriorityBatch] != 1 {
		t.Fatalf("held %v, want critical 2 batch 1", got)
	}
	s.done("a")
	if got := s.warmingByClass(now.Add(5 * time.Second)); got[schemas.PriorityCritical] != 0 || got[schemas.PriorityBatch] != 1 {
		t.Fatalf("after a's result and b's deadline: held %v, want critical 0 batch 1", got)
	}
}

// TestScalablePoolsFollowController publishes the controller's desired
// replicas for a pool at zero on the real server: the admitter then offers
// the pool's model at its cold start, so it is not refused as unplaceable.
func TestScalablePoolsFollowController(t *testing.T) {
	nc := bustest.Start(t).NC
	var s moveState
	stop, err := s.followPools(nc, time.Now, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	// The controller runs the pool on four GPUs and says how long one
	// takes to start: the admitter takes its word, where it once guessed
	// the fewest GPUs the weights fit and priced that load itself.
	msg := control.ReplicasMsg{Pool: control.PoolKey("h100", "llama-3.1-70b"), GPU: "h100", Model: "llama-3.1-70b", Dtype: "bf16", TP: 4,
		ColdStartSeconds: 37.5, Desired: 1, At: time.Now()}
	m, err := svc.Encode(control.ReplicasSubject(msg.Pool), schemas.Msgpack, msg, "")
	if err != nil {
		t.Fatal(err)
	}
	if err := nc.PublishMsg(m); err != nil {
		t.Fatal(err)
	}
	waitfor.True(t, "the controller's pool to become scalable", 10*time.Second, func() bool { return len(s.scalable(time.Now())) > 0 })
	p := s.scalable(time.Now())[0]
	if p.Model != "llama-3.1-70b" || p.TP != 4 || p.ColdStart(perf.NewPredictor(nil)) != 37.5 {
		t.Fatalf("pool %+v: want llama-3.1-70b on TP 4 with the message's 37.5 s cold start", p)
	}
	var view admission.FleetView
	if of := view.Offers(time.Now(), []admission.ScalablePool{p}, perf.NewPredictor(nil)).Models["llama-3.1-70b"]; of.WarmSeconds != 37.5 {
		t.Fatalf("offer %+v, want the model warm in the message's 37.5 s", of)
	}
	if got := s.scalable(time.Now().Add(2 * poolMemory)); len(got) != 0 {
		t.Fatalf("a pool no controller has sized for %s is still scalable: %+v", 2*poolMemory, got)
	}
}
