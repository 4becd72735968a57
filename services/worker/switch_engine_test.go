package worker

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/switchyard-ai/switchyard/internal/adapter/backend/enginemetrics"
	"github.com/switchyard-ai/switchyard/internal/core/catalog"
	"github.com/switchyard-ai/switchyard/internal/core/control"
	"github.com/switchyard-ai/switchyard/internal/testkit/bustest"
	"github.com/switchyard-ai/switchyard/schemas"
	"github.com/switchyard-ai/switchyard/services/svc"
)

// A worker in front of a real engine refuses the switches it cannot make,
// each with its own reason, and keeps serving its model, not draining:
// engines that do not change model in place (vLLM, SGLang, one not yet
// identified, any other) keep the refusal they always had; on Ollama a
// model the engine does not have, one it cannot describe, a command that
// does not match the worker, an engine down, or a switch whose unload the
// engine fails. (The switch made is internal/testkit/enginetest's, on a
// real Ollama.)
func TestEngineSwitchRefused(t *testing.T) {
	env := bustest.Start(t)
	ollama := func(w *Worker) {
		e := &w.remote.engine
		e.probed, e.ollama, w.remote.scraped = true, true, true
		e.available = []string{"llama-3.1-8b:latest", "qwen2.5-7b:latest", "mystery:latest"}
		e.specs["mystery:latest"] = nil // /api/show failed for it
	}
	metrics := func(engine string) func(*Worker) {
		return func(w *Worker) {
			w.remote.engine.probed, w.remote.scraped = true, true
			w.remote.metrics.Engine = engine
		}
	}
	toQwen := control.SwitchMsg{From: "llama-3.1-8b", To: "qwen2.5-7b"}
	for i, tc := range []struct {
		name  string
		setup func(*Worker)
		msg   control.SwitchMsg
		why   string
		exact bool // why is the whole reason
	}{
		{name: "engine not identified yet", msg: toQwen, why: notSwitchable + " (the engine has not answered yet"},
		{name: "vLLM", setup: metrics(enginemetrics.EngineVLLM), msg: toQwen, why: notSwitchable + " (vLLM: one model per process"},
		{name: "SGLang", setup: metrics(enginemetrics.EngineSGLang), msg: toQwen, why: notSwitchable + " (SGLang: changing its model in place is not mapped)"},
		{name: "another engine", setup: metrics(enginemetrics.EngineLlamaCpp), msg: toQwen, why: notSwitchable, exact: true},
		{name: "not on the engine", setup: ollama, msg: control.SwitchMsg{From: "llama-3.1-8b", To: "mistral-7b"},
			why: `model "mistral-7b" is not available on the engine at http://127.0.0.1:1 (it has llama-3.1-8b:latest, qwen2.5-7b:latest, mystery:latest)`, exact: true},
		{name: "not described", setup: ollama, msg: control.SwitchMsg{From: "llama-3.1-8b", To: "mystery"}, why: `model "mystery" cannot run here`},
		{name: "not its model", setup: ollama, msg: control.SwitchMsg{From: "qwen2.5-7b", To: "llama-3.1-8b"}, why: "serves llama-3.1-8b, not qwen2.5-7b"},
		{name: "already serves it, by the engine's spelling", setup: ollama, msg: control.SwitchMsg{From: "llama-3.1-8b", To: "llama-3.1-8b:latest"},
			why: "already serves llama-3.1-8b"},
		{name: "engine down", setup: func(w *Worker) { ollama(w); w.remote.engine.down = true }, msg: toQwen, why: "is not answering"},
		{name: "engine stalled", setup: func(w *Worker) { ollama(w); w.remote.stalled = true }, msg: toQwen, why: "is stalled"},
		// Begun, drained, then the engine (nothing listens) fails the
		// unload: the worker keeps its model.
		{name: "unload fails", setup: ollama, msg: toQwen, why: "unload llama-3.1-8b from the engine"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			id := "sw-engine-" + string(rune('a'+i))
			w, sh := switchWorker(t, env.NC, id, Config{Backend: "openai", OpenAIURL: "http://127.0.0.1:1", DrainTimeout: time.Second})
			if tc.setup != nil {
				tc.setup(w)
			}
			se := watchSwitches(t, env.NC, id)
			w.startSwitch(tc.msg)
			ev := se.wait(t, sh, EventSwitchRefused)
			if tc.exact && ev.Reason != tc.why || !strings.Contains(ev.Reason, tc.why) {
				t.Errorf("refused: %q, want %q", ev.Reason, tc.why)
			}
			w.mu.Lock()
			down := w.remote.engine.down || w.remote.stalled
			w.mu.Unlock()
			if hb := w.Heartbeat(); (hb.Draining && !down) || w.Model() != "llama-3.1-8b" || w.Switching() != "" || w.engineModel("") != "llama-3.1-8b" {
				t.Errorf("after the refusal: draining %v, model %s, switching %q, served %q; want serving llama", hb.Draining, w.Model(), w.Switching(), w.engineModel(""))
			}
		})
	}
}

// switchingOllama is Ollama's native API as a switch uses it: two models
// on disk, a load on a generate request with a keep_alive, an unload on
// keep_alive 0, /api/ps listing what is loaded; calls records the loads
// and unloads in order.
type switchingOllama struct {
	mu     sync.Mutex
	loaded map[string]bool
	calls  []string
}

func (o *switchingOllama) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	o.mu.Lock()
	defer o.mu.Unlock()
	switch r.URL.Path {
	case "/api/version":
		fmt.Fprint(w, `{"version":"0.6.5"}`)
	case "/api/tags":
		fmt.Fprint(w, `{"models":[{"name":"tiny:latest","size":487104},{"name":"tiny-b:latest","size":487104}]}`)
	case "/api/show":
		fmt.Fprint(w, `{"details":{"family":"llama"},"model_info":{"general.architecture":"llama","general.parameter_count":119360,
"llama.attention.head_count":4,"llama.attention.head_count_kv":2,"llama.block_count":2,"llama.context_length":2048,
"llama.embedding_length":64,"llama.feed_forward_length":128,"llama.vocab_size":354}}`)
	case "/api/ps":
		var ms []string
		for m := range o.loaded {
			ms = append(ms, fmt.Sprintf(`{"name":%q,"model":%q}`, m, m))
		}
		fmt.Fprintf(w, `{"models":[%s]}`, strings.Join(ms, ","))
	case "/api/generate":
		var body struct {
			Model     string `json:"model"`
			KeepAlive any    `json:"keep_alive"`
		}
		json.NewDecoder(r.Body).Decode(&body)
		name := modelKey(body.Model)
		if body.KeepAlive == float64(0) {
			delete(o.loaded, name)
			o.calls = append(o.calls, "unload "+name)
			fmt.Fprint(w, `{"done":true,"done_reason":"unload"}`)
			return
		}
		o.loaded[name] = true
		o.calls = append(o.calls, "load "+name)
		fmt.Fprint(w, `{"done":true,"load_duration":123000000}`)
	default:
		http.NotFound(w, r)
	}
}

// The switch's steps on Ollama's API, against its documented shapes (the
// real engine's is internal/testkit/enginetest's TestSwitchModelOnOllama):
// unload the served model, load the new one, then serve it under the
// engine's name, the load's time as the engine reported it.
func TestEngineSwitchSteps(t *testing.T) {
	env := bustest.Start(t)
	fake := &switchingOllama{loaded: map[string]bool{}}
	srv := httptest.NewServer(fake)
	t.Cleanup(srv.Close)
	cfg := Config{ID: "sw-steps", GPU: "cpu", Model: "tiny", Backend: "openai", OpenAIURL: srv.URL, HeartbeatInterval: 20 * time.Millisecond}
	cat, err := LearnServedModel(context.Background(), catalog.Default(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Catalog = cat
	sh, err := svc.New("worker", cfg.ID, env.NC, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	w, err := New(sh, cfg)
	if err != nil {
		t.Fatal(err)
	}
	w.scrape(context.Background())               // the engine is Ollama
	w.ensureLoaded(context.Background(), "tiny") // the worker's model serves
	se := watchSwitches(t, env.NC, cfg.ID)
	if !w.startSwitch(control.SwitchMsg{From: "tiny", To: "tiny-b", Reason: "test"}) {
		t.Fatal("switch not started")
	}
	ev := se.wait(t, sh, EventSwitched)
	if ev.Fields["from_tier"] != schemas.TierDisk || ev.Fields["load_s"] != 0.123 {
		t.Errorf("switched %+v: want tiny-b from disk in the engine's 0.123 s", ev.Fields)
	}
	fake.mu.Lock()
	calls := strings.Join(fake.calls, ", ")
	fake.mu.Unlock()
	if want := "load tiny:latest, unload tiny:latest, load tiny-b:latest"; calls != want {
		t.Errorf("engine calls %q, want %q", calls, want)
	}
	hb := w.Heartbeat()
	if hb.Draining || len(hb.Models) != 2 || w.Model() != "tiny-b" || w.engineModel("") != "tiny-b:latest" || w.engineModel("tiny-b") != "tiny-b:latest" {
		t.Fatalf("after the switch: draining %v, models %+v, model %s, served %s", hb.Draining, hb.Models, w.Model(), w.engineModel(""))
	}
	if b := hb.Models[0]; b.Name != "tiny-b" || b.State != schemas.WeightHot || b.TierSeconds[schemas.TierDisk] != 0.123 {
		t.Errorf("serving %+v: want tiny-b hot, its load from disk measured", b)
	}
	if a := hb.Models[1]; a.Name != "tiny" || a.State != schemas.WeightCold || a.Tier != schemas.TierPageCache || a.Spec == nil {
		t.Errorf("the old model %+v: want tiny cold in the page cache, described", a)
	}
}
