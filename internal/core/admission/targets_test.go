package admission

import (
	"testing"

	"github.com/switchyard-ai/switchyard/schemas"
)

// A request's own targets stand; one without takes its tenant's slo.
func TestSLOFillTargets(t *testing.T) {
	slo := SLO{TTFTMs: 500, TPOTMs: 50}
	cases := []struct {
		name               string
		ttft, tpot         float64
		wantTTFT, wantTPOT float64
		profile            SLO
	}{
		{"none of its own", 0, 0, 500, 50, slo},
		{"its own stand", 800, 60, 800, 60, slo},
		{"one of its own", 800, 0, 800, 50, slo},
		{"a profile without slo", 0, 0, 0, 0, SLO{}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			a := schemas.Admitted{TTFTTargetMs: c.ttft, TPOTTargetMs: c.tpot}
			c.profile.FillTargets(&a)
			if a.TTFTTargetMs != c.wantTTFT || a.TPOTTargetMs != c.wantTPOT {
				t.Fatalf("targets %v/%v, want %v/%v", a.TTFTTargetMs, a.TPOTTargetMs, c.wantTTFT, c.wantTPOT)
			}
		})
	}
}
