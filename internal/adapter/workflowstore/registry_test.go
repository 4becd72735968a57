package workflowstore

import (
	"context"
	"testing"
	"time"

	"github.com/switchyard-ai/switchyard/internal/core/workflow"
	"github.com/switchyard-ai/switchyard/internal/testkit/bustest"
	"github.com/switchyard-ai/switchyard/schemas"
)

var t0 = time.Date(2025, 1, 1, 12, 0, 0, 0, time.UTC)

func sec(n float64) time.Duration { return time.Duration(n * float64(time.Second)) }

func openRegistry(t *testing.T) *Registry {
	t.Helper()
	js := bustest.Start(t).JS
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	r, err := Open(ctx, js, Config{TTL: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// A step that fails beyond its retries dooms the workflow: its running
// step is returned for cancelling, the next step is refused, and the saved
// GPU-seconds are counted, all through a real JetStream KV bucket.
func TestRegistryDoomOnFailure(t *testing.T) {
	r := openRegistry(t)
	ctx := context.Background()
	wf := schemas.Workflow{ID: "wf1", Of: 4, DeadlineMs: 60000}
	step := func(n int) schemas.Workflow { w := wf; w.Step = n; return w }

	if _, err := r.StepStart(ctx, "acme", step(1), "r1", t0, sec(2), 2, 0); err != nil {
		t.Fatal(err)
	}
	if _, err := r.StepStart(ctx, "acme", step(2), "r2", t0.Add(sec(1)), sec(10), 10, 0); err != nil {
		t.Fatal(err)
	}
	s, err := r.Get(ctx, "acme", "wf1")
	if err != nil || s == nil {
		t.Fatalf("get: %v %v", s, err)
	}
	if !s.Deadline.Equal(t0.Add(60 * time.Second)) {
		t.Fatalf("deadline %v", s.Deadline)
	}
	fail := schemas.Result{ID: "r1", Tenant: "acme", Status: schemas.StatusFailed,
		Error: &schemas.Error{Code: schemas.CodeWorkerFailed, Message: "gpu fell over"}}
	out, err := r.RecordResult(ctx, fail, t0.Add(sec(6)))
	if err != nil {
		t.Fatal(err)
	}
	if !out.NewlyDoomed || len(out.Cancel) != 1 || out.Cancel[0].RequestID != "r2" {
		t.Fatalf("outcome %+v", out)
	}
	// r2 ran 5 of its predicted 10 s: half of its 10 GPU-s is saved.
	if out.GPUSecondsSaved < 4.99 || out.GPUSecondsSaved > 5.01 {
		t.Fatalf("saved %v", out.GPUSecondsSaved)
	}
	s, _ = r.Get(ctx, "acme", "wf1")
	if v := workflow.Assess(s, t0.Add(sec(7)), sec(1)); !v.Doomed {
		t.Fatal("stored state must assess as doomed")
	}
	ref, err := r.Refuse(ctx, "acme", step(3), "r3", "doomed", t0.Add(sec(7)), 3)
	if err != nil {
		t.Fatal(err)
	}
	if ref.NewlyDoomed || ref.GPUSecondsSaved != 3 || ref.State.GPUSecondsSaved < 7.99 {
		t.Fatalf("refuse outcome %+v state saved %v", ref, ref.State.GPUSecondsSaved)
	}
	// A redelivered refusal is not counted twice.
	ref2, _ := r.Refuse(ctx, "acme", step(3), "r3", "doomed", t0.Add(sec(8)), 3)
	if ref2.GPUSecondsSaved != 0 {
		t.Fatalf("redelivery counted again: %+v", ref2)
	}
	// Another tenant with the same workflow id is a different workflow.
	other, _ := r.Get(ctx, "globex", "wf1")
	if other != nil {
		t.Fatal("workflow state crossed tenants")
	}
}

// Results of requests outside any workflow are ignored; finished steps
// feed the observed step latency.
func TestRegistryFinish(t *testing.T) {
	r := openRegistry(t)
	ctx := context.Background()
	out, err := r.RecordResult(ctx, schemas.Result{ID: "loose", Tenant: "acme", Status: schemas.StatusOK}, t0)
	if err != nil || out.State != nil {
		t.Fatalf("non-workflow result: %+v %v", out, err)
	}
	wf := schemas.Workflow{ID: "wf-ok", Step: 1, Of: 2, DeadlineMs: 30000}
	if _, err := r.StepStart(ctx, "a.b$c", wf, "q1", t0, sec(2), 2, 1); err != nil {
		t.Fatal(err)
	}
	out, err = r.RecordResult(ctx, schemas.Result{ID: "q1", Tenant: "a.b$c", Status: schemas.StatusOK}, t0.Add(sec(3)))
	if err != nil || out.NewlyDoomed {
		t.Fatalf("%+v %v", out, err)
	}
	if got := out.State.ObservedStepLatency(); got != sec(3) {
		t.Fatalf("observed latency %v", got)
	}
}
