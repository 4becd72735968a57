package main

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/switchyard-ai/switchyard/internal/replay"
)

// TestReplayReproducesDemo records a short demo in a store directory and
// replays it: with the recorded policy every decision must come out the
// same; with a baseline the same inputs give a what-if report.
func TestReplayReproducesDemo(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the whole system")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	dir := t.TempDir()
	var demoOut bytes.Buffer
	if err := runDemo(ctx, []string{"--duration", "3s", "--json", "--store", dir}, &demoOut); err != nil {
		t.Fatalf("demo: %v", err)
	}
	last := func(b *bytes.Buffer) replay.Report {
		t.Helper()
		lines := strings.Split(strings.TrimSpace(b.String()), "\n")
		var r replay.Report
		if err := json.Unmarshal([]byte(lines[len(lines)-1]), &r); err != nil {
			t.Fatalf("last line is not JSON: %v\n%s", err, b.String())
		}
		return r
	}
	var out bytes.Buffer
	if err := runReplay(ctx, []string{"--store", dir, "--json", "--html", dir + "/report.html"}, &out); err != nil {
		t.Fatalf("replay: %v", err)
	}
	r := last(&out)
	if r.Decisions == 0 || r.Requests == 0 {
		t.Fatalf("replay saw nothing: %+v", r)
	}
	if r.Unresolved != 0 {
		t.Fatalf("%d journaled admissions did not resolve to their ADMITTED message", r.Unresolved)
	}
	if r.Divergent != 0 {
		t.Fatalf("replay with the recorded policy diverged on %d of %d decisions: %+v", r.Divergent, r.Decisions, r.Divergences)
	}
	out.Reset()
	if err := runReplay(ctx, []string{"--store", dir, "--json", "--policy", "round-robin"}, &out); err != nil {
		t.Fatalf("what-if replay: %v", err)
	}
	w := last(&out)
	if w.Policy != "round-robin" || w.Decisions == 0 {
		t.Fatalf("what-if report: %+v", w)
	}
}
