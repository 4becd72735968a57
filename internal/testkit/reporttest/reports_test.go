package reporttest

import (
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/switchyard-ai/switchyard/internal/core/replay"
	"github.com/switchyard-ai/switchyard/internal/driver/sim"
	"github.com/switchyard-ai/switchyard/schemas"
)

// simReport is a report with as much as `switchyard sim --sweep` puts in
// one: every baseline policy with long names, CDFs spanning four decades,
// four classes and a sweep.
func simReport() sim.Report {
	rng := rand.New(rand.NewPCG(1, 2))
	names := []string{"switchyard", "round-robin", "least-loaded", "llm-d", "dynamo", "sglang", "switchyard-no-kv-aware", "switchyard-autoscaled-high"}
	var rs []*sim.Result
	for i, n := range names {
		r := &sim.Result{Name: n, Requests: 12000 + i, Succeeded: 11000, Finished: 11900, Shed: 40 + i, Failed: 7,
			SLOAttainment: 0.9123 - float64(i)*0.01, Tasks: 3000, TasksSucceeded: 2900, GoodputRPS: 123.456, GoodputPerGPUHour: 12345.6,
			CostPerSuccessUSD: 0.000123 * float64(i+1), TTFTP50ms: 123, TTFTP99ms: 12345, ITLP50ms: 12.3, ITLP99ms: 123.4,
			PrefixHitRate: 0.456, WastedGPUSeconds: 12345, ByPriority: map[string]sim.ClassResult{}}
		for _, c := range schemas.Priorities {
			r.ByPriority[c] = sim.ClassResult{Requests: 3000, Succeeded: 2900, Shed: 12, SLOAttainment: 0.967}
		}
		for k := 0; k < 2000; k++ {
			r.TTFTs = append(r.TTFTs, 0.005*float64(1+rng.IntN(2000)))
			r.ITLs = append(r.ITLs, 0.001*float64(1+rng.IntN(300)))
		}
		sort.Float64s(r.TTFTs)
		sort.Float64s(r.ITLs)
		rs = append(rs, r)
	}
	var sweep []sim.SweepPoint
	for _, s := range []float64{0.25, 0.5, 0.75, 1, 1.25, 1.5, 2, 3, 4, 6, 8, 12, 16} {
		sweep = append(sweep, sim.SweepPoint{Scale: s, Results: rs})
	}
	return sim.Report{Title: "Switchyard simulation: mooncake trace, h100:16", Command: "switchyard sim --trace mooncake --sweep 0.25,0.5,1,2,4,8,16 --html out.html",
		Rules: []string{"tenant acme: interactive, 2 s deadline"}, Results: rs, Sweep: sweep}
}

// replayReport is a what-if replay over five minutes of three tenants
// and four classes, built with the same Compare and Enrich as the command.
func replayReport() replay.Report {
	t0 := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	rng := rand.New(rand.NewPCG(3, 4))
	var events []schemas.Event
	var results []schemas.Result
	var baseline, whatIf []replay.Decision
	tenants := []string{"acme", "globex-research-division", "initech"}
	for i := range 600 {
		at := t0.Add(time.Duration(i) * 500 * time.Millisecond)
		id := fmt.Sprintf("req-%04d-%08x", i, rng.Uint32())
		tenant, class := tenants[i%3], schemas.Priorities[i%4]
		slack := 1.5 - rng.Float64()
		rec := replay.Decision{ID: id, Tenant: tenant, Kind: "placed", Worker: fmt.Sprintf("h100-%d", i%4), At: at, Class: class,
			Predicted: &replay.Predicted{QueueS: 0.01, PrefillS: 0.05, DecodeS: 0.4, CompletionS: 0.46, SlackS: &slack, GPUUSD: 0.0002}}
		alt := rec
		alt.Worker = fmt.Sprintf("h100-%d", (i+1)%4)
		altSlack := slack - 0.6
		alt.Predicted = &replay.Predicted{QueueS: 0.3, PrefillS: 0.2, DecodeS: 0.5, CompletionS: 1.0, SlackS: &altSlack, GPUUSD: 0.0003}
		baseline, whatIf = append(baseline, rec), append(whatIf, alt)
		events = append(events, schemas.Event{Service: "router", Kind: "placed", RequestID: id, Tenant: tenant, WorkerID: rec.Worker, At: at})
		status := schemas.StatusOK
		if i%37 == 0 {
			status = schemas.StatusShed
		}
		total := 200 + rng.Float64()*3000
		results = append(results, schemas.Result{ID: id, Tenant: tenant, Priority: class, Status: status, SLOMet: status == schemas.StatusOK && slack > 0.7,
			WorkerID: rec.Worker, GPU: "h100", Timing: schemas.Timing{QueueMs: 5 + rng.Float64()*50, TTFTMs: 80 + rng.Float64()*100, TotalMs: total},
			Usage: schemas.Usage{PromptTokens: 1200, CachedTokens: 600, CompletionTokens: 128}, FinishedAt: at.Add(time.Duration(total) * time.Millisecond)})
	}
	rep := replay.Compare(replay.Window{}, "round-robin", "switchyard", whatIf, events, results, time.Second)
	replay.Enrich(&rep, replay.Window{}, baseline, whatIf, results)
	return rep
}

// TestReportsInChromium renders the simulator's and replay's reports in
// headless Chromium at 1000 px and fails on a script error, a page or
// table wider than the window, or chart labels drawn over each other (the
// simulator's CDF y axis put 0.99 on top of 1; its results table ran past
// 1000 px).
func TestReportsInChromium(t *testing.T) {
	chromium := Chromium(t)
	dir := t.TempDir()
	if keep := os.Getenv("SWITCHYARD_REPORT_DIR"); keep != "" {
		dir = keep // to look at the pages the test rendered
	}
	write := func(name string, render func(f *os.File) error) string {
		p := filepath.Join(dir, name)
		f, err := os.Create(p)
		if err != nil {
			t.Fatal(err)
		}
		if err := render(f); err != nil {
			t.Fatal(err)
		}
		if err := f.Close(); err != nil {
			t.Fatal(err)
		}
		return p
	}
	rep := replayReport()
	if rep.WhatIf == nil || rep.WhatIf.Moved == 0 || len(rep.Slowest) == 0 || len(rep.Series) != 12 {
		t.Fatalf("replay report lacks what the page must show: what-if %+v, %d slowest, %d series", rep.WhatIf, len(rep.Slowest), len(rep.Series))
	}
	pages := map[string]string{
		"sim":    write("sim.html", func(f *os.File) error { return sim.WriteHTML(f, simReport()) }),
		"replay": write("replay.html", func(f *os.File) error { return replay.WriteHTML(f, rep) }),
	}
	for name, path := range pages {
		t.Run(name, func(t *testing.T) {
			f := Check(t, chromium, path, 1000)
			for _, e := range f.ScriptErrors {
				t.Errorf("script error: %s", e)
			}
			for _, l := range f.Layout {
				t.Errorf("layout: %s", l)
			}
			if f.Texts < 20 {
				t.Errorf("only %d chart labels checked: the charts did not render", f.Texts)
			}
		})
	}
}

// TestCheckFindsFaults: the check itself fails a page with a script error,
// a table wider than the window and two labels on top of each other.
func TestCheckFindsFaults(t *testing.T) {
	chromium := Chromium(t)
	p := filepath.Join(t.TempDir(), "bad.html")
	page := `<!doctype html><html><head><meta charset="utf-8"></head><body>
<table><tr>` + strings.Repeat("<td>wide-column-content</td>", 80) + `</tr></table>
<svg width="200" height="100"><text x="10" y="50">0.99</text><text x="12" y="52">1.00</text></svg>
<script>undefinedFunction();</script></body></html>`
	if err := os.WriteFile(p, []byte(page), 0o644); err != nil {
		t.Fatal(err)
	}
	f := Check(t, chromium, p, 1000)
	joined := strings.Join(f.Layout, "\n")
	if len(f.ScriptErrors) == 0 || !strings.Contains(joined, "table 1") || !strings.Contains(joined, "overlap") {
		t.Fatalf("faults not found: %+v", f)
	}
}
