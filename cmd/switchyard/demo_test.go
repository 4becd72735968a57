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
// lost or duplicated, and the counts add up.
func TestDemoJSON(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the whole system for several seconds")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var out bytes.Buffer
	if err := runDemo(ctx, []string{"--duration", "5s", "--json", "--workers", "4"}, &out); err != nil {
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
}
