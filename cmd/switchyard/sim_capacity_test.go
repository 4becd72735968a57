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
// "scale_at_high99", "min_replicas", ...}]}, a policy each.
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
		"--capacity-max-scale", "8", "--capacity-tolerance", "0.25", "--capacity-max-fleet", "2", "--parallel", "1"}, &out)
	if err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	last := lines[len(lines)-1]
	if !strings.HasPrefix(last, `{"capacity":[`) {
		t.Fatalf("last line %q", last)
	}
	var got struct {
		Capacity []map[string]any `json:"capacity"`
	}
	if err := json.Unmarshal([]byte(last), &got); err != nil {
		t.Fatal(err)
	}
	if len(got.Capacity) != 2 {
		t.Fatalf("%d policies", len(got.Capacity))
	}
	for i, want := range []string{"dynamo", "switchyard"} {
		c := got.Capacity[i]
		if c["name"] != want {
			t.Errorf("policy %d is %v, want %s", i, c["name"], want)
		}
		for _, k := range []string{"scale_at_slo90", "scale_at_high99", "min_replicas"} {
			if _, ok := c[k].(float64); !ok {
				t.Errorf("%s: field %s missing or not a number: %v", want, k, c[k])
			}
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
