package main

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/switchyard-ai/switchyard/internal/adapter/bus"
	"github.com/switchyard-ai/switchyard/internal/adapter/trail"
	"github.com/switchyard-ai/switchyard/internal/core/replay"
	"github.com/switchyard-ai/switchyard/internal/testkit/reporttest"
	"github.com/switchyard-ai/switchyard/schemas"
	"github.com/switchyard-ai/switchyard/subjects"
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
	t.Run("trail", func(t *testing.T) { checkTrailOfARecordedRequest(t, ctx, dir) })
	chromium := reporttest.Chromium(t)
	for _, page := range []string{dir + "/report.html", whatIfHTML} {
		f := reporttest.Check(t, chromium, page, 1000)
		if len(f.ScriptErrors) > 0 || len(f.Layout) > 0 {
			t.Errorf("%s in Chromium: script errors %v, layout %v", page, f.ScriptErrors, f.Layout)
		}
	}
}

// checkTrailOfARecordedRequest takes one served request of the recorded
// demo and asks `switchyard trail` where it went: the whole path must be
// there, each stage's input acknowledged by its reader.
func checkTrailOfARecordedRequest(t *testing.T, ctx context.Context, dir string) {
	none := ""
	js, closeStreams, err := recorded{natsURL: &none, store: &dir}.open(ctx, "trail-test")
	if err != nil {
		t.Fatal(err)
	}
	var id string
	st, err := js.Stream(ctx, subjects.StreamResults)
	if err != nil {
		t.Fatal(err)
	}
	for seq := uint64(1); id == "" && seq < 500; seq++ {
		m, err := st.GetMsg(ctx, seq)
		if err != nil {
			t.Fatalf("RESULTS #%d: %v", seq, err)
		}
		if r, err := bus.DecodeResult(m.Header, m.Data); err == nil && r.Status == schemas.StatusOK {
			id = r.ID
		}
	}
	closeStreams()
	if id == "" {
		t.Fatal("no ok result among the first RESULTS messages")
	}
	var out bytes.Buffer
	if err := runTrail(ctx, []string{"--store", dir, "--json", id}, &out); err != nil {
		t.Fatal(err)
	}
	var got map[string][]trail.Step
	if err := json.Unmarshal(out.Bytes(), &got); err != nil {
		t.Fatalf("trail --json: %v\n%s", err, out.String())
	}
	seen := map[string]string{}
	for _, s := range got[id] {
		if _, ok := seen[s.Stream]; !ok {
			seen[s.Stream] = s.What + " " + s.Acked
		}
	}
	for stream, want := range map[string]string{
		subjects.StreamSubmit: "submitted yes", subjects.StreamAdmitted: "admitted yes",
		subjects.StreamDispatch: "dispatched to ", subjects.StreamResults: "result ok", subjects.StreamEvents: "event ",
	} {
		if !strings.HasPrefix(seen[stream], want) {
			t.Errorf("%s step of %s = %q, want it to start %q; whole trail: %+v", stream, id, seen[stream], want, got[id])
		}
	}
	if !strings.HasSuffix(seen[subjects.StreamDispatch], " yes") {
		t.Errorf("the served request's dispatch is not acked by its worker: %q", seen[subjects.StreamDispatch])
	}
	out.Reset()
	if err := runTrail(ctx, []string{"--store", dir, id, "no-such-request"}, &out); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "no-such-request: no stored message names it") || !strings.Contains(out.String(), "[acked: yes]") {
		t.Errorf("trail text:\n%s", out.String())
	}
	if err := runTrail(ctx, []string{"--store", dir}, &out); err == nil || !strings.Contains(err.Error(), "at least one request id") {
		t.Errorf("trail without ids: %v", err)
	}
}
