package worker

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
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

// TestOllamaTiers: an Ollama model's tier follows what this worker saw —
// disk until the engine held it, page_cache once unloaded after — and
// tier_s carries a real load's time for the tier it was loaded from,
// named in tier_measured, the guess for the others.
func TestOllamaTiers(t *testing.T) {
	const guess = 0.9
	type step func(*weightTiers)
	resident := func(t *weightTiers) { t.noteResident("tiny") }
	loadFrom := func(tier string, s float64) step {
		return func(t *weightTiers) { t.noteLoad("tiny", tier, time.Duration(s*float64(time.Second))) }
	}
	for _, tc := range []struct {
		name         string
		steps        []step
		state        string
		wantTier     string
		wantLoad     float64
		wantMeasured []string
		wantTierS    map[string]float64
	}{
		{"never loaded", nil, schemas.WeightCold, schemas.TierDisk, guess, nil,
			map[string]float64{schemas.TierPageCache: guess, schemas.TierDisk: guess}},
		{"held, then unloaded", []step{resident}, schemas.WeightCold, schemas.TierPageCache, guess, nil,
			map[string]float64{schemas.TierPageCache: guess, schemas.TierDisk: guess}},
		{"loaded from disk, now resident", []step{loadFrom(schemas.TierDisk, 0.6)}, schemas.WeightHot, schemas.TierHBM, guess,
			[]string{schemas.TierDisk}, map[string]float64{schemas.TierPageCache: guess, schemas.TierDisk: 0.6}},
		{"reloaded through the page cache", []step{loadFrom(schemas.TierDisk, 0.6), loadFrom(schemas.TierPageCache, 0.25)}, schemas.WeightCold,
			schemas.TierPageCache, 0.25, []string{schemas.TierDisk, schemas.TierPageCache}, map[string]float64{schemas.TierPageCache: 0.25, schemas.TierDisk: 0.6}},
		{"resident after a reload: an unload costs the measured reload", []step{loadFrom(schemas.TierPageCache, 0.25)}, schemas.WeightHot,
			schemas.TierHBM, 0.25, []string{schemas.TierPageCache}, map[string]float64{schemas.TierPageCache: 0.25, schemas.TierDisk: guess}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var wt weightTiers
			wt.init()
			for _, s := range tc.steps {
				s(&wt)
			}
			m := schemas.ModelState{Name: "tiny", State: tc.state}
			tier := schemas.TierHBM
			if tc.state == schemas.WeightCold {
				tier = wt.offTier("tiny:latest") // the engine's spelling is the same model
			}
			wt.fill(&m, "tiny", tier, schemas.TierPageCache, map[string]float64{schemas.TierPageCache: guess, schemas.TierDisk: guess})
			if m.Tier != tc.wantTier || m.LoadSeconds != tc.wantLoad || !slices.Equal(m.TierMeasured, tc.wantMeasured) {
				t.Fatalf("tier %q load_s %v measured %v, want %q %v %v", m.Tier, m.LoadSeconds, m.TierMeasured, tc.wantTier, tc.wantLoad, tc.wantMeasured)
			}
			if fmt.Sprint(m.TierSeconds) != fmt.Sprint(tc.wantTierS) {
				t.Fatalf("tier_s %v, want %v", m.TierSeconds, tc.wantTierS)
			}
		})
	}
}

// sleepyVLLM is a vLLM server with sleep mode on, as its documentation
// describes it (openai/sleep.go): /metrics with vLLM's names, and the
// dev-mode sleep endpoints, each wake taking wakeDelay.
type sleepyVLLM struct {
	mu        sync.Mutex
	asleep    map[string]bool
	level     int
	calls     []string
	wakeDelay time.Duration
}

func (v *sleepyVLLM) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if r.URL.Path != "/metrics" {
		v.calls = append(v.calls, r.Method+" "+r.URL.RequestURI())
	}
	switch {
	case r.URL.Path == "/metrics":
		fmt.Fprint(w, vllmPage(0, 0, 0))
	case r.Method == http.MethodPost && r.URL.Path == "/sleep":
		fmt.Sscan(r.URL.Query().Get("level"), &v.level)
		v.asleep["weights"], v.asleep["kv_cache"] = true, true
	case r.Method == http.MethodPost && r.URL.Path == "/wake_up":
		time.Sleep(v.wakeDelay)
		tags := r.URL.Query()["tags"]
		if len(tags) == 0 {
			tags = []string{"weights", "kv_cache"}
		}
		for _, t := range tags {
			delete(v.asleep, t)
		}
	case r.Method == http.MethodPost && r.URL.Path == "/collective_rpc":
		if v.asleep["weights"] {
			http.Error(w, "weights asleep", http.StatusInternalServerError)
		}
	case r.Method == http.MethodGet && r.URL.Path == "/is_sleeping":
		fmt.Fprintf(w, `{"is_sleeping": %v}`, len(v.asleep) > 0)
	default:
		http.NotFound(w, r)
	}
}

func (v *sleepyVLLM) takeCalls() string {
	v.mu.Lock()
	defer v.mu.Unlock()
	c := strings.Join(v.calls, ", ")
	v.calls = nil
	return c
}

// TestVLLMSleepTiers: the controller's warmth decisions on a worker in
// front of vLLM become vLLM's sleep mode calls — sleeping is level 1
// (tier host), cold level 2 (tier page_cache), hot a wake — and the
// heartbeat says where the weights sit, with each wake's own time as the
// measured tier_s of the tier it woke from; a dispatch wakes a sleeping
// engine first; a sleep while requests run is refused (vLLM would abort
// them). Against the documented HTTP shapes, not a live vLLM.
func TestVLLMSleepTiers(t *testing.T) {
	env := bustest.Start(t)
	fake := &sleepyVLLM{asleep: map[string]bool{}, wakeDelay: 20 * time.Millisecond}
	srv := httptest.NewServer(fake)
	t.Cleanup(srv.Close)
	sh, err := svc.New("worker", "vllm-tiers", env.NC, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	w, err := New(sh, Config{ID: "vllm-tiers", GPU: "h100", Model: "llama-3.1-8b", Backend: "openai", OpenAIURL: srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	w.scrape(context.Background())
	model := func() schemas.ModelState {
		w.mu.Lock()
		defer w.mu.Unlock()
		return w.remoteHeartbeat().Models[0]
	}
	if m := model(); m.State != schemas.WeightHot || m.Tier != schemas.TierHBM || len(m.TierMeasured) != 0 || m.TierSeconds[schemas.TierHost] <= 0 {
		t.Fatalf("awake before any command: %+v", m)
	}
	estimate := model().TierSeconds[schemas.TierHost]

	steps := []struct {
		name      string
		act       func()
		calls     string
		state     string
		tier      string
		measured  []string
		measuredS string // tier whose tier_s must be the measured wake (≥ the fake's delay)
	}{
		{"sleep", func() { w.remoteWarmth("", schemas.WeightSleeping, "test") }, "POST /sleep?level=1, GET /is_sleeping",
			schemas.WeightSleeping, schemas.TierHost, nil, ""},
		{"wake", func() { w.remoteWarmth("", schemas.WeightHot, "test") }, "POST /wake_up, GET /is_sleeping",
			schemas.WeightHot, schemas.TierHBM, []string{schemas.TierHost}, schemas.TierHost},
		{"unload", func() { w.remoteWarmth("", schemas.WeightCold, "test") }, "POST /sleep?level=2, GET /is_sleeping",
			schemas.WeightCold, schemas.TierPageCache, []string{schemas.TierHost}, ""},
		{"a dispatch wakes it", func() { w.ensureLoaded(context.Background(), "llama-3.1-8b") },
			"POST /wake_up?tags=weights, POST /collective_rpc, POST /wake_up?tags=kv_cache",
			schemas.WeightHot, schemas.TierHBM, []string{schemas.TierHost, schemas.TierPageCache}, schemas.TierPageCache},
		{"no sleep while requests run", func() {
			w.mu.Lock()
			w.remote.running = 1
			w.mu.Unlock()
			w.remoteWarmth("", schemas.WeightSleeping, "test")
			w.mu.Lock()
			w.remote.running = 0
			w.mu.Unlock()
		}, "", schemas.WeightHot, schemas.TierHBM, []string{schemas.TierHost, schemas.TierPageCache}, ""},
	}
	fake.takeCalls()
	for _, s := range steps {
		s.act()
		if got := fake.takeCalls(); got != s.calls {
			t.Fatalf("%s: engine calls %q, want %q", s.name, got, s.calls)
		}
		m := model()
		if m.State != s.state || m.Tier != s.tier || !slices.Equal(m.TierMeasured, s.measured) {
			t.Fatalf("%s: heartbeat %s in %s measured %v, want %s in %s measured %v", s.name, m.State, m.Tier, m.TierMeasured, s.state, s.tier, s.measured)
		}
		if s.measuredS != "" {
			got := m.TierSeconds[s.measuredS]
			if got < fake.wakeDelay.Seconds() || got == estimate {
				t.Fatalf("%s: tier_s[%s] = %v, want the measured wake (≥ %v), not the estimate", s.name, s.measuredS, got, fake.wakeDelay)
			}
		}
	}
}

// TestSimulatedSleepHeartbeatsAtOnce: a simulated worker put to sleep
// heartbeats its sleeping state at once, as a real engine's worker does,
// not at its next periodic beat: a router that still counted it hot would
// place a request on it within the beat and wake it (the live
// rise-fall-repeat demo saw every sleep undone that way).
func TestSimulatedSleepHeartbeatsAtOnce(t *testing.T) {
	env := bustest.Start(t)
	sh, err := svc.New("worker", "sim-sleep", env.NC, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	w, err := New(sh, Config{ID: "sim-sleep", GPU: "h100", Model: "llama-3.1-8b", Backend: "sim"})
	if err != nil {
		t.Fatal(err)
	}
	beats := make(chan schemas.Heartbeat, 8)
	sub, err := env.NC.Subscribe(subjects.HeartbeatAll, func(m *nats.Msg) {
		var hb schemas.Heartbeat
		if svc.Decode(m.Header, m.Data, &hb) == nil {
			beats <- hb
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	env.NC.Flush()
	// The worker is not running: no periodic beat will come.
	m, err := svc.Encode(control.WarmthSubject("sim-sleep"), schemas.JSON, control.WarmthMsg{Worker: "sim-sleep", State: schemas.WeightSleeping, Reason: "test"}, "")
	if err != nil {
		t.Fatal(err)
	}
	w.onWarmth(m)
	select {
	case hb := <-beats:
		if len(hb.Models) == 0 || hb.Models[0].State != schemas.WeightSleeping || hb.Models[0].Tier != schemas.TierHost {
			t.Fatalf("heartbeat after the sleep: %+v", hb.Models)
		}
	case <-time.After(2 * time.Second):
		t.Fatal("no heartbeat after the warmth change")
	}
}

// TestSleepWaitsForTheSequences: the controller's sleep reaching a
// simulated worker whose engine runs a sequence waits for it, as the
// simulator's sleepPending does, instead of being dropped (the live demo
// saw every "sleep instead of release" refused that way); a hot command
// meanwhile cancels it.
func TestSleepWaitsForTheSequences(t *testing.T) {
	env := bustest.Start(t)
	for _, tc := range []struct {
		name      string
		thenHot   bool
		wantState string
	}{
		{"sleeps once idle", false, schemas.WeightSleeping},
		{"a hot command cancels it", true, schemas.WeightHot},
	} {
		t.Run(tc.name, func(t *testing.T) {
			id := "sim-defer-" + strings.ReplaceAll(tc.name, " ", "-")
			sh, err := svc.New("worker", id, env.NC, slog.New(slog.DiscardHandler))
			if err != nil {
				t.Fatal(err)
			}
			w, err := New(sh, Config{ID: id, GPU: "h100", Model: "llama-3.1-8b", Backend: "sim"})
			if err != nil {
				t.Fatal(err)
			}
			warmth := func(state string) {
				m, err := svc.Encode(control.WarmthSubject(id), schemas.JSON, control.WarmthMsg{Worker: id, State: state, Reason: "test"}, "")
				if err != nil {
					t.Fatal(err)
				}
				w.onWarmth(m)
			}
			weights := func() string {
				w.mu.Lock()
				defer w.mu.Unlock()
				return w.eng.State().Weights
			}
			w.mu.Lock()
			if err := w.eng.Add(engine.Sequence{ID: "held", PromptTokens: 64, MaxTokens: 64}); err != nil {
				t.Fatal(err)
			}
			w.eng.Step(time.Now())
			w.mu.Unlock()
			warmth(schemas.WeightSleeping)
			time.Sleep(3 * pendingSleepPoll)
			if got := weights(); got != schemas.WeightHot {
				t.Fatalf("asleep (%s) with a sequence running", got)
			}
			if tc.thenHot {
				warmth(schemas.WeightHot)
			}
			w.mu.Lock()
			w.eng.Cancel("held")
			w.mu.Unlock()
			deadline := time.Now().Add(2 * time.Second)
			for weights() != tc.wantState && time.Now().Before(deadline) {
				time.Sleep(pendingSleepPoll)
			}
			time.Sleep(3 * pendingSleepPoll)
			if got := weights(); got != tc.wantState {
				t.Fatalf("after the sequence: %s, want %s", got, tc.wantState)
			}
		})
	}
}
