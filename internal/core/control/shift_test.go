package control

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/switchyard-ai/switchyard/schemas"
)

const otherModel = "qwen2.5-7b"

// shiftFleet is h100 workers, each serving one of two models with the
// other parked at a tier, for decisions of a controller whose GPUs change
// model.
type shiftFleet struct {
	models   []string // each worker's active model
	parked   string   // the tier the other model sits in on every worker
	running  map[string]int
	finished map[string]uint64
}

func (f *shiftFleet) heartbeats() []schemas.Heartbeat {
	var hbs []schemas.Heartbeat
	for i, m := range f.models {
		other := otherModel
		if m == otherModel {
			other = model
		}
		id := fmt.Sprintf("h100-%02d", i)
		hb := schemas.Heartbeat{WorkerID: id, GPU: "h100", TP: 1, MaxBatch: 256, Running: f.running[id], CompletedTotal: f.finished[id],
			Models: []schemas.ModelState{{Name: m, State: schemas.WeightHot, Tier: schemas.TierHBM}}}
		if f.parked != "" {
			hb.Models = append(hb.Models, schemas.ModelState{Name: other, State: schemas.TierState(f.parked), Tier: f.parked})
		}
		hbs = append(hbs, hb)
	}
	return hbs
}

// TestShiftMovesAGPUToTheModelWhoseDemandRose: on a fleet of three H100s,
// two serving Llama and one Qwen, Qwen's queue fills while Llama idles.
// The controller moves one Llama GPU to Qwen, sooner when Qwen sleeps in
// the worker's host memory (a 1.1 s wake) than when only the page cache
// holds it (a 28 s engine start priced into the switch); it never takes the
// last replica of a model, and it does not switch a balanced fleet.
func TestShiftMovesAGPUToTheModelWhoseDemandRose(t *testing.T) {
	for _, tc := range []struct {
		name       string
		models     []string
		parked     string
		qwenQueue  int
		wantSwitch bool
		// within is the most decisions the switch may take.
		within int
	}{
		{"qwen rises, asleep in host memory: switched within a few decisions", []string{model, model, otherModel}, schemas.TierHost, 400, true, 3},
		{"qwen rises, only in the page cache: the dearer switch waits for more rent", []string{model, model, otherModel}, schemas.TierPageCache, 400, true, 40},
		{"qwen rises but llama has one replica left: never stranded", []string{model, otherModel}, schemas.TierHost, 400, false, 0},
		{"balanced: no switch", []string{model, model, otherModel}, schemas.TierHost, 0, false, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pools := []Pool{{GPU: "h100", Model: model, Max: 8}, {GPU: "h100", Model: otherModel, Max: 8}}
			c, err := New(Config{Pools: pools, ShiftModels: true, Inventory: map[string]int{"h100": len(tc.models)}})
			if err != nil {
				t.Fatal(err)
			}
			f := &shiftFleet{models: tc.models, parked: tc.parked, running: map[string]int{}, finished: map[string]uint64{}}
			switchedAt := -1
			var sw SwitchDecision
			var last Decision
			for k := 0; k < 60 && switchedAt < 0; k++ {
				hbs := f.heartbeats()
				for i := range hbs {
					if hbs[i].Models[0].Name == otherModel && tc.qwenQueue > 0 {
						hbs[i].Running = 64 // Qwen's replica is saturated
					}
				}
				now := t0.Add(time.Duration(k) * 2 * time.Second)
				last = c.Decide(Inputs{Now: now, Workers: hbs, Queued: map[string]int{schemas.PriorityInteractive: tc.qwenQueue},
					QueuedByModel: map[string]int{otherModel: tc.qwenQueue, model: 0}})
				if len(last.Switches) > 0 {
					switchedAt, sw = k, last.Switches[0]
				}
				// Qwen's queue grows: it is demand the fleet does not serve.
				tc.qwenQueue += tc.qwenQueue / 10
			}
			if !tc.wantSwitch {
				if switchedAt >= 0 {
					t.Fatalf("switched %s from %s to %s at decision %d: %s", sw.Worker, sw.From, sw.To, switchedAt, sw.Reason)
				}
				return
			}
			if switchedAt < 0 || switchedAt > tc.within {
				t.Fatalf("switch at decision %d, want one within %d", switchedAt, tc.within)
			}
			if sw.From != model || sw.To != otherModel || sw.FromTier != tc.parked {
				t.Errorf("switch %+v, want %s -> %s with the weights from %s", sw, model, otherModel, tc.parked)
			}
			if !strings.HasPrefix(sw.Worker, "h100-") || sw.Seconds <= 0 {
				t.Errorf("switch %+v: want an h100 worker and a priced duration", sw)
			}
			if got := last.Desired(PoolKey("h100", model)); got != 1 {
				t.Errorf("llama pool desired %d after the switch, want 1", got)
			}
			if got := last.Desired(PoolKey("h100", otherModel)); got != 2 {
				t.Errorf("qwen pool desired %d after the switch, want 2 (the switching GPU on its way)", got)
			}
		})
	}
}

// TestShiftHostWakeBeatsPageCache pins the tier pricing itself: the same
// demand swing buys a switch from host memory in fewer decisions than one
// from the page cache.
func TestShiftHostWakeBeatsPageCache(t *testing.T) {
	at := map[string]int{}
	for _, tier := range []string{schemas.TierHost, schemas.TierPageCache} {
		c, err := New(Config{Pools: []Pool{{GPU: "h100", Model: model, Max: 8}, {GPU: "h100", Model: otherModel, Max: 8}},
			ShiftModels: true, Inventory: map[string]int{"h100": 3}})
		if err != nil {
			t.Fatal(err)
		}
		f := &shiftFleet{models: []string{model, model, otherModel}, parked: tier, running: map[string]int{}, finished: map[string]uint64{}}
		at[tier] = -1
		for k := 0; k < 60; k++ {
			d := c.Decide(Inputs{Now: t0.Add(time.Duration(k) * 2 * time.Second), Workers: f.heartbeats(),
				Queued: map[string]int{schemas.PriorityInteractive: 1000}, QueuedByModel: map[string]int{otherModel: 1000}})
			if len(d.Switches) > 0 {
				at[tier] = k
				break
			}
		}
	}
	if at[schemas.TierHost] < 0 || at[schemas.TierPageCache] < 0 || at[schemas.TierHost] >= at[schemas.TierPageCache] {
		t.Errorf("switch at decision %d from host memory and %d from the page cache; want both, host first", at[schemas.TierHost], at[schemas.TierPageCache])
	}
}

// TestShiftNeedsAnInventory: GPUs that change model need each GPU type's
// count, and pools of two models to move between.
func TestShiftNeedsAnInventory(t *testing.T) {
	for _, tc := range []struct {
		name  string
		pools []Pool
		inv   map[string]int
		err   string
	}{
		{"no inventory", []Pool{{GPU: "h100", Model: model, Max: 2}, {GPU: "h100", Model: otherModel, Max: 2}}, nil, "no inventory"},
		{"one model", []Pool{{GPU: "h100", Model: model, Max: 2}}, map[string]int{"h100": 2}, "no GPU type has pools of two models"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := New(Config{Pools: tc.pools, ShiftModels: true, Inventory: tc.inv})
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Fatalf("err %v, want one containing %q", err, tc.err)
			}
		})
	}
}
