package sim

import (
	"context"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/switchyard-ai/switchyard/loadgen/traces"
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

// TestFindCapacityBrackets: each answer is a probe that met its bar, the
// reported failure a probe that did not, within the tolerance of each
// other, with no failure at or below the answer on the way; the smallest
// fleet met both bars at 1× and one replica fewer did not.
func TestFindCapacityBrackets(t *testing.T) {
	tr := capacityTrace(t, 250)
	cfg := Config{GPUs: []GPUSpec{{GPU: "h100", Count: 1}, {GPU: "a100-80g", Count: 1}}, Model: "llama-3.1-8b"}
	s := CapacitySearch{Tolerance: 0.1, MaxScale: 32, MaxFleetFactor: 2, Parallel: 2}
	caps, err := FindCapacity(context.Background(), cfg, tr, 0, []string{"least-loaded", "switchyard"}, s)
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
	again, err := FindCapacity(context.Background(), cfg, tr, 0, []string{"least-loaded"}, s)
	if err != nil {
		t.Fatal(err)
	}
	if again[0].ScaleAtSLO90 != caps[0].ScaleAtSLO90 || again[0].ScaleAtHigh99 != caps[0].ScaleAtHigh99 || again[0].MinReplicas != caps[0].MinReplicas {
		t.Errorf("second search %+v, first %+v", again[0], caps[0])
	}
}

func TestFindCapacityRefusesBadInput(t *testing.T) {
	tr := capacityTrace(t, 20)
	cfg := Config{GPUs: []GPUSpec{{GPU: "h100", Count: 1}}, Model: "llama-3.1-8b"}
	if _, err := FindCapacity(context.Background(), cfg, tr, 0, []string{"no-such-policy"}, CapacitySearch{}); err == nil {
		t.Error("an unknown policy was accepted")
	}
	if _, err := FindCapacity(context.Background(), cfg, &traces.Trace{}, 0, []string{"dynamo"}, CapacitySearch{}); err == nil {
		t.Error("an empty trace was accepted")
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := FindCapacity(ctx, cfg, tr, 0, []string{"dynamo"}, CapacitySearch{}); err == nil {
		t.Error("a cancelled search returned no error")
	}
}

// TestFindCapacityWindow: with a window, a probe at x× runs the first
// window of the trace scaled by x, and the search stops where the window
// would outrun the trace.
func TestFindCapacityWindow(t *testing.T) {
	tr := capacityTrace(t, 300)
	last := tr.Requests[len(tr.Requests)-1].Arrival
	window := last / 5
	cfg := Config{GPUs: []GPUSpec{{GPU: "h100", Count: 4}}, Model: "llama-3.1-8b"}
	caps, err := FindCapacity(context.Background(), cfg, tr, window, []string{"dynamo"}, CapacitySearch{MaxScale: 64, Tolerance: 0.2, NoFleet: true})
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
	if _, err := FindCapacity(context.Background(), cfg, tr, 2*last, []string{"dynamo"}, CapacitySearch{}); err == nil {
		t.Error("a window longer than the trace was accepted")
	}
}

// TestDiagnoseAddsUp: the class × GPU breakdown accounts for every issued
// request and every success.
func TestDiagnoseAddsUp(t *testing.T) {
	tr := capacityTrace(t, 200).Scale(4)
	cfg := Config{GPUs: []GPUSpec{{GPU: "h100", Count: 1}, {GPU: "l40s", Count: 1}}, Model: "llama-3.1-8b"}
	res, ds, err := Diagnose(cfg, tr, "switchyard")
	if err != nil {
		t.Fatal(err)
	}
	var reqs, met, missed int
	pools := map[string]bool{}
	for _, d := range ds {
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
