package tally

import (
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/switchyard-ai/switchyard/schemas"
)

var t0 = time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)

func ok(id string, slo bool, cost float64) schemas.Result {
	return schemas.Result{ID: id, Status: schemas.StatusOK, SLOMet: slo, CostUSD: cost, Simulated: true}
}

func bad(id, status, code string) schemas.Result {
	return schemas.Result{ID: id, Status: status, Error: &schemas.Error{Code: code}}
}

func TestSummary(t *testing.T) {
	type sub struct{ id, class string }
	cases := []struct {
		name    string
		subs    []sub
		results []schemas.Result
		events  []schemas.Event
		want    Summary
	}{
		{
			name: "every outcome once",
			subs: []sub{{"a", "critical"}, {"b", "critical"}, {"c", "batch"}, {"d", "batch"}, {"e", "standard"}, {"f", "standard"}},
			results: []schemas.Result{
				ok("a", true, 0.002), ok("b", false, 0.002),
				bad("c", schemas.StatusShed, schemas.CodeShed),
				bad("d", schemas.StatusFailed, schemas.CodeWorkerFailed),
				bad("e", schemas.StatusRejected, schemas.CodeInvalidMaxTokens),
			},
			want: Summary{Submitted: 6, Completed: 2, Rejected: 1, Shed: 1, Failed: 1, Lost: 1, LostIDs: []string{"f"},
				SLOAttainment: 0.2, CostUSD: 0.004, CostPerSuccessUSD: 0.004, Simulated: true,
				SLOAttainmentByPriority: map[string]float64{"critical": 0.5, "batch": 0, "standard": 0},
				ErrorsByCode:            map[string]int{schemas.CodeShed: 1, schemas.CodeWorkerFailed: 1, schemas.CodeInvalidMaxTokens: 1}},
		},
		{
			name: "a second result is a duplicate, not a second outcome",
			subs: []sub{{"a", "interactive"}, {"b", "interactive"}},
			results: []schemas.Result{
				ok("a", true, 0.001), bad("a", schemas.StatusFailed, schemas.CodeWorkerFailed), ok("a", true, 0.001),
				{ID: "b", Status: schemas.StatusOK, SLOMet: true, FromCache: "exact", Attempt: 1},
				ok("stranger", true, 1),
			},
			want: Summary{Submitted: 2, Completed: 2, Duplicates: 1, SLOAttainment: 1, CostUSD: 0.001, CostPerSuccessUSD: 0.0005,
				Simulated: true, CacheHits: 1, Retried: 1, SLOAttainmentByPriority: map[string]float64{"interactive": 1}},
		},
		{
			name: "events: moved and cancelled workflows, deduped by request",
			subs: []sub{{"a", ""}},
			results: []schemas.Result{
				{ID: "a", Status: schemas.StatusOK, SLOMet: true, Priority: "batch"},
			},
			events: []schemas.Event{
				{Kind: EventMoved, RequestID: "a"}, {Kind: EventMoved, RequestID: "a"}, {Kind: EventMoved, RequestID: "x"},
				{Kind: EventWorkflowCancelled, Fields: map[string]any{"gpu_seconds_saved": 1.5}},
				{Kind: EventWorkflowCancelled, Fields: map[string]any{"gpu_seconds_saved": int64(2)}},
				{Kind: "breaker_open", RequestID: "a"},
			},
			want: Summary{Submitted: 1, Completed: 1, SLOAttainment: 1, Moved: 2, WorkflowsCancelled: 2, GPUSecondsSaved: 3.5,
				SLOAttainmentByPriority: map[string]float64{"batch": 1}},
		},
		{
			name: "nothing answered: all lost, no cost per success",
			subs: []sub{{"a", "batch"}, {"b", "batch"}},
			want: Summary{Submitted: 2, Lost: 2, LostIDs: []string{"a", "b"}, SLOAttainmentByPriority: map[string]float64{"batch": 0}},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ta := New()
			for _, s := range tc.subs {
				ta.Submitted(s.id, s.class, t0)
			}
			for _, r := range tc.results {
				ta.Observe(r)
			}
			for _, e := range tc.events {
				ta.Event(e)
			}
			got := ta.Summary()
			if !got.Check() {
				t.Fatalf("invariant broken: %+v", got)
			}
			if math.Abs(got.CostUSD-tc.want.CostUSD) > 1e-12 || math.Abs(got.CostPerSuccessUSD-tc.want.CostPerSuccessUSD) > 1e-12 {
				t.Fatalf("cost %v per success %v, want %v %v", got.CostUSD, got.CostPerSuccessUSD, tc.want.CostUSD, tc.want.CostPerSuccessUSD)
			}
			got.CostUSD, got.CostPerSuccessUSD = tc.want.CostUSD, tc.want.CostPerSuccessUSD
			gj, _ := json.Marshal(got)
			wj, _ := json.Marshal(tc.want)
			if string(gj) != string(wj) {
				t.Fatalf("summary\n got %s\nwant %s", gj, wj)
			}
		})
	}
}

func TestResultBeforeSubmission(t *testing.T) {
	ta := New()
	ta.Observe(ok("early", true, 0))
	if ta.Outstanding() != 0 || ta.Summary().Submitted != 0 {
		t.Fatal("a result alone must not count as a submission")
	}
	ta.Submitted("early", "critical", t0)
	ta.Submitted("early", "critical", t0) // recorded twice: counted once
	s := ta.Summary()
	if s.Submitted != 1 || s.Completed != 1 || s.Lost != 0 || ta.Outstanding() != 0 {
		t.Fatalf("%+v", s)
	}
}

func TestJSONNames(t *testing.T) {
	b, _ := json.Marshal(New().Summary())
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"submitted", "completed", "rejected", "shed", "failed", "lost", "duplicates", "slo_attainment",
		"cost_per_success_usd", "simulated", "slo_attainment_by_priority", "cache_hits", "moved", "workflows_cancelled", "gpu_seconds_saved"} {
		if _, ok := m[k]; !ok {
			keys := make([]string, 0, len(m))
			for k := range m {
				keys = append(keys, k)
			}
			sort.Strings(keys)
			t.Errorf("summary JSON lacks %q (has %v)", k, keys)
		}
	}
}

func TestConcurrentUse(t *testing.T) {
	ta := New()
	var wg sync.WaitGroup
	for g := 0; g < 4; g++ {
		wg.Add(2)
		go func(g int) {
			defer wg.Done()
			for i := 0; i < 500; i++ {
				ta.Submitted(fmt.Sprintf("%d-%d", g, i), "standard", t0)
			}
		}(g)
		go func(g int) {
			defer wg.Done()
			for i := 0; i < 500; i++ {
				ta.Observe(ok(fmt.Sprintf("%d-%d", g, i), true, 0))
				ta.Event(schemas.Event{Kind: EventMoved, RequestID: fmt.Sprintf("%d-%d", g, i)})
			}
		}(g)
	}
	wg.Wait()
	s := ta.Summary()
	if s.Submitted != 2000 || s.Completed != 2000 || s.Moved != 2000 || !s.Check() {
		t.Fatalf("%+v", s)
	}
}

// TestLostIDsAreBounded: a run that loses thousands names the first
// MaxLostIDs of them, sorted, and still counts them all.
func TestLostIDsAreBounded(t *testing.T) {
	ta := New()
	for i := range MaxLostIDs + 50 {
		ta.Submitted(fmt.Sprintf("r%04d", i), "batch", t0)
	}
	s := ta.Summary()
	if s.Lost != MaxLostIDs+50 || len(s.LostIDs) != MaxLostIDs || s.LostIDs[0] != "r0000" || !slices.IsSorted(s.LostIDs) {
		t.Fatalf("lost %d, %d ids from %q (sorted %v)", s.Lost, len(s.LostIDs), s.LostIDs[0], slices.IsSorted(s.LostIDs))
	}
}
