package sim

import (
	"context"
	"math"
	"path/filepath"
	"reflect"
	"sort"
	"testing"
	"time"

	"github.com/switchyard-ai/switchyard/internal/core/perf"
	"github.com/switchyard-ai/switchyard/loadgen/traces"
	"github.com/switchyard-ai/switchyard/schemas"
)

func TestResizeFleet(t *testing.T) {
	pools := []GPUSpec{{GPU: "h100", Count: 2, TP: 2}, {GPU: "a100-80g", Count: 2}, {GPU: "l40s", Count: 4, Model: "qwen2.5-7b"}}
	cases := []struct {
		n    int
		want []int
	}{
		{8, []int{2, 2, 4}},
		{4, []int{1, 1, 2}},
		{3, []int{1, 1, 1}},
		{1, []int{1, 1, 1}}, // every pool keeps one
		{6, []int{2, 1, 3}}, // 1.5, 1.5, 3: the first remainder wins
		{16, []int{4, 4, 8}},
		{10, []int{3, 2, 5}},
	}
	for _, tc := range cases {
		got := ResizeFleet(pools, tc.n)
		var counts []int
		for i, g := range got {
			counts = append(counts, g.Count)
			if g.GPU != pools[i].GPU || g.TP != pools[i].TP || g.Model != pools[i].Model {
				t.Fatalf("n=%d: pool %d changed kind: %+v", tc.n, i, g)
			}
		}
		if !reflect.DeepEqual(counts, tc.want) {
			t.Errorf("n=%d: counts %v, want %v", tc.n, counts, tc.want)
		}
	}
	if pools[0].Count != 2 {
		t.Fatal("ResizeFleet changed its input")
	}
}

// capacityTrace is a small Azure slice: a few hundred requests, so a whole
// search stays cheap on a shared machine.
func capacityTrace(t *testing.T, n int) *traces.Trace {
	t.Helper()
	tr, err := traces.ReadAzureFile(filepath.Join("..", "..", "..", "testdata", "traces", "azure_llm_2023_code_first1000.csv"), traces.ReadOptions{Limit: n, Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	return tr
}

// TestCapacitySearchBrackets: each answer is a probe that met its bar, the
// reported failure a probe that did not, within the tolerance of each
// other, with no failure at or below the answer on the way; the smallest
// fleet met both bars at 1× and one replica fewer did not.
func TestCapacitySearchBrackets(t *testing.T) {
	tr := capacityTrace(t, 250)
	cfg := Config{GPUs: []GPUSpec{{GPU: "h100", Count: 1}, {GPU: "a100-80g", Count: 1}}, Model: "llama-3.1-8b"}
	s := CapacitySearch{Tolerance: 0.1, MaxScale: 32, MaxFleetFactor: 2, Parallel: 2}
	caps, err := findCapacity(context.Background(), cfg, tr, 0, []string{"least-loaded", "switchyard"}, s)
	if err != nil {
		t.Fatal(err)
	}
	if len(caps) != 2 || caps[0].Name != "least-loaded" || caps[1].Name != "switchyard" {
		t.Fatalf("capacities %+v", caps)
	}
	for _, c := range caps {
		probe := func(scale float64, n int) CapacityProbe {
			for _, p := range c.Probes {
				if p.Scale == scale && p.Replicas == n {
					return p
				}
			}
			t.Fatalf("%s: no probe at %g× on %d replicas (probes %+v)", c.Name, scale, n, c.Probes)
			return CapacityProbe{}
		}
		for _, b := range []struct {
			label      string
			pass, fail float64
			meets      func(CapacityProbe) bool
		}{
			{"slo90", c.ScaleAtSLO90, c.FailSLO90, func(p CapacityProbe) bool { return p.Meets }},
			{"high99", c.ScaleAtHigh99, c.FailHigh99, func(p CapacityProbe) bool { return p.MeetsH }},
		} {
			if b.pass <= 0 || b.fail <= 0 {
				t.Fatalf("%s %s: pass %g fail %g; the slice should be met at some scale and fail by 32×", c.Name, b.label, b.pass, b.fail)
			}
			if !b.meets(probe(b.pass, 2)) || b.meets(probe(b.fail, 2)) {
				t.Errorf("%s %s: probe at %g× should meet and at %g× fail", c.Name, b.label, b.pass, b.fail)
			}
			if b.fail <= b.pass || b.fail/b.pass > 1+s.Tolerance+1e-3 {
				t.Errorf("%s %s: bracket [%g, %g] wider than the tolerance", c.Name, b.label, b.pass, b.fail)
			}
			for _, p := range c.Probes {
				if p.Replicas == 2 && p.Scale <= b.pass && !b.meets(p) && p.Scale >= s.Start {
					t.Errorf("%s %s: %g× failed below the answer %g×, which must lie below the first failure", c.Name, b.label, p.Scale, b.pass)
				}
			}
		}
		if c.ScaleAtHigh99 > c.ScaleAtSLO90*2 {
			t.Errorf("%s: high classes at 0.99 up to %g× but overall 0.90 only to %g×", c.Name, c.ScaleAtHigh99, c.ScaleAtSLO90)
		}
		if c.MinReplicas < 2 || c.MinReplicas > 4 {
			t.Fatalf("%s: min replicas %d, want within [pools, 2× the fleet]", c.Name, c.MinReplicas)
		}
		if p := probe(1, c.MinReplicas); !p.Meets || !p.MeetsH {
			t.Errorf("%s: the smallest fleet %d misses at 1×: %+v", c.Name, c.MinReplicas, p)
		}
		if c.MinReplicas > 2 {
			if p := probe(1, c.MinReplicas-1); p.Meets && p.MeetsH {
				t.Errorf("%s: %d replicas also met both bars", c.Name, c.MinReplicas-1)
			}
		}
		if c.MinGPUs != c.MinReplicas || c.Replicas != 2 || c.GPUs != 2 {
			t.Errorf("%s: GPUs %d of %d replicas, fleet %d/%d", c.Name, c.MinGPUs, c.MinReplicas, c.Replicas, c.GPUs)
		}
	}
	// Deterministic: the same search twice gives the same answer.
	again, err := findCapacity(context.Background(), cfg, tr, 0, []string{"least-loaded"}, s)
	if err != nil {
		t.Fatal(err)
	}
	if again[0].ScaleAtSLO90 != caps[0].ScaleAtSLO90 || again[0].ScaleAtHigh99 != caps[0].ScaleAtHigh99 || again[0].MinReplicas != caps[0].MinReplicas {
		t.Errorf("second search %+v, first %+v", again[0], caps[0])
	}
}

func TestCapacitySearchRefusesBadInput(t *testing.T) {
	tr := capacityTrace(t, 20)
	cfg := Config{GPUs: []GPUSpec{{GPU: "h100", Count: 1}}, Model: "llama-3.1-8b"}
	if _, err := findCapacity(context.Background(), cfg, tr, 0, []string{"no-such-policy"}, CapacitySearch{}); err == nil {
		t.Error("an unknown policy was accepted")
	}
	if _, err := findCapacity(context.Background(), cfg, &traces.Trace{}, 0, []string{"dynamo"}, CapacitySearch{}); err == nil {
		t.Error("an empty trace was accepted")
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := findCapacity(ctx, cfg, tr, 0, []string{"dynamo"}, CapacitySearch{}); err == nil {
		t.Error("a cancelled search returned no error")
	}
}

// TestCapacitySearchWindow: with a window, a probe at x× runs the first
// window of the trace scaled by x, and the search stops where the window
// would outrun the trace.
func TestCapacitySearchWindow(t *testing.T) {
	tr := capacityTrace(t, 300)
	last := tr.Requests[len(tr.Requests)-1].Arrival
	window := last / 5
	cfg := Config{GPUs: []GPUSpec{{GPU: "h100", Count: 4}}, Model: "llama-3.1-8b"}
	caps, err := findCapacity(context.Background(), cfg, tr, window, []string{"dynamo"}, CapacitySearch{MaxScale: 64, Tolerance: 0.2, NoFleet: true, MinHighRequests: -1})
	if err != nil {
		t.Fatal(err)
	}
	c := caps[0]
	if c.MaxScale > 5 || c.MaxScale < 4.9 {
		t.Fatalf("max scale %g, want the trace's span over the window, 5", c.MaxScale)
	}
	top := false
	for _, p := range c.Probes {
		if p.Scale > c.MaxScale {
			t.Errorf("probe at %g× beyond the max scale %g×", p.Scale, c.MaxScale)
		}
		top = top || p.Scale == c.MaxScale
	}
	if c.FailSLO90 == 0 && (!top || c.ScaleAtSLO90 != c.MaxScale) {
		t.Errorf("never failed, but reported %g× without probing the max scale %g× (probes %+v)", c.ScaleAtSLO90, c.MaxScale, c.Probes)
	}
	if _, err := findCapacity(context.Background(), cfg, tr, 2*last, []string{"dynamo"}, CapacitySearch{}); err == nil {
		t.Error("a window longer than the trace was accepted")
	}
	for _, p := range c.Probes {
		if p.WindowSeconds != window.Seconds() || p.Requests == 0 {
			t.Errorf("probe at %g×: window %gs with %d requests, want the given %v", p.Scale, p.WindowSeconds, p.Requests, window)
		}
	}
	bound, _, err := BoundScale(cfg, tr, window)
	if err != nil {
		t.Fatal(err)
	}
	if c.ScaleAtSLO90 > bound {
		t.Errorf("dynamo met the 0.90 bar at %g×, above the roofline bound %g×", c.ScaleAtSLO90, bound)
	}
	t.Logf("dynamo %g× (fails %g×), bound %g×", c.ScaleAtSLO90, c.FailSLO90, bound)
}

// TestProbeWindow: a probe's window is the given one unless that holds
// fewer than the minimum of high-class requests at the probe's scale;
// then it is lengthened to hold them, or is the whole trace where the
// trace holds fewer.
func TestProbeWindow(t *testing.T) {
	// One high-class request a second, a standard one between each.
	tr := &traces.Trace{}
	for i := 0; i < 200; i++ {
		p := schemas.PriorityStandard
		if i%2 == 0 {
			p = schemas.PriorityInteractive
		}
		tr.Requests = append(tr.Requests, traces.Request{Arrival: time.Duration(i) * 500 * time.Millisecond, Priority: p})
	}
	for _, tc := range []struct {
		name    string
		window  time.Duration
		scale   float64
		minHigh int
		want    time.Duration
		high    int // high-class requests the window holds at that scale
	}{
		{"the given window already holds them", 60 * time.Second, 1, 50, 60 * time.Second, 60},
		{"lengthened at 1x", 10 * time.Second, 1, 50, 49*time.Second + 1, 50},
		{"lengthened less at 2x", 10 * time.Second, 2, 50, 24500*time.Millisecond + 1, 50},
		{"a high scale keeps the given window", 10 * time.Second, 8, 50, 10 * time.Second, 80},
		{"the whole trace when it holds too few", 10 * time.Second, 1, 500, 0, 100},
		{"no minimum", 10 * time.Second, 1, -1, 10 * time.Second, 10},
		{"no window: every row", 0, 1, 50, 0, 100},
	} {
		got := ProbeWindow(tr, tc.window, tc.scale, tc.minHigh)
		if got != tc.want {
			t.Errorf("%s: window %v, want %v", tc.name, got, tc.want)
		}
		if n := countHigh(tr.Scale(tc.scale).Window(got)); n != tc.high {
			t.Errorf("%s: the window holds %d high-class requests, want %d", tc.name, n, tc.high)
		}
	}
}

// TestFindCapacitySeeds: each headline figure is the median over the
// seeds, the range spans every seed's figure, each seed's own search is
// reported with its seed, and every probe is tagged with its seed.
func TestFindCapacitySeeds(t *testing.T) {
	cfg := Config{GPUs: []GPUSpec{{GPU: "h100", Count: 1}}, Model: "llama-3.1-8b"}
	var runs []CapacityRun
	for _, seed := range []int64{1, 2, 3} {
		tr, err := traces.ReadAzureFile(filepath.Join("..", "..", "..", "testdata", "traces", "azure_llm_2023_code_first1000.csv"), traces.ReadOptions{Limit: 120, Seed: seed})
		if err != nil {
			t.Fatal(err)
		}
		c := cfg
		c.Seed = seed
		runs = append(runs, CapacityRun{Seed: seed, Config: c, Trace: tr})
	}
	s := CapacitySearch{Tolerance: 0.25, MaxScale: 16, NoFleet: true, Parallel: 2}
	caps, err := FindCapacitySeeds(context.Background(), runs, []string{"least-loaded"}, s)
	if err != nil {
		t.Fatal(err)
	}
	c := caps[0]
	if len(c.Seeds) != 3 || c.Range == nil {
		t.Fatalf("seeds %+v range %+v", c.Seeds, c.Range)
	}
	for _, m := range []struct {
		label string
		got   float64
		rng   [2]float64
		each  func(SeedCapacity) float64
	}{
		{"slo90", c.ScaleAtSLO90, c.Range.ScaleAtSLO90, func(x SeedCapacity) float64 { return x.ScaleAtSLO90 }},
		{"high99", c.ScaleAtHigh99, c.Range.ScaleAtHigh99, func(x SeedCapacity) float64 { return x.ScaleAtHigh99 }},
	} {
		var v []float64
		for i, sc := range c.Seeds {
			if sc.Seed != runs[i].Seed {
				t.Errorf("seed %d reported as %d", runs[i].Seed, sc.Seed)
			}
			v = append(v, m.each(sc))
		}
		sort.Float64s(v)
		if m.got != v[1] || m.rng != [2]float64{v[0], v[2]} {
			t.Errorf("%s: median %g range %v, seeds %v", m.label, m.got, m.rng, v)
		}
	}
	tagged := map[int64]int{}
	for _, p := range c.Probes {
		tagged[p.Seed]++
	}
	if len(tagged) != 3 || tagged[0] != 0 {
		t.Errorf("probes by seed %v: want every probe tagged with one of the three seeds", tagged)
	}
	t.Logf("least-loaded by seed: %+v", c.Seeds)
}

// TestMergeSeedsMedians pins the median rules: the lower middle for an
// even count, a "never failed" (0) failure above every measured one, and a
// "none" (0) smallest fleet larger than any found.
func TestMergeSeedsMedians(t *testing.T) {
	runs := []CapacityRun{{Seed: 1}, {Seed: 2}, {Seed: 3}, {Seed: 4}}
	for _, tc := range []struct {
		name                string
		per                 []PolicyCapacity
		slo, fail           float64
		reps                int
		repRange            [2]int
		sloRange, highRange [2]float64
	}{
		{
			name: "odd",
			per: []PolicyCapacity{{ScaleAtSLO90: 2, FailSLO90: 2.2, MinReplicas: 4}, {ScaleAtSLO90: 1, FailSLO90: 1.1, MinReplicas: 5},
				{ScaleAtSLO90: 3, FailSLO90: 0, MinReplicas: 0}},
			slo: 2, fail: 2.2, reps: 5, repRange: [2]int{4, 0}, sloRange: [2]float64{1, 3},
		},
		{
			name: "even: the lower middle",
			per: []PolicyCapacity{{ScaleAtSLO90: 4, FailSLO90: 0, MinReplicas: 3}, {ScaleAtSLO90: 1, FailSLO90: 1.1, MinReplicas: 3},
				{ScaleAtSLO90: 3, FailSLO90: 0, MinReplicas: 0}, {ScaleAtSLO90: 2, FailSLO90: 2.2, MinReplicas: 0}},
			slo: 2, fail: 2.2, reps: 3, repRange: [2]int{3, 0}, sloRange: [2]float64{1, 4},
		},
	} {
		got := mergeSeeds(tc.per, runs[:len(tc.per)])
		if got.ScaleAtSLO90 != tc.slo || got.FailSLO90 != tc.fail || got.MinReplicas != tc.reps {
			t.Errorf("%s: slo %g fail %g replicas %d, want %g %g %d", tc.name, got.ScaleAtSLO90, got.FailSLO90, got.MinReplicas, tc.slo, tc.fail, tc.reps)
		}
		if got.Range.MinReplicas != tc.repRange || got.Range.ScaleAtSLO90 != tc.sloRange {
			t.Errorf("%s: range %+v, want replicas %v slo %v", tc.name, got.Range, tc.repRange, tc.sloRange)
		}
	}
}

// TestBoundScale: the roofline bound scales with the fleet and against
// the demand, is lower on a slower generation, and takes the scarcest
// model of a multi-model fleet.
func TestBoundScale(t *testing.T) {
	tr := capacityTrace(t, 300)
	window := tr.Requests[len(tr.Requests)-1].Arrival / 2
	bound := func(cfg Config, tr *traces.Trace, window time.Duration) float64 {
		t.Helper()
		b, _, err := BoundScale(cfg, tr, window)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	h1 := bound(Config{GPUs: []GPUSpec{{GPU: "h100", Count: 1}}, Model: "llama-3.1-8b"}, tr, window)
	// Without a window the demand is the whole trace over its span, so a
	// scaled trace is the same mix at a higher rate.
	h1All := bound(Config{GPUs: []GPUSpec{{GPU: "h100", Count: 1}}, Model: "llama-3.1-8b"}, tr, 0)
	for _, tc := range []struct {
		name  string
		got   float64
		ratio float64 // got ÷ h1, within 1 %
		below bool    // instead: got < h1
	}{
		{"twice the replicas, twice the bound", bound(Config{GPUs: []GPUSpec{{GPU: "h100", Count: 2}}, Model: "llama-3.1-8b"}, tr, window), 2, false},
		{"twice the rate, half the bound", bound(Config{GPUs: []GPUSpec{{GPU: "h100", Count: 1}}, Model: "llama-3.1-8b"}, tr.Scale(2), 0) * h1 / h1All, 0.5, false},
		{"an L40S serves less than an H100", bound(Config{GPUs: []GPUSpec{{GPU: "l40s", Count: 1}}, Model: "llama-3.1-8b"}, tr, window), 0, true},
	} {
		if tc.below {
			if tc.got >= h1 {
				t.Errorf("%s: %g, want below the H100's %g", tc.name, tc.got, h1)
			}
			continue
		}
		if r := tc.got / h1; r < tc.ratio*0.99 || r > tc.ratio*1.01 {
			t.Errorf("%s: %g against %g (ratio %.3f), want %g", tc.name, tc.got, h1, r, tc.ratio)
		}
	}
	// Half the requests for another model, served by its own pool: the
	// bound is the scarcer pool's.
	mm := &traces.Trace{Requests: append([]traces.Request(nil), tr.Requests...)}
	for i := range mm.Requests {
		if i%2 == 1 {
			mm.Requests[i].Model = "qwen2.5-7b"
		}
	}
	b, models, err := BoundScale(Config{GPUs: []GPUSpec{{GPU: "h100", Count: 4}, {GPU: "l40s", Count: 1, Model: "qwen2.5-7b"}}, Model: "llama-3.1-8b"}, mm, window)
	if err != nil {
		t.Fatal(err)
	}
	if len(models) != 2 || b != roundScale(min(models[0].Scale, models[1].Scale)) || models[1].Model != "qwen2.5-7b" || models[1].Scale >= models[0].Scale {
		t.Errorf("bound %g over %+v: want the scarcer model's, qwen on one L40S", b, models)
	}
	t.Logf("h100:1 bound %g×; multi-model %+v", h1, models)
}

// TestBoundPricesWholePromptAttention: however thinly the bound slices a
// long prompt beside the decodes, it cannot complete those prompts faster
// than a replica prefills them alone, whose attention runs over the whole
// prompt (the sliver alone priced a 12k-token prompt's attention at a
// sixth).
func TestBoundPricesWholePromptAttention(t *testing.T) {
	cfg := Config{GPUs: []GPUSpec{{GPU: "h100", Count: 1}}, Model: "llama-3.1-8b"}
	cfg.fill()
	rep, err := perf.NewReplica(cfg.Catalog, "h100", "llama-3.1-8b", cfg.Dtype, 1)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name                   string
		prompt, cached, output float64
	}{
		{"a 30k-token prompt, long answers", 30000, 0, 200},
		{"a 12k-token prompt over a 4k prefix", 12000, 4000, 200},
	} {
		u := tc.prompt - tc.cached
		alone := 1 / rep.PrefillSeconds(int(u), int(tc.cached))
		if got := rooflineRate(&rep, cfg, tc.prompt, u, tc.output); got > alone*1.001 {
			t.Errorf("%s: the bound completes %.3f/s, faster than prefilling alone (%.3f/s)", tc.name, got, alone)
		}
	}
}

// TestDiagnoseAddsUp: the class × GPU breakdown accounts for every issued
// request and every success.
func TestDiagnoseAddsUp(t *testing.T) {
	tr := capacityTrace(t, 200).Scale(4)
	cfg := Config{GPUs: []GPUSpec{{GPU: "h100", Count: 1}, {GPU: "l40s", Count: 1}}, Model: "llama-3.1-8b"}
	res, dg, err := Diagnose(cfg, tr, "switchyard")
	if err != nil {
		t.Fatal(err)
	}
	if len(dg.Workflows) != 0 {
		t.Errorf("workflow rows %+v on a trace without workflows", dg.Workflows)
	}
	var reqs, met, missed int
	pools := map[string]bool{}
	for _, d := range dg.Classes {
		reqs += d.Requests
		met += d.Met
		missed += d.MissTTFT + d.MissTPOT + d.Failed + d.Shed
		pools[d.Pool] = true
		if d.Met+d.MissTTFT+d.MissTPOT+d.Failed+d.Shed != d.Requests {
			t.Errorf("%+v does not add up", d)
		}
	}
	if reqs != res.Requests || met != res.Succeeded || met+missed != reqs {
		t.Errorf("diagnosis %d requests %d met, result %d/%d", reqs, met, res.Requests, res.Succeeded)
	}
	if !pools["h100"] || !pools["l40s"] {
		t.Errorf("pools %v: want both GPU types", pools)
	}
}

// TestDiagnoseWorkflows: on agentic traffic the workflow rows account for
// every workflow and every task the run counts as succeeded, and a late
// workflow's time splits into the parts it is made of: wait, TTFT, decode
// and tool gaps add up to its elapsed time (each step runs after the one
// before it), its decode is no faster than the same decode alone on its
// GPU, and it overran its deadline.
func TestDiagnoseWorkflows(t *testing.T) {
	tr := traces.Agentic(traces.AgenticConfig{Seed: 1, Duration: time.Minute, WorkflowsPerSec: 1.5})
	cfg := Config{GPUs: []GPUSpec{{GPU: "h100", Count: 1}}, Model: "llama-3.1-8b"}
	res, dg, err := Diagnose(cfg, tr, "switchyard")
	if err != nil {
		t.Fatal(err)
	}
	var wfs, ok, late int
	for _, w := range dg.Workflows {
		wfs += w.Workflows
		ok += w.Succeeded
		late += w.Late
		if w.Succeeded+w.Late+w.Broken != w.Workflows {
			t.Errorf("%+v does not add up", w)
		}
		if w.Late == 0 {
			continue
		}
		parts := w.LateWaitS + w.LateTTFTS + w.LateDecodeS + w.LateToolGapS
		if math.Abs(parts-w.LateElapsedS) > 0.01*w.LateElapsedS {
			t.Errorf("%s: wait+ttft+decode+gaps %.2f s against elapsed %.2f s", w.Class, parts, w.LateElapsedS)
		}
		if w.LateDecode1S <= 0 || w.LateDecode1S > w.LateDecodeS*1.001 || w.LateElapsedS <= w.LateDeadlineS || w.LateOverrunP50 <= 0 {
			t.Errorf("%s: implausible late breakdown %+v", w.Class, w)
		}
	}
	if wfs != res.Tasks || ok != res.TasksSucceeded {
		t.Errorf("diagnosis %d workflows %d succeeded, result %d/%d", wfs, ok, res.Tasks, res.TasksSucceeded)
	}
	if late == 0 {
		t.Errorf("no late workflow on one H100 at 1.5 workflows/s: the test no longer exercises the breakdown")
	}
}

// The diagnosis names the placement reasons behind an unplaceable from the
// router's fail message: routing.Summarize's counts, not the per-worker
// details routing.Explain appends (which read "llama-3.1-8b hot+to the
// deadline)" when taken for counts), nor a message without counts.
func TestRejectionNames(t *testing.T) {
	cases := []struct{ reason, want string }{
		{"2 deadline_unreachable, 1 excluded", "deadline_unreachable+excluded"},
		{`no GPU in the fleet can serve model "llama-3.1-8b": 2 deadline_unreachable (h100-00 deadline_unreachable: model llama-3.1-8b hot, 2.16s to the deadline; h100-01 deadline_unreachable: model llama-3.1-8b hot, 2.16s to the deadline)`, "deadline_unreachable"},
		{`no GPU in the fleet can serve model "m": 1 cannot_run, 3 model_too_large (l4-00 cannot_run: model m not advertised)`, "cannot_run+model_too_large"},
		{`no GPU in the fleet can serve model "m": 1 dtype_unsupported`, "dtype_unsupported"},
		{`no live worker serves model "m" and no scalable pool can warm one (2 workers, 1 pools known)`, ""},
		{"no live workers", ""},
	}
	for _, c := range cases {
		if got := rejectionNames(c.reason); got != c.want {
			t.Errorf("rejectionNames(%q) = %q, want %q", c.reason, got, c.want)
		}
	}
}

// findCapacity is one seed's search (seed 0) through FindCapacitySeeds,
// the path sim --capacity runs.
func findCapacity(ctx context.Context, cfg Config, tr *traces.Trace, window time.Duration, policies []string, s CapacitySearch) ([]PolicyCapacity, error) {
	return FindCapacitySeeds(ctx, []CapacityRun{{Config: cfg, Trace: tr, Window: window}}, policies, s)
}

// TestWorkflowWithoutDeadlineIsNeverLate: a workflow with no deadline
// succeeds when its steps do, in the result's task count and in the
// late-workflow diagnosis alike (traces.Workflow.InTime, one rule).
func TestWorkflowWithoutDeadlineIsNeverLate(t *testing.T) {
	tr := traces.Agentic(traces.AgenticConfig{Seed: 1, Duration: time.Minute, WorkflowsPerSec: 1.5})
	for i := range tr.Requests {
		tr.Requests[i].Workflow.Deadline = 0
	}
	cfg := Config{GPUs: []GPUSpec{{GPU: "h100", Count: 1}}, Model: "llama-3.1-8b"}
	res, dg, err := Diagnose(cfg, tr, "switchyard")
	if err != nil {
		t.Fatal(err)
	}
	var wfs, ok, broken int
	for _, w := range dg.Workflows {
		wfs, ok, broken = wfs+w.Workflows, ok+w.Succeeded, broken+w.Broken
		if w.Late != 0 {
			t.Errorf("%s: %d late workflows without a deadline", w.Class, w.Late)
		}
	}
	if wfs != res.Tasks || ok != res.TasksSucceeded || ok+broken != wfs {
		t.Errorf("diagnosis %d workflows, %d succeeded, %d broken; result %d/%d", wfs, ok, broken, res.Tasks, res.TasksSucceeded)
	}
	if res.TasksSucceeded == 0 {
		t.Errorf("no workflow succeeded: %+v", res)
	}
}
