package admitter

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/switchyard-ai/switchyard/internal/core/catalog"
	"github.com/switchyard-ai/switchyard/internal/testkit/bustest"
	"github.com/switchyard-ai/switchyard/internal/testkit/waitfor"
	"github.com/switchyard-ai/switchyard/schemas"
	"github.com/switchyard-ai/switchyard/services/svc"
	"github.com/switchyard-ai/switchyard/subjects"
)

// startAdmitter runs an admitter on a provisioned embedded server and
// returns the connection a test talks through.
func startAdmitter(t *testing.T, cfg Config) (*nats.Conn, *svc.Shell, *Admitter) {
	t.Helper()
	return startAdmitterAt(t, cfg, time.Now)
}

// startAdmitterAt is startAdmitter with the admitter's clock set to now.
func startAdmitterAt(t *testing.T, cfg Config, now func() time.Time) (*nats.Conn, *svc.Shell, *Admitter) {
	t.Helper()
	e := bustest.StartProvisioned(t, subjects.StreamOptions{})
	nc, err := e.Server.Connect("admitter")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	sh, err := svc.New("admitter", "admitter-1", nc, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	sh.Now = now
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	a := New(sh, cfg)
	go func() { done <- a.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		// A test that ends while Run is still starting (a loaded machine)
		// cancels a startup step, which Run reports as context.Canceled:
		// a stop, as the stack treats it, not a failure.
		if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
			t.Errorf("admitter: %v", err)
		}
	})
	return e.NC, sh, a
}

// serving is the condition that the admitter's fleet view has heard a live
// worker with model hot — what its fleet step reads (FleetView.Offers), on
// its own clock — for waitfor.True: tests wait for it instead of sleeping
// a few heartbeats. Not Kinds: it falls back to every live worker for a
// model none lists, so a wait on it for a second worker's model ends as
// soon as the first worker is heard.
func serving(a *Admitter, model string) func() bool {
	return func() bool {
		a.mu.Lock()
		defer a.mu.Unlock()
		return a.fleet.Offers(a.sh.Now(), nil, nil).Models[model].Hot > 0
	}
}

// heardAll is the condition that the admitter has listened to heartbeats
// for a staleness bound (FleetView.HeardAll), so its fleet step refuses
// what no live worker serves.
func heardAll(a *Admitter) func() bool {
	return func() bool {
		a.mu.Lock()
		defer a.mu.Unlock()
		return a.fleet.HeardAll(a.sh.Now())
	}
}

// submit publishes a JSON request on sy.submit.<tenant> and returns the
// final result published for it.
func submit(t *testing.T, nc *nats.Conn, tenant string, req schemas.Request) schemas.Result {
	t.Helper()
	sub, err := nc.SubscribeSync(subjects.Result(tenant, req.ID))
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	data, err := json.Marshal(req)
	if err != nil {
		t.Fatal(err)
	}
	m := nats.NewMsg(subjects.Submit(tenant))
	m.Data = data
	m.Header.Set(schemas.HeaderContentType, "application/json")
	m.Header.Set(schemas.HeaderMsgID, req.ID)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	js, err := nc.JetStream()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := js.PublishMsg(m, nats.Context(ctx)); err != nil {
		t.Fatalf("submit %d bytes: %v", len(data), err)
	}
	msg, err := sub.NextMsg(10 * time.Second)
	if err != nil {
		t.Fatalf("no result for %s: %v", req.ID, err)
	}
	var res schemas.Result
	if err := svc.Decode(msg.Header, msg.Data, &res); err != nil {
		t.Fatal(err)
	}
	return res
}

// TestContextWindowChecked: a prompt over the model's window is refused
// with context_too_long naming both numbers — the catalog's window for a
// catalog model, the worker's reported window for a model only a worker
// knows — on the result subject, before any GPU sees it.
func TestContextWindowChecked(t *testing.T) {
	nc, _, a := startAdmitter(t, Config{Catalog: catalog.Default()})
	stop := beat(nc, schemas.Heartbeat{WorkerID: "w1", Pool: "cpu", GPU: "h100", MaxBatch: 4,
		Models: []schemas.ModelState{{Name: "llama-3.1-8b", State: schemas.WeightHot},
			{Name: "tiny", State: schemas.WeightHot, ContextLength: 256}}})
	defer stop()
	waitfor.True(t, "the admitter to hear worker w1", 10*time.Second, serving(a, "tiny"))

	cases := []struct {
		name   string
		req    schemas.Request
		window string
	}{
		{"catalog window: 140k tokens to llama-3.1-8b", schemas.Request{ID: "long-1", Model: "llama-3.1-8b",
			Prompt: strings.Repeat("context ", 70000), MaxTokens: 64}, "131072"},
		{"worker-reported window", schemas.Request{ID: "long-2", Model: "tiny",
			Prompt: strings.Repeat("context ", 200), MaxTokens: 64}, "256"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			res := submit(t, nc, "acme", c.req)
			if res.Status != schemas.StatusRejected || res.Error == nil || res.Error.Code != schemas.CodeContextTooLong {
				t.Fatalf("result %s %+v, want rejected context_too_long", res.Status, res.Error)
			}
			if !strings.Contains(res.Error.Message, c.window) || !strings.Contains(res.Error.Message, "64 in max_tokens") {
				t.Fatalf("message %q does not name the window %s and the request's tokens", res.Error.Message, c.window)
			}
		})
	}
}

// beat publishes hb every 200 ms until the returned stop is called, as a
// worker would; tests wait for the admitter to have heard it (serving).
func beat(nc *nats.Conn, hb schemas.Heartbeat) (stop func()) {
	quit, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		for {
			hb.SentAt = time.Now()
			hb.Seq++
			if m, err := svc.Encode(subjects.Heartbeat(hb.Pool, hb.WorkerID), schemas.JSON, hb, ""); err == nil {
				nc.PublishMsg(m)
			}
			select {
			case <-quit:
				return
			case <-time.After(200 * time.Millisecond):
			}
		}
	}()
	return func() { close(quit); <-done }
}

// TestWaitPredictionChecked: when the result of an admitted request
// arrives, the admitter compares the queue wait it predicted with the one
// the result measured, in a wait_checked event and in per-class metrics.
func TestWaitPredictionChecked(t *testing.T) {
	nc, sh, a := startAdmitter(t, Config{Catalog: catalog.Default()})
	stop := beat(nc, schemas.Heartbeat{WorkerID: "w1", Pool: "h100", GPU: "h100", MaxBatch: 8,
		Models: []schemas.ModelState{{Name: "llama-3.1-8b", State: schemas.WeightHot}}})
	defer stop()
	waitfor.True(t, "the admitter to hear worker w1", 10*time.Second, serving(a, "llama-3.1-8b"))
	events, err := nc.SubscribeSync(subjects.Event("admitter", ">"))
	if err != nil {
		t.Fatal(err)
	}
	admitted, err := nc.SubscribeSync(subjects.AdmittedClass(schemas.PriorityStandard))
	if err != nil {
		t.Fatal(err)
	}
	req := schemas.Request{ID: "w-1", Model: "llama-3.1-8b", Prompt: "hello there", MaxTokens: 8}
	data, _ := json.Marshal(req)
	m := nats.NewMsg(subjects.Submit("acme"))
	m.Data = data
	m.Header.Set(schemas.HeaderContentType, schemas.ContentJSON)
	m.Header.Set(schemas.HeaderMsgID, req.ID)
	js, _ := nc.JetStream()
	if _, err := js.PublishMsg(m); err != nil {
		t.Fatal(err)
	}
	if _, err := admitted.NextMsg(10 * time.Second); err != nil {
		t.Fatalf("not admitted: %v", err)
	}
	// The worker answers after 40 ms in the queue.
	res := schemas.Result{V: schemas.Version, ID: req.ID, Tenant: "acme", Status: schemas.StatusOK, Model: req.Model,
		WorkerID: "w1", Priority: schemas.PriorityStandard, Timing: schemas.Timing{QueueMs: 40, TotalMs: 90}, FinishedAt: time.Now()}
	rm, err := svc.Encode(subjects.Final("acme", req.ID), schemas.JSON, res, req.ID+"-result")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := js.PublishMsg(rm); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		msg, err := events.NextMsg(time.Until(deadline))
		if err != nil {
			t.Fatalf("no wait_checked event: %v", err)
		}
		evs, err := svc.DecodeEvents(msg.Header, msg.Data)
		if err != nil {
			t.Fatal(err)
		}
		for _, ev := range evs {
			if ev.Kind != "wait_checked" || ev.RequestID != req.ID {
				continue
			}
			if got := ev.Fields["measured_wait_s"]; got != 0.04 {
				t.Fatalf("measured_wait_s %v, want 0.04 (fields %v)", got, ev.Fields)
			}
			if got, ok := ev.Fields["predicted_wait_s"].(float64); !ok || got != 0 {
				t.Fatalf("predicted_wait_s %v on an idle fleet, want 0", ev.Fields["predicted_wait_s"])
			}
			var page strings.Builder
			sh.Metrics.WritePrometheus(&page)
			for _, want := range []string{`switchyard_admission_wait_error_seconds_bucket{class="standard",le="0.05"} 1`,
				`switchyard_admission_wait_measured_seconds_total{class="standard"} 0.04`} {
				if !strings.Contains(page.String(), want) {
					t.Fatalf("metrics lack %s:\n%s", want, page.String())
				}
			}
			return
		}
	}
}
