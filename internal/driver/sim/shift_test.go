package sim

import (
	"path/filepath"
	"testing"

	"github.com/switchyard-ai/switchyard/internal/core/perf"
	"github.com/switchyard-ai/switchyard/schemas"
)

// TestShiftModelsMovesGPUsBetweenModels runs multi-model-shift (2 H100s
// serving Llama, 2 A100s serving Qwen, popularity swinging 80/20 ↔ 20/80)
// at 2× on the same four GPUs twice: models pinned to their pools, and
// with GPUs that change model. The controller moves GPUs (each switch a
// wake from host memory, the old model left asleep there), the fleet stays
// four GPUs throughout, every request is answered, and the high classes
// are served better than pinned.
func TestShiftModelsMovesGPUsBetweenModels(t *testing.T) {
	ls, err := ReadScenarioFile(filepath.Join("..", "..", "..", "loadgen", "scenarios", "multi-model-shift.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	tr := ls.Trace.Scale(2).Window(ls.Window)
	run := func(shift bool) *Result {
		t.Helper()
		pol, err := NewPolicy("switchyard", perf.NewPredictor(nil))
		if err != nil {
			t.Fatal(err)
		}
		cfg := ls.Config
		if shift {
			cfg.Autoscale = &Autoscale{ShiftModels: true}
		}
		res, err := Run(cfg, tr, pol)
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	pinned, shifted := run(false), run(true)
	st := shifted.Autoscale
	if st == nil || st.Switches < 1 || st.WarmSwitches != st.Switches {
		t.Fatalf("autoscale stats %+v: want GPUs switched, every switch a wake from host memory", st)
	}
	if st.MinReplicas != 4 || st.MaxReplicas != 4 || st.Started != 0 || st.Retired != 0 {
		t.Errorf("replicas %d–%d, started %d, retired %d: want the same four GPUs throughout", st.MinReplicas, st.MaxReplicas, st.Started, st.Retired)
	}
	// A request routed to a model the worker has parked would fail there
	// (a replica serves only its active model): switching must not add
	// failures, and it holds the same GPUs as pinned, so the same GPU-hours.
	if shifted.Failed > pinned.Failed {
		t.Errorf("GPUs that change model failed %d requests, pinned %d", shifted.Failed, pinned.Failed)
	}
	if shifted.GPUHours > pinned.GPUHours*1.01 {
		t.Errorf("GPU-hours %.3f, pinned %.3f: want the same four GPUs' worth", shifted.GPUHours, pinned.GPUHours)
	}
	high := func(r *Result) float64 {
		return min(r.ByPriority[schemas.PriorityCritical].SLOAttainment, r.ByPriority[schemas.PriorityInteractive].SLOAttainment)
	}
	if high(shifted) <= high(pinned) || shifted.SLOAttainment <= pinned.SLOAttainment {
		t.Errorf("GPUs that change model: attainment %.3f, high classes %.3f; pinned %.3f, %.3f: want both higher",
			shifted.SLOAttainment, high(shifted), pinned.SLOAttainment, high(pinned))
	}
	t.Logf("2×: pinned attainment %.3f (high %.3f); GPUs change model %.3f (high %.3f), %d switches, %.1fs switching",
		pinned.SLOAttainment, high(pinned), shifted.SLOAttainment, high(shifted), st.Switches, st.SwitchSeconds)
}
