package sim

import (
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"testing"
	"time"

	"github.com/switchyard-ai/switchyard/internal/fleet"
	"github.com/switchyard-ai/switchyard/internal/perf"
	"github.com/switchyard-ai/switchyard/internal/placement"
	"github.com/switchyard-ai/switchyard/loadgen/traces"
	"github.com/switchyard-ai/switchyard/schemas"
)

func mooncakeSlice(t testing.TB, n int) *traces.Trace {
	t.Helper()
	p := filepath.Join("../../../shared/traces", "mooncake_fast25_conversation_t0000-2400s.jsonl")
	if _, err := os.Stat(p); err != nil {
		t.Skipf("trace not present: %v", err)
	}
	tr, err := traces.ReadMooncakeFile(p, traces.ReadOptions{Limit: n, Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	return tr
}

func run(t testing.TB, cfg Config, tr *traces.Trace, name string) *Result {
	t.Helper()
	pol, err := NewPolicy(name, perf.NewPredictor(nil))
	if err != nil {
		t.Fatal(err)
	}
	res, err := Run(cfg, tr, pol)
	if err != nil {
		t.Fatal(err)
	}
	return res
}

var small = Config{GPUs: []GPUSpec{{GPU: "h100", Count: 4}}, Model: "llama-3.1-8b"}

// TestDeterministic: the same trace, seed and policy give the same result,
// field for field (wall time aside).
func TestDeterministic(t *testing.T) {
	tr := mooncakeSlice(t, 150)
	agent := traces.Agentic(traces.AgenticConfig{Seed: 2, Duration: 40 * time.Second, WorkflowsPerSec: 1})
	for _, name := range []string{"switchyard", "llm-d", "sglang", "dynamo", "least-loaded", "random"} {
		for _, tc := range []struct {
			label string
			tr    *traces.Trace
		}{{"mooncake", tr}, {"agentic", agent}} {
			a := run(t, small, tc.tr, name)
			b := run(t, small, tc.tr, name)
			a.WallSeconds, b.WallSeconds = 0, 0
			if !reflect.DeepEqual(a, b) {
				t.Errorf("%s on %s: two runs differ:\n%+v\n%+v", name, tc.label, a, b)
			}
			if a.Requests+a.Skipped != len(tc.tr.Requests) {
				t.Errorf("%s on %s: %d requests + %d skipped, trace has %d", name, tc.label, a.Requests, a.Skipped, len(tc.tr.Requests))
			}
			if a.Finished+a.Failed+a.Shed != a.Requests {
				t.Errorf("%s on %s: outcomes do not add up: %+v", name, tc.label, a)
			}
		}
	}
}

// TestSameDecisionAsLiveRouter: at every placement the simulator makes, a
// fresh Placer given the same fleet and the request the live router would
// build from the admitter's envelope (placement.FromAdmitted, as
// services/router does) picks the same worker.
func TestSameDecisionAsLiveRouter(t *testing.T) {
	tr := mooncakeSlice(t, 120)
	pred := perf.NewPredictor(nil)
	live := placement.New(pred, placement.Options{})
	checked := 0
	cfg := small
	cfg.OnPlace = func(f *fleet.Fleet, req *placement.Request, now time.Time, d *placement.Decision) {
		adm := schemas.Admitted{
			Request: schemas.Request{ID: req.ID, Model: req.Model, MaxTokens: req.OutputTokens, Priority: req.Priority},
			Tenant:  req.Tenant, Priority: req.Priority, Model: req.Model, Deadline: req.Deadline,
			PromptTokens: req.PromptTokens, BlockHashes: req.BlockHashes,
		}
		lr := placement.FromAdmitted(&adm, "", time.Time{})
		want := d.Worker
		got := live.Place(f, &lr, now)
		if (want == nil) != (got.Worker == nil) || (want != nil && want.ID != got.Worker.ID) {
			t.Fatalf("%s: simulator chose %v, live path %v", req.ID, want, got.Worker)
		}
		checked++
	}
	pol, _ := NewPolicy("switchyard", pred)
	if _, err := Run(cfg, tr, pol); err != nil {
		t.Fatal(err)
	}
	if checked < len(tr.Requests) {
		t.Fatalf("only %d placements checked for %d requests", checked, len(tr.Requests))
	}
}

// TestPrefixAwareBeatsRandomOnSharedPrefix is the llm-d benchmark's shape,
// shrunk: prefix-aware routing keeps the shared prompts cached and the
// queue short, cache-blind routing recomputes them.
func TestPrefixAwareBeatsRandomOnSharedPrefix(t *testing.T) {
	tr := traces.SharedPrefix(traces.SharedPrefixConfig{Seed: 1, Groups: 40, Ladder: []float64{20}, StageDuration: 40 * time.Second})
	cfg := Config{GPUs: []GPUSpec{{GPU: "h100", Count: 4}}, Model: "llama-3.1-8b", KVBlocks: 6000}
	rnd := run(t, cfg, tr, "random")
	for _, name := range []string{"llm-d", "switchyard"} {
		r := run(t, cfg, tr, name)
		if r.PrefixHitRate < rnd.PrefixHitRate+0.1 {
			t.Errorf("%s hit rate %.3f, random %.3f", name, r.PrefixHitRate, rnd.PrefixHitRate)
		}
		if r.TTFTP90ms >= rnd.TTFTP90ms {
			t.Errorf("%s p90 TTFT %.0f ms, random %.0f ms", name, r.TTFTP90ms, rnd.TTFTP90ms)
		}
	}
}

func TestWorkflowsSkipAfterFailure(t *testing.T) {
	// One replica whose KV cannot hold the prompts: every step 1 fails
	// (engine refuses it), so later steps are never sent.
	tr := traces.Agentic(traces.AgenticConfig{Seed: 4, Duration: 20 * time.Second, WorkflowsPerSec: 0.5})
	cfg := Config{GPUs: []GPUSpec{{GPU: "h100", Count: 1}}, Model: "llama-3.1-8b", KVBlocks: 64}
	res := run(t, cfg, tr, "round-robin")
	if res.Finished != 0 || res.Skipped == 0 || res.TasksSucceeded != 0 {
		t.Fatalf("want every workflow to fail at step 1: %+v", res)
	}
	if res.Failed != res.Tasks {
		t.Errorf("failed %d, workflows %d", res.Failed, res.Tasks)
	}
}

func TestParseGPUs(t *testing.T) {
	cases := []struct {
		in   string
		want []GPUSpec
		err  bool
	}{
		{"h100:8", []GPUSpec{{"h100", 8, 1}}, false},
		{"h100:8,a100-80g:4:2", []GPUSpec{{"h100", 8, 1}, {"a100-80g", 4, 2}}, false},
		{"l4", []GPUSpec{{"l4", 1, 1}}, false},
		{"h100:x", nil, true},
		{"", nil, true},
	}
	for _, c := range cases {
		got, err := ParseGPUs(c.in)
		if (err != nil) != c.err || (!c.err && !reflect.DeepEqual(got, c.want)) {
			t.Errorf("ParseGPUs(%q) = %v, %v", c.in, got, err)
		}
	}
}

// TestOnResolveSeesEveryRequest: the diagnostics hook reports each issued
// request once, with the status the metrics count.
func TestOnResolveSeesEveryRequest(t *testing.T) {
	tr := mooncakeSlice(t, 300).Scale(8)
	cfg := small
	cfg.Drain = 20 * time.Second // short enough that some requests are cut off
	seen := map[string]string{}
	cfg.OnResolve = func(o Outcome) {
		if _, dup := seen[o.Request.ID]; dup {
			t.Errorf("%s reported twice", o.Request.ID)
		}
		seen[o.Request.ID] = o.Status
		if o.Status == "ok" && (o.Placed.IsZero() || o.Worker == "" || o.TTFT <= 0) {
			t.Errorf("%s finished without placement or TTFT: %+v", o.Request.ID, o)
		}
	}
	res := run(t, cfg, tr, "switchyard")
	count := map[string]int{}
	for _, s := range seen {
		count[s]++
	}
	if len(seen) != res.Requests || count["ok"] != res.Finished || count["shed"] != res.Shed || count["failed"] != res.Failed {
		t.Errorf("hook saw %d requests %v; result has %d: %d finished, %d shed, %d failed",
			len(seen), count, res.Requests, res.Finished, res.Shed, res.Failed)
	}
}

// TestPriorityUnderOverload: past capacity, the class queue's adaptive
// LIFO (queue.DefaultLIFOAfter) must keep serving interactive requests
// while they can still start in time. Under plain EDF the interactive
// class's oldest requests, whose slack no worker could meet any more,
// were offered first in every pass, so interactive requests waited in
// the queue past their first-token targets while batch work was placed.
func TestPriorityUnderOverload(t *testing.T) {
	tr := mooncakeSlice(t, 1000).Scale(12)
	wait := func(lifoAfter time.Duration) (*Result, float64) {
		var waits []float64
		cfg := small
		cfg.QueueLIFOAfter = lifoAfter
		cfg.OnResolve = func(o Outcome) {
			if o.Request.Priority == schemas.PriorityInteractive && !o.Placed.IsZero() {
				waits = append(waits, o.Placed.Sub(o.Submitted).Seconds())
			}
		}
		res := run(t, cfg, tr, "switchyard")
		sort.Float64s(waits)
		return res, Quantile(waits, 0.9)
	}
	edf, edfWait := wait(-1)
	lifo, lifoWait := wait(0)
	class := func(r *Result, p string) float64 { return r.ByPriority[p].SLOAttainment }
	t.Logf("EDF: interactive %.3f critical %.3f, queue wait p90 %.1f s; adaptive LIFO: interactive %.3f critical %.3f, p90 %.1f s",
		class(edf, schemas.PriorityInteractive), class(edf, schemas.PriorityCritical), edfWait,
		class(lifo, schemas.PriorityInteractive), class(lifo, schemas.PriorityCritical), lifoWait)
	if got, base := class(lifo, schemas.PriorityInteractive), class(edf, schemas.PriorityInteractive); got < base+0.05 {
		t.Errorf("interactive attainment %.3f with adaptive LIFO, %.3f with EDF: want at least +0.05", got, base)
	}
	if edfWait < 3*lifoWait {
		t.Errorf("interactive queue wait p90 %.1f s with adaptive LIFO, %.1f s with EDF: want under a third of EDF's", lifoWait, edfWait)
	}
}
