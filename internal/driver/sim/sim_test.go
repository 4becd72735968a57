package sim

import (
	"encoding/json"
	"github.com/switchyard-ai/switchyard/internal/core/stats"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/switchyard-ai/switchyard/internal/core/perf"
	"github.com/switchyard-ai/switchyard/internal/core/routing"
	"github.com/switchyard-ai/switchyard/loadgen/traces"
	"github.com/switchyard-ai/switchyard/schemas"
)

// mooncakeSlice reads the first n (≤ 1,000) requests of the Mooncake
// conversation trace from the repository's slice of it (testdata/).
func mooncakeSlice(t testing.TB, n int) *traces.Trace {
	t.Helper()
	p := filepath.Join("..", "..", "..", "testdata", "traces", "mooncake_fast25_conversation_first1000.jsonl")
	if _, err := os.Stat(p); err != nil {
		t.Fatalf("trace slice missing from the repository: %v", err)
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

// TestSameActionsAsBareCore: the simulator holds no routing decision of
// its own. Every Input it gives its router core is recorded (as the live
// router journals them), fed to a bare routing.Core built the way the live
// router builds one, and must draw the same Actions, input for input: on a
// plain run, on an agentic trace with workflows and deadlines, and with a
// worker killed, one slowed and one gone silent mid-trace, so breakers,
// retries and the reaper are on the path.
func TestSameActionsAsBareCore(t *testing.T) {
	faults := []Fault{
		{At: 8 * time.Second, Worker: "h100-01", Kind: FaultDie},
		{At: 5 * time.Second, Worker: "h100-02", Kind: FaultSlow, Factor: 0.2},
		{At: 12 * time.Second, Worker: "h100-03", Kind: FaultSilent},
		{At: 30 * time.Second, Worker: "h100-03", Kind: FaultRecover},
	}
	agent := traces.Agentic(traces.AgenticConfig{Seed: 3, Duration: 30 * time.Second, WorkflowsPerSec: 1})
	for _, tc := range []struct {
		name   string
		tr     *traces.Trace
		policy string
		faults []Fault
	}{
		{"mooncake", mooncakeSlice(t, 200).Scale(4), "switchyard", nil},
		{"agentic", agent, "switchyard", nil},
		{"mooncake with faults", mooncakeSlice(t, 200).Scale(4), "switchyard", faults},
		{"llm-d flow control with faults", mooncakeSlice(t, 200).Scale(8), "llm-d", faults},
		{"dynamo with faults", mooncakeSlice(t, 200).Scale(8), "dynamo", faults},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := small
			cfg.Faults = tc.faults
			var inputs [][]byte
			var want [][]string
			cfg.OnInput = func(in routing.Input, acts []routing.Action) {
				b, err := json.Marshal(in)
				if err != nil {
					t.Fatal(err)
				}
				inputs = append(inputs, b)
				want = append(want, summarize(acts))
			}
			res := run(t, cfg, tc.tr, tc.policy)
			pol, err := NewPolicy(tc.policy, perf.NewPredictor(nil))
			if err != nil {
				t.Fatal(err)
			}
			bare := routing.New(cfg.RouterConfig(pol.Policy, perf.NewPredictor(nil)))
			kinds := map[string]int{}
			for k, b := range inputs {
				var in routing.Input
				if err := json.Unmarshal(b, &in); err != nil {
					t.Fatal(err)
				}
				got := summarize(bare.Apply(in, nil))
				if !slices.Equal(got, want[k]) {
					t.Fatalf("input %d (%s at %v): the simulator's core answered %v, a bare core %v", k, in.Kind, in.At.Sub(Epoch), want[k], got)
				}
				for _, a := range got {
					kinds[strings.SplitN(a, " ", 2)[0]]++
				}
			}
			// A run that never dispatched, or with faults never retried,
			// would prove nothing.
			if kinds[routing.ActDispatch] < len(tc.tr.Requests)/2 {
				t.Fatalf("only %d dispatches for %d requests: %v", kinds[routing.ActDispatch], len(tc.tr.Requests), kinds)
			}
			if tc.faults != nil && (res.Reliability.BreakerOpened == 0 || res.Reliability.Faults != len(tc.faults)) {
				t.Fatalf("faults left no mark: %+v", res.Reliability)
			}
			t.Logf("%d inputs, actions %v, reliability %+v, SLO %.3f", len(inputs), kinds, res.Reliability, res.SLOAttainment)
		})
	}
}

// summarize is an action as a comparable line.
func summarize(acts []routing.Action) []string {
	out := make([]string, 0, len(acts))
	for _, a := range acts {
		line := a.Kind + " " + a.ID + " " + a.Worker
		if a.Err != nil {
			line += " " + a.Err.Code + ": " + a.Err.Message
		}
		if a.Event != nil {
			line += " " + a.Event.Kind + " " + a.Event.Reason
		}
		out = append(out, line)
	}
	return out
}

// TestKilledWorker: a worker killed mid-trace. Its breaker opens when its
// heartbeats stop, the work it held is re-placed within the retry budget,
// and nothing is lost: every request ends with one outcome, and few fail.
func TestKilledWorker(t *testing.T) {
	tr := mooncakeSlice(t, 300).Scale(2)
	cfg := small
	cfg.Faults = []Fault{{At: 20 * time.Second, Worker: "h100-00", Kind: FaultDie}}
	outcomes := map[string]int{}
	cfg.OnResolve = func(o Outcome) { outcomes[o.Request.ID]++ }
	res := run(t, cfg, tr, "switchyard")
	rl := res.Reliability
	if rl.BreakerOpened < 1 || rl.Retried < 1 {
		t.Fatalf("the dead worker's breaker did not open or nothing was re-placed: %+v", rl)
	}
	for id, n := range outcomes {
		if n != 1 {
			t.Errorf("%s resolved %d times", id, n)
		}
	}
	if len(outcomes) != res.Requests || res.Finished+res.Failed+res.Shed != res.Requests {
		t.Fatalf("lost requests: %d outcomes, %+v", len(outcomes), res)
	}
	healthy := run(t, small, tr, "switchyard")
	if lost := res.Failed - healthy.Failed; lost > rl.RetryRefused+res.Requests/50 {
		t.Errorf("%d failed with the kill, %d without, %d retries refused: the re-placed work should mostly finish", res.Failed, healthy.Failed, rl.RetryRefused)
	}
	t.Logf("%+v; %d finished, %d failed (%d without the kill), %d shed of %d", rl, res.Finished, res.Failed, healthy.Failed, res.Shed, res.Requests)
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
		{"h100:8", []GPUSpec{{GPU: "h100", Count: 8, TP: 1}}, false},
		{"h100:8,a100-80g:4:2", []GPUSpec{{GPU: "h100", Count: 8, TP: 1}, {GPU: "a100-80g", Count: 4, TP: 2}}, false},
		{"l4", []GPUSpec{{GPU: "l4", Count: 1, TP: 1}}, false},
		{"h100:2@llama-3.1-70b,h100:2:2", []GPUSpec{{GPU: "h100", Count: 2, TP: 1, Model: "llama-3.1-70b"}, {GPU: "h100", Count: 2, TP: 2}}, false},
		{"h100:4@prefill,a100-80g:4@decode", []GPUSpec{{GPU: "h100", Count: 4, TP: 1, Role: "prefill"}, {GPU: "a100-80g", Count: 4, TP: 1, Role: "decode"}}, false},
		{"h100:2@prefill@llama-3.1-70b", []GPUSpec{{GPU: "h100", Count: 2, TP: 1, Role: "prefill", Model: "llama-3.1-70b"}}, false},
		{"h100:2@llama-3.1-70b@qwen2.5-7b", nil, true},
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
		return res, stats.Quantile(waits, 0.9)
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

// TestEachModelOnItsOwnPool: on a fleet of two pools serving two models,
// every policy sends each request to a replica of its own model (a
// simulated replica holds one model's weights and refuses others), and a
// request for a model nobody serves is answered unplaceable at once.
func TestEachModelOnItsOwnPool(t *testing.T) {
	tr := mooncakeSlice(t, 120)
	for i := range tr.Requests {
		switch {
		case i%10 == 9:
			tr.Requests[i].Model = "llama-3.1-70b" // served by nobody here
		case i%2 == 1:
			tr.Requests[i].Model = "qwen2.5-7b"
		}
	}
	cfg := Config{GPUs: []GPUSpec{{GPU: "h100", Count: 2, TP: 1, Model: "llama-3.1-8b"}, {GPU: "a100-80g", Count: 2, TP: 1, Model: "qwen2.5-7b"}},
		Model: "llama-3.1-8b"}
	for _, name := range []string{"switchyard", "dynamo", "least-loaded", "llm-d"} {
		t.Run(name, func(t *testing.T) {
			c := cfg
			c.OnResolve = func(o Outcome) {
				want := map[string]string{"": "h100", "llama-3.1-8b": "h100", "qwen2.5-7b": "a100-80g"}
				m := o.Request.Model
				if m == "llama-3.1-70b" {
					if o.Status != "failed" || o.Code != schemas.CodeUnplaceable || !o.Placed.IsZero() {
						t.Errorf("%s for an unserved model: %s %s placed %v", o.Request.ID, o.Status, o.Code, !o.Placed.IsZero())
					}
					if d := o.Done.Sub(o.Submitted); d > time.Second {
						t.Errorf("%s for an unserved model answered after %v, want at once", o.Request.ID, d)
					}
					return
				}
				if o.Worker != "" && !strings.HasPrefix(o.Worker, want[m]+"-") {
					t.Errorf("%s for %s ran on %s", o.Request.ID, m, o.Worker)
				}
			}
			run(t, c, tr, name)
		})
	}
}
