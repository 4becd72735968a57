package loadgen

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/switchyard-ai/switchyard/internal/testkit/bustest"
	"github.com/switchyard-ai/switchyard/loadgen/tally"
	"github.com/switchyard-ai/switchyard/schemas"
	"github.com/switchyard-ai/switchyard/services/client"
	"github.com/switchyard-ai/switchyard/services/svc"
	"github.com/switchyard-ai/switchyard/subjects"
)

// TestRecoverFromStream: a result the live consumer never delivered (here:
// stored before anyone watched) is found in RESULTS before its request is
// called lost, and a request with no stored result stays outstanding.
func TestRecoverFromStream(t *testing.T) {
	e := bustest.StartProvisioned(t, subjects.StreamOptions{})
	cl, err := client.New(e.NC)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	tl := tally.New()
	tl.Submitted("stored-1", schemas.PriorityStandard, now)
	tl.Submitted("never-answered", schemas.PriorityStandard, now)
	res := schemas.Result{V: schemas.Version, ID: "stored-1", Tenant: "acme", Status: schemas.StatusOK, FinishedAt: now}
	m, err := svc.Encode(subjects.Final("acme", "stored-1"), schemas.JSON, res, "stored-1")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.JS.PublishMsg(context.Background(), m); err != nil {
		t.Fatal(err)
	}
	if n := recoverFromStream(context.Background(), cl, tl, now.Add(-time.Minute), slog.New(slog.DiscardHandler)); n != 1 {
		t.Fatalf("recovered %d results, want 1", n)
	}
	if got := tl.OutstandingIDs(); len(got) != 1 || got[0] != "never-answered" {
		t.Fatalf("outstanding %v, want only never-answered", got)
	}
	if s := tl.Summary(); s.Completed != 1 || s.Lost != 1 {
		t.Fatalf("summary completed %d lost %d, want 1 and 1", s.Completed, s.Lost)
	}
}
