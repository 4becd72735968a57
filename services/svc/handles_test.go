package svc

import (
	"bytes"
	"strings"
	"testing"

	"github.com/VictoriaMetrics/metrics"

	"github.com/switchyard-ai/switchyard/schemas"
)

func TestHandlesCreateOncePerLabels(t *testing.T) {
	var h Handles[*metrics.Counter]
	set := metrics.NewSet()
	created := 0
	get := func(l Labels) *metrics.Counter {
		return h.Get(l, func() *metrics.Counter {
			created++
			return set.NewCounter(`c{a="` + l[0] + `",b="` + l[1] + `"}`)
		})
	}
	a1, a2, b := get(Labels{"x", "y"}), get(Labels{"x", "y"}), get(Labels{"x", "z"})
	if a1 != a2 {
		t.Fatal("the same labels gave two handles")
	}
	if a1 == b {
		t.Fatal("different labels shared a handle")
	}
	if created != 2 {
		t.Fatalf("create ran %d times for two label sets, want 2", created)
	}
}

// The cached handles must name exactly the series the shell exported when
// it built each name per call: dashboards and alerts read these names.
func TestCountFinalSeriesNames(t *testing.T) {
	sh := &Shell{Service: "worker", Metrics: metrics.NewSet()}
	for _, res := range []schemas.Result{
		{Status: schemas.StatusOK, Priority: "interactive", SLOMet: true, CostUSD: 0.5},
		{Status: schemas.StatusOK, Priority: "interactive", SLOMet: true, CostUSD: 0.25},
		{Status: schemas.StatusFailed, Priority: "batch", SLOMet: true},
	} {
		sh.countFinal(res)
	}
	sh.duplicateCounter().Inc()
	var buf bytes.Buffer
	sh.Metrics.WritePrometheus(&buf)
	out := buf.String()
	for _, want := range []string{
		`switchyard_results_total{service="worker",status="ok",class="interactive"} 2`,
		`switchyard_results_total{service="worker",status="failed",class="batch"} 1`,
		`switchyard_slo_total{class="interactive",met="true"} 2`,
		`switchyard_slo_total{class="batch",met="false"} 1`, // a failed result never meets its SLO
		`switchyard_cost_usd_total{class="interactive"} 0.75`,
		`switchyard_results_duplicate_suppressed_total{service="worker"} 1`,
	} {
		if !strings.Contains(out, want+"\n") {
			t.Errorf("missing series %s in:\n%s", want, out)
		}
	}
}
