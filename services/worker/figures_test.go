package worker

import (
	"context"
	"fmt"
	"math"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/switchyard-ai/switchyard/internal/testkit/bustest"
	"github.com/switchyard-ai/switchyard/schemas"
	"github.com/switchyard-ai/switchyard/services/svc"
	"github.com/switchyard-ai/switchyard/subjects"
)

func TestBusyMeterSplitsTheEnginesTime(t *testing.T) {
	t0 := time.Unix(1000, 0)
	at := func(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }
	type ev struct {
		id    string
		at    float64
		start bool
	}
	for _, tc := range []struct {
		name  string
		batch int // the engine's own running count (0: not reported)
		evs   []ev
		want  map[string]float64
	}{
		{"alone", 0, []ev{{"a", 0, true}, {"a", 2, false}}, map[string]float64{"a": 2}},
		{"two at once", 0, []ev{{"a", 0, true}, {"b", 0, true}, {"a", 2, false}, {"b", 2, false}}, map[string]float64{"a": 1, "b": 1}},
		// a alone 1 s, both 1 s (0.5 each), b alone 2 s: 4 s busy in all.
		{"overlapping", 0, []ev{{"a", 0, true}, {"b", 1, true}, {"a", 2, false}, {"b", 4, false}}, map[string]float64{"a": 1.5, "b": 2.5}},
		{"idle between", 0, []ev{{"a", 0, true}, {"a", 1, false}, {"b", 5, true}, {"b", 6, false}}, map[string]float64{"a": 1, "b": 1}},
		// The engine runs four (two of other clients'): each of ours is a quarter.
		{"the engine's batch is larger", 4, []ev{{"a", 0, true}, {"b", 0, true}, {"a", 2, false}, {"b", 2, false}}, map[string]float64{"a": 0.5, "b": 0.5}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := busyMeter{Batch: tc.batch}
			got := map[string]float64{}
			for _, e := range tc.evs {
				if e.start {
					b.start(e.id, at(e.at))
				} else {
					got[e.id] = b.end(e.id, at(e.at))
				}
			}
			for id, w := range tc.want {
				if math.Abs(got[id]-w) > 1e-9 {
					t.Errorf("%s: %.3f s, want %.3f", id, got[id], w)
				}
			}
		})
	}
}

// Results from a real engine's API: GPU-seconds add up to the engine's busy
// time, not to wall time per request (four at once counted it four times);
// time to first token runs from submission and includes the wait for a
// slot here; SLO met is slo.Met, so a missed first-token target is a miss
// with the deadline kept (issue 29).
func TestRealEngineResultFigures(t *testing.T) {
	env := bustest.StartProvisioned(t, subjects.StreamOptions{})
	engine := slowEngine(t, 20, 50*time.Millisecond) // 1 s each
	var mu sync.Mutex
	results := map[string]schemas.Result{}
	sub, err := env.NC.Subscribe(subjects.Final("acme", "*"), func(m *nats.Msg) {
		var res schemas.Result
		if svc.Decode(m.Header, m.Data, &res) == nil {
			mu.Lock()
			results[res.ID] = res
			mu.Unlock()
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	// Two slots: of four requests, two wait for the first two.
	startWorker(t, env, Config{ID: "fig", GPU: "h100", Model: "llama-3.1-8b", Backend: "openai", OpenAIURL: engine.URL, MaxConcurrent: 2, TP: 2})
	start := time.Now()
	for i := range 4 {
		now := time.Now()
		d := schemas.Dispatch{V: schemas.Version, WorkerID: "fig", PlacedAt: now, Admitted: schemas.Admitted{
			Tenant: "acme", Model: "llama-3.1-8b", Priority: schemas.PriorityStandard, PromptTokens: 4, SubmittedAt: now,
			Deadline: now.Add(time.Minute), TTFTTargetMs: 500,
			Request: schemas.Request{ID: fmt.Sprintf("fig-%d", i), Model: "llama-3.1-8b", Prompt: "p", MaxTokens: 20}}}
		m, err := svc.Encode(subjects.Dispatch("fig"), schemas.Msgpack, d, d.Admitted.Request.ID+"-a0")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := env.JS.PublishMsg(context.Background(), m); err != nil {
			t.Fatal(err)
		}
	}
	for {
		mu.Lock()
		n := len(results)
		mu.Unlock()
		if n == 4 {
			break
		}
		if time.Since(start) > 30*time.Second {
			t.Fatalf("%d of 4 results in 30 s", n)
		}
		time.Sleep(20 * time.Millisecond)
	}
	wall := time.Since(start).Seconds()
	gpu, late := 0.0, 0
	for _, r := range results {
		gpu += r.GPUSeconds
		if r.Timing.TTFTMs > 500 {
			late++
			if r.SLOMet {
				t.Errorf("%s: first token after %.0f ms against a 500 ms target, yet SLO met", r.ID, r.Timing.TTFTMs)
			}
		} else if !r.SLOMet {
			t.Errorf("%s: first token after %.0f ms and deadline kept, yet SLO missed", r.ID, r.Timing.TTFTMs)
		}
	}
	// The engine is busy for the ~2 s run at TP 2: ~4 GPU-seconds in all,
	// never more than the wall time × TP; wall time per request gave ~8
	// (4 × 1 s × 2).
	if gpu > wall*2*1.05 || gpu < 2*2*0.8 {
		t.Fatalf("GPU-seconds %.2f over a %.2f s run with TP 2: want the engine's busy time × TP (about %.1f)", gpu, wall, 2*2.0)
	}
	// The two that waited for a slot (~1 s) are late against 500 ms.
	if late != 2 {
		t.Fatalf("%d requests over the 500 ms first-token target, want the 2 that waited for a slot: %+v", late, results)
	}
	t.Logf("four 1 s generations on two slots, TP 2: %.2f GPU-seconds over %.2f s", gpu, wall)
}
