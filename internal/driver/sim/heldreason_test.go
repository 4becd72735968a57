package sim

import (
	"strings"
	"testing"
)

// Every outcome says why the router first held it, and only a held one
// does: a burst on one H100 holds lower classes over the queue ceiling
// (priority_reserve) while the quiet minutes before it place on arrival.
func TestOutcomeHeldReason(t *testing.T) {
	tr := repeatTrace(5, 0.1, 120, 15, 150, 300)
	cfg := Config{GPUs: []GPUSpec{{GPU: "h100", Count: 1, TP: 1}}, Model: "llama-3.1-8b", Seed: 3}
	held, reasons := 0, map[string]int{}
	cfg.OnResolve = func(o Outcome) {
		if o.HeldReason == "" {
			return
		}
		held++
		reasons[o.HeldReason]++
		if o.Placed.IsZero() && o.Status == "ok" {
			t.Errorf("%s: ok but never placed", o.Request.ID)
		}
		if !o.Placed.IsZero() && !o.Placed.After(o.Submitted) {
			t.Errorf("%s held (%s) but placed at its submission", o.Request.ID, o.HeldReason)
		}
	}
	res := run(t, cfg, tr, "switchyard")
	if held == 0 || held == res.Requests {
		t.Fatalf("%d of %d outcomes held: want some, not all", held, res.Requests)
	}
	found := false
	for r := range reasons {
		found = found || strings.Contains(r, "priority_reserve")
	}
	if !found {
		t.Errorf("held reasons %v: want priority_reserve among them", reasons)
	}
	t.Logf("%d of %d held: %v", held, res.Requests, reasons)
}
