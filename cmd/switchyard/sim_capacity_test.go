package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestSimScenarioCapacityJSON: `switchyard sim --scenario FILE --capacity
// --json` ends stdout with one line {"capacity":[{"name", "scale_at_slo90",
// "scale_at_high99", "min_replicas", "range", ...}], "bound_scale", ...}, a
// policy each, the headline fields the medians over --seeds with their
// range, and each share of the roofline bound.
func TestSimScenarioCapacityJSON(t *testing.T) {
	trace, err := filepath.Abs(filepath.Join("..", "..", "testdata", "traces", "azure_llm_2023_code_first1000.csv"))
	if err != nil {
		t.Fatal(err)
	}
	sc := filepath.Join(t.TempDir(), "small.json")
	body := `{"name":"small","fleet":[{"gpu":"h100","count":1}],
	"tenants":[{"name":"a","class":"critical","share":0.3},{"name":"b","class":"standard","share":0.7}],
	"trace":{"path":"` + trace + `","format":"azure","limit":120}}`
	if err := os.WriteFile(sc, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	err = runSim(context.Background(), []string{"--scenario", sc, "--capacity", "--json", "--policies", "dynamo,switchyard",
		"--capacity-max-scale", "8", "--capacity-tolerance", "0.25", "--capacity-max-fleet", "2", "--parallel", "2", "--seeds", "2"}, &out)
	if err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	last := lines[len(lines)-1]
	if !strings.HasPrefix(last, `{"capacity":[`) {
		t.Fatalf("last line %q", last)
	}
	var got struct {
		Capacity   []map[string]any `json:"capacity"`
		BoundScale float64          `json:"bound_scale"`
		Seeds      []int64          `json:"seeds"`
	}
	if err := json.Unmarshal([]byte(last), &got); err != nil {
		t.Fatal(err)
	}
	if got.BoundScale <= 0 || len(got.Seeds) != 2 || got.Seeds[0] != 1 || got.Seeds[1] != 2 {
		t.Errorf("bound_scale %g, seeds %v: want a bound and seeds [1 2] (the scenario's seed, then the next)", got.BoundScale, got.Seeds)
	}
	if len(got.Capacity) != 2 {
		t.Fatalf("%d policies", len(got.Capacity))
	}
	for i, want := range []string{"dynamo", "switchyard"} {
		c := got.Capacity[i]
		if c["name"] != want {
			t.Errorf("policy %d is %v, want %s", i, c["name"], want)
		}
		rng, _ := c["range"].(map[string]any)
		for _, k := range []string{"scale_at_slo90", "scale_at_high99", "min_replicas"} {
			v, ok := c[k].(float64)
			if !ok {
				t.Errorf("%s: field %s missing or not a number: %v", want, k, c[k])
				continue
			}
			// The median lies in its range (min_replicas' "none", 0, sorts
			// last).
			r, _ := rng[k].([]any)
			if len(r) != 2 {
				t.Errorf("%s: range.%s = %v, want [low, high]", want, k, rng[k])
				continue
			}
			lo, _ := r[0].(float64)
			hi, _ := r[1].(float64)
			if k == "min_replicas" && hi == 0 {
				hi = 1e9
			}
			if k == "min_replicas" && v == 0 {
				v = 1e9
			}
			if v < lo || v > hi {
				t.Errorf("%s: %s %g outside its range %v", want, k, v, r)
			}
		}
		if seeds, _ := c["seeds"].([]any); len(seeds) != 2 {
			t.Errorf("%s: %d seeds' searches, want 2", want, len(seeds))
		}
		if _, ok := c["slo90_of_bound"].(float64); !ok {
			t.Errorf("%s: no slo90_of_bound", want)
		}
	}
	if !strings.Contains(out.String(), "scenario "+sc) {
		t.Errorf("output does not name the scenario:\n%s", out.String())
	}
}

func TestSimScenarioRefusesFleetFlags(t *testing.T) {
	var out bytes.Buffer
	err := runSim(context.Background(), []string{"--scenario", "x.yaml", "--gpus", "h100:2"}, &out)
	if err == nil || !strings.Contains(err.Error(), "--gpus") {
		t.Fatalf("got %v, want an error naming --gpus", err)
	}
	err = runSim(context.Background(), []string{"--scenario", filepath.Join(t.TempDir(), "missing.yaml")}, &out)
	if err == nil || !strings.Contains(err.Error(), "missing.yaml") {
		t.Fatalf("got %v, want an error naming the file", err)
	}
}

// TestSimScenarioSeedFlag: an explicit --seed draws a scenario's load anew
// (it was silently ignored with --scenario, the scenario's own seed
// winning), and --seed equal to the scenario's gives its run unchanged.
func TestSimScenarioSeedFlag(t *testing.T) {
	sc := filepath.Join("..", "..", "loadgen", "scenarios", "mixed-fleet-conversation.yaml")
	traceLine := func(args ...string) string {
		t.Helper()
		var out bytes.Buffer
		if err := runSim(context.Background(), append([]string{"--scenario", sc, "--policies", "round-robin"}, args...), &out); err != nil {
			t.Fatalf("%v\n%s", err, out.String())
		}
		return strings.SplitN(out.String(), "\n", 2)[0]
	}
	own, one, two := traceLine(), traceLine("--seed", "1"), traceLine("--seed", "2")
	if own != one {
		t.Fatalf("--seed 1 (the scenario's) changed the load:\n%s\n%s", own, one)
	}
	if own == two {
		t.Fatalf("--seed 2 left the scenario's load as it was: %s", two)
	}
}
