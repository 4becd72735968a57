package main

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/switchyard-ai/switchyard/internal/core/replay"
	"github.com/switchyard-ai/switchyard/internal/testkit/reporttest"
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
	// What an incident review needs: outcomes per tenant and class, the
	// slowest placements with measured and predicted breakdowns.
	if len(r.Series) == 0 || len(r.Slowest) == 0 || r.Slowest[0].Predicted == nil || r.Slowest[0].TotalMs <= 0 {
		t.Fatalf("report lacks series or slowest placements with breakdowns: %d series, slowest %+v", len(r.Series), r.Slowest)
	}
	if r.WhatIf != nil {
		t.Fatalf("a replay with the recorded policy reports a what-if: %+v", r.WhatIf)
	}
	out.Reset()
	whatIfHTML := dir + "/what-if.html"
	if err := runReplay(ctx, []string{"--store", dir, "--json", "--policy", "round-robin", "--html", whatIfHTML}, &out); err != nil {
		t.Fatalf("what-if replay: %v", err)
	}
	w := last(&out)
	if w.Policy != "round-robin" || w.Decisions == 0 {
		t.Fatalf("what-if report: %+v", w)
	}
	// The what-if reports outcomes, not only worker ids: both sides'
	// predicted completion and deadline verdicts over the same requests.
	wi := w.WhatIf
	if wi == nil || wi.Compared == 0 || wi.Recorded.Policy != "switchyard" || wi.Replayed.Placed+wi.Replayed.Failed != wi.Compared ||
		wi.Recorded.MeanCompletionS <= 0 || wi.Replayed.MeanCompletionS <= 0 || wi.Basis == "" {
		t.Fatalf("what-if outcomes: %+v", wi)
	}
	if !strings.Contains(out.String(), "what-if round-robin vs recorded switchyard") {
		t.Fatalf("text output does not summarise the what-if:\n%s", out.String())
	}
	for _, line := range strings.Split(out.String(), "\n") {
		if strings.Contains(line, "what-if") || strings.Contains(line, "calibration") {
			t.Log(strings.TrimSpace(line))
		}
	}
	chromium := reporttest.Chromium(t)
	for _, page := range []string{dir + "/report.html", whatIfHTML} {
		f := reporttest.Check(t, chromium, page, 1000)
		if len(f.ScriptErrors) > 0 || len(f.Layout) > 0 {
			t.Errorf("%s in Chromium: script errors %v, layout %v", page, f.ScriptErrors, f.Layout)
		}
	}
}
