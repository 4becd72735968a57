package main

import (
	"bytes"
	"context"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/switchyard-ai/switchyard/schemas"
)

// TestTierWatch: the timeline reads sleeps and wakes from the workers'
// heartbeats — a wake's time from the first beat that leaves sleep to the
// first that serves — and counts the GPU-time spent asleep (two GPUs for
// a TP-2 worker) inside the run's GPU-hours.
func TestTierWatch(t *testing.T) {
	tw := &tierWatch{start: time.Now(), workers: map[string]*tierWorker{}}
	beat := func(s float64, id string, tp int, state, tier string) {
		tw.heartbeat(time.Duration(s*float64(time.Second)), id, tp, schemas.ModelState{State: state, Tier: tier})
	}
	beat(0, "a", 2, schemas.WeightHot, schemas.TierHBM)
	beat(1, "a", 2, schemas.WeightHot, schemas.TierHBM)
	tw.command(10*time.Second, schemas.Event{Kind: "weights", WorkerID: "a", Reason: "sleep instead of release", Fields: map[string]any{"state": schemas.WeightSleeping}})
	beat(10, "a", 2, schemas.WeightSleeping, schemas.TierHost)
	beat(70, "a", 2, schemas.WeightLoading, schemas.TierHBM)
	beat(71.5, "a", 2, schemas.WeightHot, schemas.TierHBM)
	beat(0, "b", 1, schemas.WeightLoading, schemas.TierHBM) // a cold start: no wake
	beat(30, "b", 1, schemas.WeightHot, schemas.TierHBM)
	// Put to sleep and woken by a request within the beat: no sleeping
	// heartbeat, the carried-out command starts the sleep.
	beat(31, "b", 1, schemas.WeightHot, schemas.TierHBM)
	tw.command(40*time.Second, schemas.Event{Kind: "weights", WorkerID: "b", Reason: "sleep", Fields: map[string]any{"state": schemas.WeightSleeping}})
	beat(40.5, "b", 1, schemas.WeightLoading, schemas.TierHBM)
	beat(41.5, "b", 1, schemas.WeightHot, schemas.TierHBM)
	s := tw.stop()
	if s.Sleeps != 2 || s.Wakes != 2 || s.WakeSecondsMax != 1.5 {
		t.Fatalf("sleeps %d wakes %d longest wake %v, want 2, 2, 1.5", s.Sleeps, s.Wakes, s.WakeSecondsMax)
	}
	if want := (60.0*2 + 0.5) / 3600; math.Abs(s.AsleepGPUHours-want) > 1e-12 {
		t.Fatalf("asleep %v GPU-h, want %v (60 s on 2 GPUs, 0.5 s on 1)", s.AsleepGPUHours, want)
	}
	var out bytes.Buffer
	printTiers(&out, s)
	for _, want := range []string{"command sleeping  sleep instead of release", "hot → sleeping  tier host", "loading → hot  tier hbm  (woken in 1.5s by its heartbeats)"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("timeline lacks %q:\n%s", want, out.String())
		}
	}
	if strings.Count(out.String(), "woken") != 2 {
		t.Errorf("a cold start reported as a wake:\n%s", out.String())
	}
}

// TestDemoSleepFlags: the sleeping tier's flags need --autoscale, and an
// unknown start tier is refused, before any service starts.
func TestDemoSleepFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--sleep-on-release"}, "--sleep-on-release needs --autoscale"},
		{[]string{"--start-tier", "host"}, "--start-tier needs --autoscale"},
		{[]string{"--autoscale", "--start-tier", "floppy"}, `--start-tier "floppy"`},
	} {
		var out bytes.Buffer
		err := runDemo(context.Background(), append(tc.args, "--duration", "1s"), &out)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: got %v, want an error with %q", tc.args, err, tc.want)
		}
	}
}
