package replay

import (
	"encoding/json"
	"math"
	"testing"
	"time"

	"github.com/switchyard-ai/switchyard/internal/core/placement"
	"github.com/switchyard-ai/switchyard/schemas"
)

func TestEnrich(t *testing.T) {
	t0 := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	slack := func(s float64) *float64 { return &s }
	placed := func(id, tenant, class, worker string, completion, sl float64) Decision {
		return Decision{ID: id, Tenant: tenant, Class: class, Kind: "placed", Worker: worker, At: t0,
			Predicted: &Predicted{CompletionS: completion, SlackS: slack(sl), GPUUSD: completion / 1000}}
	}
	baseline := []Decision{
		placed("a", "acme", "interactive", "w1", 0.5, 1),
		placed("b", "acme", "interactive", "w1", 0.5, 1),
		placed("c", "globex", "batch", "w2", 2, 10),
		placed("d", "globex", "batch", "w2", 2, 10),
	}
	whatIf := []Decision{
		placed("a", "acme", "interactive", "w1", 0.5, 1),  // same
		placed("b", "acme", "interactive", "w3", 3, -1.5), // moved, now late
		placed("c", "globex", "batch", "w1", 1, 11),       // moved, faster
		{ID: "d", Tenant: "globex", Class: "batch", Kind: "placed", Worker: "w4", At: t0, Infeasible: "1 model_too_large"},
	}
	results := []schemas.Result{
		{ID: "a", Tenant: "acme", Priority: "interactive", Status: schemas.StatusOK, SLOMet: true, WorkerID: "w1",
			Timing: schemas.Timing{QueueMs: 10, TTFTMs: 60, TotalMs: 560}, FinishedAt: t0.Add(time.Second)},
		{ID: "b", Tenant: "acme", Priority: "interactive", Status: schemas.StatusOK, SLOMet: false, WorkerID: "w1",
			Timing: schemas.Timing{QueueMs: 400, TTFTMs: 900, TotalMs: 2400}, FinishedAt: t0.Add(3 * time.Second)},
		{ID: "c", Tenant: "globex", Priority: "batch", Status: schemas.StatusOK, SLOMet: true, WorkerID: "w2",
			Timing: schemas.Timing{QueueMs: 5, TTFTMs: 100, TotalMs: 2005}, FinishedAt: t0.Add(65 * time.Second)},
		{ID: "e", Tenant: "globex", Priority: "batch", Status: schemas.StatusShed, FinishedAt: t0.Add(70 * time.Second)},
	}
	rep := Report{Policy: "round-robin", RecordedPolicy: "switchyard"}
	Enrich(&rep, Window{}, baseline, whatIf, results)

	if rep.Bucket != 2*time.Second || len(rep.Series) != 2 {
		t.Fatalf("bucket %v, %d series; want 2 s buckets (70 s span) and 2 series", rep.Bucket, len(rep.Series))
	}
	acme := rep.Series[0]
	if acme.Tenant != "acme" || acme.Requests != 2 || acme.SLOAttainment != 0.5 || acme.Points[0].SLOMet != 1 || acme.Points[1].Requests != 1 {
		t.Fatalf("acme series %+v", acme)
	}
	if g := rep.Series[1]; g.Points[len(g.Points)-1].Shed != 1 {
		t.Fatalf("globex's shed result not in its last bucket: %+v", g.Points[len(g.Points)-1])
	}
	if len(rep.Slowest) != 3 || rep.Slowest[0].ID != "b" || rep.Slowest[0].QueueMs != 400 || rep.Slowest[0].PrefillMs != 500 ||
		rep.Slowest[0].DecodeMs != 1500 || rep.Slowest[0].Predicted == nil {
		t.Fatalf("slowest %+v", rep.Slowest)
	}
	if c := rep.Calibration; c == nil || c.Compared != 3 || math.Abs(c.MeanMeasuredS-(0.55+2+2)/3) > 1e-9 {
		t.Fatalf("calibration %+v", rep.Calibration)
	}
	wi := rep.WhatIf
	if wi == nil || wi.Compared != 4 || wi.Moved != 3 || wi.MetToMissed != 1 || wi.MissedToMet != 0 ||
		wi.Recorded.PredictedSLOMet != 4 || wi.Replayed.PredictedSLOMet != 2 || wi.Replayed.Infeasible != 1 {
		t.Fatalf("what-if %+v", wi)
	}
	// Outcome changes first, then by size of the predicted time change.
	if wi.Changes[0].SLOChange == "" || wi.Changes[len(wi.Changes)-1].ID != "c" || wi.Changes[len(wi.Changes)-1].DeltaCompletionS != -1 {
		t.Fatalf("changes %+v", wi.Changes)
	}
	if _, err := json.Marshal(rep); err != nil {
		t.Fatalf("report does not marshal: %v", err)
	}
	// No what-if when the policy is the recorded one.
	same := Report{Policy: "switchyard", RecordedPolicy: "switchyard"}
	Enrich(&same, Window{}, baseline, baseline, results)
	if same.WhatIf != nil {
		t.Fatalf("what-if without another policy: %+v", same.WhatIf)
	}
}

// A placement without a deadline has infinite slack, which JSON cannot
// carry: it is left out and counts as meeting the deadline.
func TestPredictedWithoutDeadline(t *testing.T) {
	p := predictedOf(placement.Terms{CompletionSeconds: 1, SlackSeconds: math.Inf(1), TotalUSD: math.NaN()})
	if p.SlackS != nil || !p.MeetsDeadline() || p.TotalUSD != 0 {
		t.Fatalf("predicted %+v", p)
	}
	if _, err := json.Marshal(p); err != nil {
		t.Fatal(err)
	}
}
