package main

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"
)

// The last line with --json is the contract: p50_us, p99_us, allocs_per_op
// and heap_mb, plus the best-of figures; a placement allocates nothing.
func TestBenchPlacementJSON(t *testing.T) {
	for _, cost := range []string{"linear", "roofline"} {
		t.Run(cost, func(t *testing.T) { benchPlacementJSON(t, cost) })
	}
	if err := runBenchPlacement(context.Background(), []string{"--cost", "magic"}, &bytes.Buffer{}); err == nil {
		t.Fatal("an unknown cost model was accepted")
	}
}

func benchPlacementJSON(t *testing.T, cost string) {
	var out bytes.Buffer
	err := runBenchPlacement(context.Background(), []string{"--workers", "50", "--blocks", "2000", "--ops", "3000", "--cost", cost, "--json"}, &out)
	if err != nil {
		t.Fatal(err)
	}
	// Every warm-up request must be placeable: with the roofline model
	// that proves the fleet's names were mapped to its catalog.
	if !strings.Contains(out.String(), "placed   1024 of 1024") {
		t.Errorf("not every request placed:\n%s", out.String())
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	var got map[string]float64
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &got); err != nil {
		t.Fatalf("last line %q: %v", lines[len(lines)-1], err)
	}
	for _, k := range []string{"p50_us", "p99_us", "allocs_per_op", "heap_mb", "best_p50_us", "best_p99_us", "load_avg_1m", "skipped_per_op"} {
		if _, ok := got[k]; !ok {
			t.Errorf("no %s in %v", k, got)
		}
	}
	if !(got["p50_us"] > 0 && got["p99_us"] >= got["p50_us"] && got["best_p99_us"] >= got["best_p50_us"]) {
		t.Errorf("percentiles out of order: %v", got)
	}
	// A stray runtime allocation (a timer, a profiler) may land in the
	// window, but a per-call allocation would be 1 or more.
	if got["allocs_per_op"] >= 0.01 || got["heap_mb"] <= 0 || got["skipped_per_op"] < 0 || got["skipped_per_op"] > 50 {
		t.Errorf("allocs %v, heap %v MB, skipped %v", got["allocs_per_op"], got["heap_mb"], got["skipped_per_op"])
	}
}
