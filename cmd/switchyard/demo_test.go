package main

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/switchyard-ai/switchyard/loadgen/tally"
)

// TestDemoJSON runs a short demo end to end on embedded NATS and checks the
// summary's contract: the last stdout line is one JSON object, nothing is
// lost or duplicated, the counts add up, the admission counters are all
// above zero and the critical class keeps its SLO.
func TestDemoJSON(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the whole system for several seconds")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var out bytes.Buffer
	if err := runDemo(ctx, []string{"--duration", "8s", "--json", "--workers", "4"}, &out); err != nil {
		t.Fatalf("demo: %v", err)
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	var s tally.Summary
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &s); err != nil {
		t.Fatalf("last line is not the JSON summary: %v\n%s", err, out.String())
	}
	if s.Lost != 0 || s.Duplicates != 0 || s.Completed == 0 || !s.Simulated {
		t.Fatalf("summary %+v: want lost 0, duplicates 0, completed > 0, simulated", s)
	}
	if s.Submitted != s.Completed+s.Rejected+s.Shed+s.Failed+s.Lost {
		t.Fatalf("invariant broken: %+v", s)
	}
	// Issue 5: every admission quadrant shows up in a default-shaped run,
	// and the highest class keeps its SLO while the burst is shed.
	if s.CacheHits == 0 || s.Moved == 0 || s.WorkflowsCancelled == 0 || s.GPUSecondsSaved <= 0 {
		t.Fatalf("cache_hits %d, moved %d, workflows_cancelled %d, gpu_seconds_saved %g: want all > 0",
			s.CacheHits, s.Moved, s.WorkflowsCancelled, s.GPUSecondsSaved)
	}
	crit, ok := s.SLOAttainmentByPriority["critical"]
	if !ok || crit < 0.99 {
		t.Fatalf("critical SLO attainment %v (present %v), want >= 0.99; by class %v", crit, ok, s.SLOAttainmentByPriority)
	}
	for _, c := range []string{"interactive", "standard", "batch"} {
		if _, ok := s.SLOAttainmentByPriority[c]; !ok {
			t.Fatalf("slo_attainment_by_priority lacks %s: %v", c, s.SLOAttainmentByPriority)
		}
	}
}
