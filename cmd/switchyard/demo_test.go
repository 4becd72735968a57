package main

import (
	"bytes"
	"context"
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/switchyard-ai/switchyard/loadgen/tally"
	"github.com/switchyard-ai/switchyard/schemas"
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

// TestFleetTally checks the demo's fleet accounting from samples of the
// running workers: joins and leaves, the extremes and the time-weighted
// mean.
func TestFleetTally(t *testing.T) {
	s := func(sec float64) time.Duration { return time.Duration(sec * float64(time.Second)) }
	for _, tc := range []struct {
		name    string
		samples []struct {
			at  float64
			ids []string
		}
		want fleetStats
	}{
		{
			name: "fixed fleet",
			samples: []struct {
				at  float64
				ids []string
			}{{0, []string{"a", "b"}}, {5, []string{"b", "a"}}, {10, []string{"a", "b"}}},
			want: fleetStats{ReplicasMin: 2, ReplicasMax: 2, ReplicasMean: 2, Timeline: []fleetPoint{{0, 2}}},
		},
		{
			// 1 worker for 10 s, 3 for 10 s, 2 for 20 s: mean 2.
			name: "scale up then drain one",
			samples: []struct {
				at  float64
				ids []string
			}{{0, []string{"a"}}, {10, []string{"a", "b", "c"}}, {20, []string{"a", "c"}}, {40, []string{"a", "c"}}},
			want: fleetStats{Started: 2, Stopped: 1, ReplicasMin: 1, ReplicasMax: 3, ReplicasMean: 2,
				Timeline: []fleetPoint{{0, 1}, {10, 3}, {20, 2}}},
		},
		{
			// A replacement at the same count is a start and a stop, not a
			// change of the count.
			name: "replacement",
			samples: []struct {
				at  float64
				ids []string
			}{{0, []string{"a"}}, {4, []string{"b"}}},
			want: fleetStats{Started: 1, Stopped: 1, ReplicasMin: 1, ReplicasMax: 1, ReplicasMean: 1, Timeline: []fleetPoint{{0, 1}}},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var f fleetTally
			for _, smp := range tc.samples {
				f.observe(s(smp.at), smp.ids)
			}
			if got := f.result(); !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("got %+v, want %+v", got, tc.want)
			}
		})
	}
}

// TestWithoutCache checks the rise-fall scenario's profiles: every tenant
// and the default lose their cache and keep everything else.
func TestWithoutCache(t *testing.T) {
	out, err := withoutCache(demoTenants)
	if err != nil {
		t.Fatal(err)
	}
	var before, after struct {
		Default map[string]any            `json:"default"`
		Tenants map[string]map[string]any `json:"tenants"`
	}
	if err := json.Unmarshal(demoTenants, &before); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(out, &after); err != nil {
		t.Fatal(err)
	}
	if len(after.Tenants) != len(before.Tenants) || len(after.Tenants) == 0 {
		t.Fatalf("tenants %d, want %d", len(after.Tenants), len(before.Tenants))
	}
	profiles := map[string]map[string]any{"default": after.Default}
	for name, p := range after.Tenants {
		profiles[name] = p
	}
	for name, p := range profiles {
		if c, _ := p["cache"].(map[string]any); c["mode"] != "off" {
			t.Errorf("%s: cache %v, want mode off", name, p["cache"])
		}
		orig := before.Default
		if name != "default" {
			orig = before.Tenants[name]
		}
		if p["priority"] != orig["priority"] || !reflect.DeepEqual(p["quota"], orig["quota"]) {
			t.Errorf("%s: profile changed beyond the cache: %v, was %v", name, p, orig)
		}
	}
}

// TestDemoPolicyFlag: --policy names the router's policy; a name no
// policy has is refused before any service starts, naming the flag.
func TestDemoPolicyFlag(t *testing.T) {
	for _, tc := range []struct {
		policy  string
		wantErr bool
	}{
		{"no-such-policy", true},
		{"switchyard-no-nonsense", true},
	} {
		var out bytes.Buffer
		err := runDemo(context.Background(), []string{"--policy", tc.policy, "--duration", "1s"}, &out)
		if (err != nil) != tc.wantErr || (err != nil && !strings.Contains(err.Error(), "--policy")) {
			t.Errorf("--policy %s: got %v, want error %v naming --policy", tc.policy, err, tc.wantErr)
		}
	}
}

// TestPrintSummaryErrorsByCode: the summary names each error code, and
// explains workflow_doomed, which the default load provokes on purpose and
// a new user would otherwise read as the scheduler's misses.
func TestPrintSummaryErrorsByCode(t *testing.T) {
	for _, tc := range []struct {
		name     string
		codes    map[string]int
		want     []string
		wantNote bool
	}{
		{"none", nil, nil, false},
		{"doomed", map[string]int{schemas.CodeWorkflowDoomed: 8}, []string{"errors by code  workflow_doomed 8"}, true},
		{"others sorted", map[string]int{schemas.CodeDeadlineExceeded: 2, schemas.CodeCancelled: 1},
			[]string{"errors by code  cancelled 1  deadline_exceeded 2"}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var b strings.Builder
			printSummary(&b, tally.Summary{ErrorsByCode: tc.codes}, time.Second)
			out := b.String()
			for _, w := range tc.want {
				if !strings.Contains(out, w) {
					t.Errorf("summary lacks %q:\n%s", w, out)
				}
			}
			if len(tc.codes) == 0 && strings.Contains(out, "errors by code") {
				t.Errorf("summary lists error codes with none:\n%s", out)
			}
			if got := strings.Contains(out, "dooms a quarter of its workflows on purpose"); got != tc.wantNote {
				t.Errorf("doomed note shown = %v, want %v:\n%s", got, tc.wantNote, out)
			}
		})
	}
}
