package worker

import (
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/switchyard-ai/switchyard/internal/core/control"
	"github.com/switchyard-ai/switchyard/internal/core/engine"
	"github.com/switchyard-ai/switchyard/internal/testkit/bustest"
	"github.com/switchyard-ai/switchyard/schemas"
	"github.com/switchyard-ai/switchyard/services/svc"
	"github.com/switchyard-ai/switchyard/subjects"
)

// switchEvents records a worker's switch events.
type switchEvents struct {
	mu  sync.Mutex
	evs []schemas.Event
}

func watchSwitches(t *testing.T, nc *nats.Conn, id string) *switchEvents {
	t.Helper()
	se := &switchEvents{}
	sub, err := nc.Subscribe(subjects.Event("worker", "*"), func(m *nats.Msg) {
		evs, err := svc.DecodeEvents(m.Header, m.Data)
		if err != nil {
			return
		}
		se.mu.Lock()
		for _, e := range evs {
			if e.WorkerID == id && (e.Kind == EventSwitched || e.Kind == EventSwitchRefused) {
				se.evs = append(se.evs, e)
			}
		}
		se.mu.Unlock()
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sub.Unsubscribe() })
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	return se
}

// wait returns the first event of kind, failing after 3 s.
func (se *switchEvents) wait(t *testing.T, sh *svc.Shell, kind string) schemas.Event {
	t.Helper()
	for deadline := time.Now().Add(3 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		sh.FlushEvents()
		se.mu.Lock()
		for _, e := range se.evs {
			if e.Kind == kind {
				se.mu.Unlock()
				return e
			}
		}
		se.mu.Unlock()
	}
	se.mu.Lock()
	defer se.mu.Unlock()
	t.Fatalf("no %s event; saw %+v", kind, se.evs)
	return schemas.Event{}
}

func switchWorker(t *testing.T, nc *nats.Conn, id string, cfg Config) (*Worker, *svc.Shell) {
	t.Helper()
	sh, err := svc.New("worker", id, nc, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	cfg.ID, cfg.GPU, cfg.Model = id, "h100", "llama-3.1-8b"
	cfg.HeartbeatInterval = 20 * time.Millisecond
	w, err := New(sh, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return w, sh
}

// A switch to a model parked in host memory: the worker says draining at
// once, then serves the new model (woken from host) and lists the old one
// asleep in host memory with its load time, its free HBM what the serving
// engine's reservation leaves; the old model's requests are refused.
func TestSwitchToAParkedModel(t *testing.T) {
	env := bustest.Start(t)
	w, sh := switchWorker(t, env.NC, "sw-parked", Config{})
	if err := w.Park("qwen2.5-7b", schemas.TierHost); err != nil {
		t.Fatal(err)
	}
	hb := w.Heartbeat()
	if len(hb.Models) != 2 || hb.Models[1].Name != "qwen2.5-7b" || hb.Models[1].Tier != schemas.TierHost || hb.Models[1].LoadSeconds <= 0 {
		t.Fatalf("heartbeat models %+v: want llama serving, qwen parked in host memory with its wake time", hb.Models)
	}
	se := watchSwitches(t, env.NC, "sw-parked")
	if !w.startSwitch(control.SwitchMsg{Worker: "sw-parked", From: "llama-3.1-8b", To: "qwen2.5-7b", FromTier: schemas.TierHost, Reason: "test"}) {
		t.Fatal("switch not started")
	}
	if hb := w.Heartbeat(); !hb.Draining || hb.Models[0].Name != "llama-3.1-8b" {
		t.Fatalf("during the switch: draining %v, serving %s; want draining, still llama", hb.Draining, hb.Models[0].Name)
	}
	ev := se.wait(t, sh, EventSwitched)
	if ev.Fields["from_tier"] != schemas.TierHost || ev.Fields["to"] != "qwen2.5-7b" || ev.Fields["from"] != "llama-3.1-8b" {
		t.Errorf("switched event %+v", ev.Fields)
	}
	hb = w.Heartbeat()
	if hb.Draining || len(hb.Models) != 2 || hb.Models[0].Name != "qwen2.5-7b" {
		t.Fatalf("after the switch: draining %v, models %+v; want qwen serving", hb.Draining, hb.Models)
	}
	if st := hb.Models[0].State; st != schemas.WeightLoading && st != schemas.WeightHot {
		t.Errorf("qwen state %s, want loading or hot", st)
	}
	if p := hb.Models[1]; p.Name != "llama-3.1-8b" || p.State != schemas.WeightSleeping || p.Tier != schemas.TierHost || p.LoadSeconds <= 0 {
		t.Errorf("parked %+v: want llama asleep in host memory with its wake time", p)
	}
	if reserved := uint64(float64(hb.HBMTotalBytes) * 0.9); hb.HBMFreeBytes > hb.HBMTotalBytes-reserved+1 {
		t.Errorf("free HBM %d of %d: want at most what the engine's reservation leaves", hb.HBMFreeBytes, hb.HBMTotalBytes)
	}
	if w.Model() != "qwen2.5-7b" {
		t.Errorf("worker serves %s", w.Model())
	}
	if e := w.eng.RefuseModel("llama-3.1-8b", w.cfg.ID); e == nil {
		t.Error("the engine still takes llama after the switch")
	}
}

// Switches the worker cannot make are refused with an event saying why,
// and leave it serving its model, not draining.
func TestSwitchRefused(t *testing.T) {
	env := bustest.Start(t)
	for i, tc := range []struct {
		name  string
		cfg   Config
		msg   control.SwitchMsg
		setup func(w *Worker)
		why   string
	}{
		{name: "not its model", msg: control.SwitchMsg{From: "qwen2.5-7b", To: "mistral-7b"}, why: "serves llama-3.1-8b, not qwen2.5-7b"},
		{name: "unknown model", msg: control.SwitchMsg{From: "llama-3.1-8b", To: "no-such-model"}, why: `model "no-such-model" cannot run here`},
		{name: "already serves it", msg: control.SwitchMsg{From: "llama-3.1-8b", To: "llama-3.1-8b"}, why: "already serves"},
		{name: "another worker", msg: control.SwitchMsg{Worker: "someone-else", From: "llama-3.1-8b", To: "qwen2.5-7b"}, why: `names worker "someone-else"`},
		{name: "real engine", cfg: Config{Backend: "openai", OpenAIURL: "http://127.0.0.1:1"}, msg: control.SwitchMsg{From: "llama-3.1-8b", To: "qwen2.5-7b"},
			why: "not supported by this engine"},
		{name: "work past the bound", cfg: Config{DrainTimeout: 150 * time.Millisecond}, msg: control.SwitchMsg{From: "llama-3.1-8b", To: "qwen2.5-7b"},
			setup: func(w *Worker) {
				// A sequence that stays in the engine: no loop steps it.
				if err := w.eng.Add(engine.Sequence{ID: "held", PromptTokens: 64, MaxTokens: 64}); err != nil {
					t.Fatal(err)
				}
			}, why: "still held after 150ms"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			id := "sw-refused-" + string(rune('a'+i))
			w, sh := switchWorker(t, env.NC, id, tc.cfg)
			if tc.setup != nil {
				tc.setup(w)
			}
			se := watchSwitches(t, env.NC, id)
			w.startSwitch(tc.msg)
			ev := se.wait(t, sh, EventSwitchRefused)
			if !strings.Contains(ev.Reason, tc.why) {
				t.Errorf("refused: %q, want it to say %q", ev.Reason, tc.why)
			}
			if hb := w.Heartbeat(); hb.Draining || w.Model() != "llama-3.1-8b" || w.Switching() != "" {
				t.Errorf("after the refusal: draining %v, model %s, switching %q; want serving llama", hb.Draining, w.Model(), w.Switching())
			}
		})
	}
}

// Parking refuses what cannot be staged.
func TestParkRefused(t *testing.T) {
	env := bustest.Start(t)
	for i, tc := range []struct {
		model, tier, why string
	}{
		{"qwen2.5-7b", schemas.TierHBM, "want host, page_cache, disk or remote"},
		{"qwen2.5-7b", "nowhere", "want host, page_cache, disk or remote"},
		{"llama-3.1-8b", schemas.TierHost, "the model this worker serves"},
		{"no-such-model", schemas.TierHost, "no-such-model"},
	} {
		w, _ := switchWorker(t, env.NC, "park-"+string(rune('a'+i)), Config{})
		err := w.Park(tc.model, tc.tier)
		if err == nil || !strings.Contains(err.Error(), tc.why) {
			t.Errorf("Park(%s, %s) = %v, want an error saying %q", tc.model, tc.tier, err, tc.why)
		}
	}
}
