package sim

import (
	"strings"
	"testing"

	"github.com/switchyard-ai/switchyard/internal/core/baselines"
	"github.com/switchyard-ai/switchyard/internal/core/perf"
)

// Every planner baseline runs through the same autoscaler: the burst
// scales the fleet up, nothing is lost to a drain, and only provisioned
// time is paid.
func TestPlannersRunOnTheSameFleet(t *testing.T) {
	tr := burstTrace(7, 2, 40)
	for _, name := range baselines.PlannerNames() {
		t.Run(name, func(t *testing.T) {
			cfg := Config{GPUs: []GPUSpec{{GPU: "h100", Count: 1, TP: 1}}, Model: "llama-3.1-8b", Seed: 3,
				Autoscale: &Autoscale{Min: 1, Max: 12, Planner: name}}
			res := run(t, cfg, tr, "switchyard")
			as := res.Autoscale
			if as == nil {
				t.Fatal("no autoscale stats")
			}
			t.Logf("%s: replicas %d/%.2f/%d started %d retired %d gpu-h %.3f attainment %.3f",
				name, as.MinReplicas, as.MeanReplicas, as.MaxReplicas, as.Started, as.Retired, res.GPUHours, res.SLOAttainment)
			if as.MaxReplicas < 2 || as.Started < 1 {
				t.Fatalf("%s did not scale up for a 20x burst: %+v", name, as)
			}
			if res.Requests != len(tr.Requests) || res.Finished+res.Shed+res.Failed != res.Requests {
				t.Fatalf("requests %d finished %d shed %d failed %d", res.Requests, res.Finished, res.Shed, res.Failed)
			}
			if full := float64(as.MaxReplicas) * res.MakespanSeconds / 3600; res.GPUHours >= full {
				t.Fatalf("gpu hours %.3f not below the peak fleet's %.3f", res.GPUHours, full)
			}
		})
	}
	pol, err := NewPolicy("switchyard", perf.NewPredictor(nil))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Run(Config{GPUs: []GPUSpec{{GPU: "h100", Count: 1, TP: 1}}, Model: "llama-3.1-8b",
		Autoscale: &Autoscale{Planner: "nope"}}, tr, pol); err == nil || !strings.Contains(err.Error(), "unknown planner") {
		t.Fatalf("an unknown planner: %v", err)
	}
}
