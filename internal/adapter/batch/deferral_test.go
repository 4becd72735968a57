package batch

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/switchyard-ai/switchyard/internal/testkit/bustest"
	"github.com/switchyard-ai/switchyard/schemas"
	"github.com/switchyard-ai/switchyard/services/svc"
	"github.com/switchyard-ai/switchyard/subjects"
)

// TestRefreshReportsDeferral: the admitter's defer events for a batch's
// requests (and only those) reach `batch status` and the wait's progress
// line: how many wait, until when, and why.
func TestRefreshReportsDeferral(t *testing.T) {
	env := bustest.StartProvisioned(t, subjects.StreamOptions{})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	st, err := OpenStore(ctx, env.JS, StoreOptions{})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	rec := Record{ID: "batch_deferme", Tenant: "acme", Created: now, Deadline: now.Add(time.Hour)}
	items := []Item{{Line: 1, CustomID: "a", RequestID: RequestID(rec.ID, 1)}, {Line: 2, CustomID: "b", RequestID: RequestID(rec.ID, 2)}}
	if rec, err = st.Create(ctx, rec, items, nil); err != nil {
		t.Fatal(err)
	}
	adm, err := svc.New("admitter", "admitter-test", env.NC, nil)
	if err != nil {
		t.Fatal(err)
	}
	until := now.Add(10 * time.Minute).Truncate(time.Second)
	why := "fleet busy (utilisation 73%, wait 1m44s)"
	for _, ev := range []schemas.Event{
		{Kind: DeferKind, RequestID: items[0].RequestID, Tenant: "acme", Reason: why, Fields: map[string]any{"defer_until": until}},
		{Kind: DeferKind, RequestID: items[1].RequestID, Tenant: "acme", Reason: why, Fields: map[string]any{"defer_until": until.Add(-time.Minute)}},
		{Kind: DeferKind, RequestID: "someone-else", Tenant: "acme", Reason: "other", Fields: map[string]any{"defer_until": until.Add(time.Hour)}},
		{Kind: DeferKind, RequestID: items[0].RequestID, Tenant: "globex", Reason: "other tenant", Fields: map[string]any{"defer_until": until.Add(time.Hour)}},
	} {
		adm.Emit(ev)
	}
	adm.FlushEvents()
	// Only item 2 has a result: item 1 still waits.
	res := schemas.Result{ID: items[1].RequestID, Tenant: "acme", Status: schemas.StatusOK}
	m, err := svc.Encode(subjects.Final("acme", res.ID), schemas.JSON, res, res.ID)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := env.JS.PublishMsg(ctx, m); err != nil {
		t.Fatal(err)
	}
	var p Progressed
	for end := time.Now().Add(5 * time.Second); ; {
		if p, err = Refresh(ctx, env.JS, st, rec.ID, false, nil); err != nil {
			t.Fatal(err)
		}
		if p.Waiting.Count > 0 || time.Now().After(end) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	w := p.Waiting
	if w.Count != 1 || !w.Until.Equal(until) || w.Reason != why {
		t.Fatalf("waiting %+v, want 1 deferred until %s for %q", w, until, why)
	}
	line := w.Describe(until.Add(-10 * time.Minute))
	if !strings.Contains(line, "1 deferred until") || !strings.Contains(line, "in 10m0s") || !strings.Contains(line, why) {
		t.Fatalf("describe %q", line)
	}
}

func TestETA(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	tests := []struct {
		name    string
		samples []etaSample
		total   int
		waiting Waiting
		want    time.Duration
		ok      bool
	}{
		{"nothing yet", nil, 100, Waiting{}, 0, false},
		{"no progress", []etaSample{{t0, 5}, {t0.Add(2 * time.Second), 5}}, 100, Waiting{}, 0, false},
		{"by rate", []etaSample{{t0, 0}, {t0.Add(10 * time.Second), 50}}, 100, Waiting{}, 10 * time.Second, true},
		{"deferral is later", []etaSample{{t0, 0}, {t0.Add(10 * time.Second), 50}}, 100,
			Waiting{Count: 40, Until: t0.Add(10*time.Second + 5*time.Minute)}, 5 * time.Minute, true},
		{"deferral alone", []etaSample{{t0.Add(10 * time.Second), 13}}, 500,
			Waiting{Count: 487, Until: t0.Add(10*time.Second + 10*time.Minute)}, 10 * time.Minute, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var e ETA
			for _, s := range tt.samples {
				e.Observe(s.at, s.done)
			}
			now := t0.Add(10 * time.Second)
			got, ok := e.Estimate(now, tt.total, tt.waiting)
			if ok != tt.ok || got != tt.want {
				t.Fatalf("estimate %s %v, want %s %v", got, ok, tt.want, tt.ok)
			}
		})
	}
	var e ETA
	e.Observe(t0, 13)
	line := Line(t0, 13, 500, Waiting{Count: 487, Until: t0.Add(10 * time.Minute), Reason: "fleet busy"}, &e)
	if !strings.Contains(line, "487 deferred until") || !strings.Contains(line, "fleet busy") || !strings.Contains(line, "ETA 10m0s") {
		t.Fatalf("line %q names neither the deferral nor the ETA", line)
	}
}

// TestDeferralWatchErrorIsReported: once reading the defer events has
// stopped on an error, the waiting summary and its progress line say the
// deferrals are unknown, rather than showing the count read so far as if
// the watch still ran.
func TestDeferralWatchErrorIsReported(t *testing.T) {
	until := time.Now().Add(time.Hour)
	d := &Deferrals{byID: map[string]Deferral{"r1": {Until: until, Reason: "fleet busy"}, "r2": {Until: until, Reason: "fleet busy"}}}
	none := func(string) bool { return false }
	if w := d.Pending(none); w.WatchError != "" || strings.Contains(w.Describe(time.Now()), "unknown") {
		t.Fatalf("watch error %q before anything failed", w.WatchError)
	}
	d.fail(errors.New("nats: connection closed"))
	for _, tc := range []struct {
		name string
		done func(string) bool
		want []string
	}{
		{"some still deferred", none, []string{"2 deferred", "fleet busy", "deferrals unknown since nats: connection closed"}},
		{"none left", func(string) bool { return true }, []string{"deferrals unknown: nats: connection closed"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := d.Pending(tc.done)
			if w.WatchError != "nats: connection closed" {
				t.Fatalf("watch error %q", w.WatchError)
			}
			line := w.Describe(time.Now())
			for _, want := range tc.want {
				if !strings.Contains(line, want) {
					t.Fatalf("describe %q, want it to contain %q", line, want)
				}
			}
		})
	}
}
