package main

import (
	"testing"
	"time"

	"github.com/switchyard-ai/switchyard/internal/adapter/config"
	"github.com/switchyard-ai/switchyard/internal/core/admission"
	"github.com/switchyard-ai/switchyard/internal/core/tokens"
	"github.com/switchyard-ai/switchyard/loadgen"
)

// The README's two commands work together: every request `switchyard
// loadgen` sends by default (the demo's tenants, classes, models and
// workflows, with and without --burst) is one `up --tenants
// config/tenants.example.json` admits — a configured tenant, not the
// default profile, a class it may use, a model it may ask for, within its
// quota at the arrival times. Issue 31 found 206 of 247 refused
// priority_not_allowed.
func TestLoadgenFitsTheExampleTenants(t *testing.T) {
	ts, err := config.LoadTenants("../../config/tenants.example.json")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name  string
		rate  float64
		burst bool
	}{{"loadgen's default rate", 10, false}, {"twice that", 20, false}, {"with --burst", 10, true}} {
		t.Run(c.name, func(t *testing.T) {
			wl := loadgen.DefaultWorkload(2*time.Minute, 1)
			wl.Rate = c.rate
			if !c.burst {
				wl.BurstFactor = 0 // as the loadgen command does without --burst
			}
			q := admission.NewQuotas()
			t0 := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
			refused := map[string]int{}
			arrivals := wl.Generate()
			for _, a := range arrivals {
				p, e := ts.Lookup(a.Tenant)
				switch {
				case e != nil:
					refused[a.Tenant+": "+e.Code]++
					continue
				case p.Default:
					refused[a.Tenant+": not configured, the default profile"]++
					continue
				}
				if _, e := p.ResolvePriority(a.Request.Priority); e != nil {
					refused[a.Tenant+": "+e.Code+" "+a.Request.Priority]++
					continue
				}
				if m := a.Request.Model; (m == "auto" && !p.AllowAuto) || (m != "auto" && !p.ModelAllowed(m)) {
					refused[a.Tenant+": model "+m]++
					continue
				}
				now := t0.Add(a.Offset)
				n := tokens.Count(a.Request.PromptText()) + a.Request.MaxTokens
				if e := q.Check(p, n, 0, now); e != nil {
					refused[a.Tenant+": "+e.Code]++
					continue
				}
				q.Charge(p, n, 0, now)
			}
			if len(refused) > 0 {
				t.Fatalf("of %d requests the example tenants refuse: %v", len(arrivals), refused)
			}
		})
	}
}
