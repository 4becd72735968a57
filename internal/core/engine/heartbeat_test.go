package engine

import (
	"math"
	"testing"
	"time"

	"github.com/switchyard-ai/switchyard/schemas"
)

// TestGPUSecondsAttributed: every step's GPU time lands on the sequences
// in it, prefill-only steps included, so what the finished and the
// cancelled report adds up to what the engine spent; Progress reports a
// running sequence's tokens and spend for a cancel's usage.
func TestGPUSecondsAttributed(t *testing.T) {
	e := newEngine(t, Config{TokenBudget: 512})
	for _, s := range []Sequence{
		{ID: "long", PromptTokens: 4000, MaxTokens: 40, Arrival: t0},
		{ID: "short", PromptTokens: 100, MaxTokens: 20, Arrival: t0},
	} {
		if err := e.Add(s); err != nil {
			t.Fatal(err)
		}
	}
	now := t0
	spent, got := 0.0, 0.0
	var prefillOnly bool
	for i := 0; i < 200 && e.HasWork(); i++ {
		st := e.Step(now)
		if len(st.Emitted) == 0 && st.GPUSeconds > 0 {
			prefillOnly = true
		}
		spent += st.GPUSeconds
		for _, f := range st.Finished {
			got += f.GPUSeconds
		}
		if i == 20 {
			gen, _, sec, ok := e.Progress("long")
			if !ok || gen == 0 || sec <= 0 {
				t.Fatalf("Progress(long) mid-run = %d tokens, %.4f s, %v", gen, sec, ok)
			}
			e.Cancel("long")
			got += sec
		}
		now = now.Add(st.Duration)
	}
	if !prefillOnly {
		t.Fatal("no prefill-only step: the test proves nothing about them")
	}
	if math.Abs(spent-got) > 1e-9*max(1, spent) {
		t.Fatalf("engine spent %.6f GPU-s, sequences were charged %.6f", spent, got)
	}
}

// TestFillHeartbeat: the one heartbeat builder reports the replica, its
// memory (weights plus the occupied share of the KV pool), the model's
// window and whether it shares its prefill steps, and reuses the caller's
// maps.
func TestFillHeartbeat(t *testing.T) {
	e := newEngine(t, Config{})
	var hb schemas.Heartbeat
	e.FillHeartbeat(&hb)
	idleFree := hb.HBMFreeBytes
	if hb.GPU != "h100" || hb.TP != 1 || !hb.Simulated || len(hb.Models) != 1 || hb.Models[0].ContextLength == 0 {
		t.Fatalf("heartbeat: %+v", hb)
	}
	if w := uint64(e.rep.WeightBytes()); hb.HBMTotalBytes-idleFree < w {
		t.Fatalf("idle HBM in use %d below the weights %d", hb.HBMTotalBytes-idleFree, w)
	}
	if err := e.Add(Sequence{ID: "a", PromptTokens: 20000, MaxTokens: 10, Arrival: t0, Priority: 1}); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 5; i++ {
		e.Step(t0.Add(time.Duration(i) * time.Millisecond))
	}
	models := &hb.Models[0]
	e.FillHeartbeat(&hb)
	if hb.HBMFreeBytes >= idleFree || hb.KVBlocksFree >= hb.KVBlocksTotal {
		t.Fatalf("a 20k-token prompt left HBM free %d (idle %d), KV %d/%d", hb.HBMFreeBytes, idleFree, hb.KVBlocksFree, hb.KVBlocksTotal)
	}
	if &hb.Models[0] != models {
		t.Fatal("FillHeartbeat reallocated the models slice")
	}
	// Whether the engine shares its prefill steps (placement prices its
	// queue by it) is the engine's own setting.
	for _, capOn := range []bool{false, true} {
		var hb schemas.Heartbeat
		newEngine(t, Config{TargetStepCap: capOn}).FillHeartbeat(&hb)
		if hb.StepCap != capOn {
			t.Errorf("TargetStepCap %v: heartbeat step_cap %v", capOn, hb.StepCap)
		}
	}
}
