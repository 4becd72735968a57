package sim

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/switchyard-ai/switchyard/internal/core/control"
	"github.com/switchyard-ai/switchyard/loadgen/traces"
	"github.com/switchyard-ai/switchyard/schemas"
)

// burstTrace is a quiet minute, a two-minute burst at rate× the quiet
// rate, then a quiet tail: load that rises and falls.
func burstTrace(seed uint64, quiet, burst float64) *traces.Trace {
	rng := rand.New(rand.NewPCG(seed, 1))
	tr := &traces.Trace{Name: "burst"}
	classes := []string{schemas.PriorityCritical, schemas.PriorityInteractive, schemas.PriorityStandard, schemas.PriorityBatch}
	t := 0.0
	for t < 480 {
		rate := quiet
		if t >= 60 && t < 180 {
			rate = burst
		}
		t += rng.ExpFloat64() / rate
		q := traces.Request{
			ID: fmt.Sprintf("r%05d", len(tr.Requests)), Arrival: time.Duration(t * float64(time.Second)),
			PromptTokens: 512 + rng.IntN(1536), OutputTokens: 64 + rng.IntN(192),
			Tenant: "t", Priority: classes[rng.IntN(len(classes))],
		}
		q.BlockHashes = []uint64{rng.Uint64()}
		traces.SetSLO(&q)
		tr.Requests = append(tr.Requests, q)
	}
	return tr
}

func TestAutoscaleFollowsBurst(t *testing.T) {
	tr := burstTrace(7, 2, 40)
	cfg := func() Config {
		return Config{GPUs: []GPUSpec{{GPU: "h100", Count: 1, TP: 1}}, Model: "llama-3.1-8b", Seed: 3,
			Autoscale: &Autoscale{Min: 1, Max: 12}}
	}
	a := run(t, cfg(), tr, "switchyard")
	b := run(t, cfg(), tr, "switchyard")
	a.WallSeconds, b.WallSeconds = 0, 0
	ja, _ := json.Marshal(a)
	jb, _ := json.Marshal(b)
	if string(ja) != string(jb) {
		t.Fatalf("two runs with one seed differ:\n%s\n%s", ja, jb)
	}
	as := a.Autoscale
	if as == nil {
		t.Fatal("autoscaled run reports no autoscale stats")
	}
	t.Logf("replicas %d/%.2f/%d started %d retired %d changes %v gpu-h %.3f attainment %.3f",
		as.MinReplicas, as.MeanReplicas, as.MaxReplicas, as.Started, as.Retired, as.Changes, a.GPUHours, a.SLOAttainment)
	if as.MaxReplicas < 3 || as.Started < 2 {
		t.Fatalf("the burst did not scale the fleet up: %+v", as)
	}
	if as.Retired == 0 {
		t.Fatalf("no worker drained after the burst: %+v", as)
	}
	// Up during the burst, back down after it.
	var upIn, peakAt float64
	peak := 0
	for _, p := range as.Timeline {
		if p.Replicas > 1 && upIn == 0 {
			upIn = p.AtSeconds
		}
		if p.Replicas > peak {
			peak, peakAt = p.Replicas, p.AtSeconds
		}
	}
	last := as.Timeline[len(as.Timeline)-1]
	if upIn < 60 || upIn > 180 || peakAt > 240 {
		t.Fatalf("scale-up at %.0fs, peak %d at %.0fs: want both inside the burst (60-180 s, peak by 240 s): %+v", upIn, peak, peakAt, as.Timeline)
	}
	if last.Replicas >= peak || last.AtSeconds < 180 {
		t.Fatalf("fleet did not come back down after the burst: last %+v, peak %d", last, peak)
	}
	// Nothing is lost to a drain: every request resolves.
	if a.Requests != len(tr.Requests) || a.Finished+a.Shed+a.Failed != a.Requests {
		t.Fatalf("requests %d finished %d shed %d failed %d of %d", a.Requests, a.Finished, a.Shed, a.Failed, len(tr.Requests))
	}
	// Only provisioned time is paid: less than the peak fleet for the run.
	if full := float64(peak) * a.MakespanSeconds / 3600; a.GPUHours >= full {
		t.Fatalf("gpu hours %.3f not below the peak fleet's %.3f", a.GPUHours, full)
	}
	fixed := run(t, Config{GPUs: []GPUSpec{{GPU: "h100", Count: peak, TP: 1}}, Model: "llama-3.1-8b", Seed: 3}, tr, "switchyard")
	if fixed.Autoscale != nil || a.GPUHours >= fixed.GPUHours {
		t.Fatalf("autoscaled %.3f GPU-h vs the peak-sized fixed fleet's %.3f", a.GPUHours, fixed.GPUHours)
	}
}

// The decision log sees every decision, in virtual-time order, with the
// replica changes the stats count.
func TestAutoscaleOnDecision(t *testing.T) {
	tr := burstTrace(7, 2, 40)
	var seen, changes int
	last := time.Duration(-1)
	cfg := Config{GPUs: []GPUSpec{{GPU: "h100", Count: 1, TP: 1}}, Model: "llama-3.1-8b", Seed: 3,
		Autoscale: &Autoscale{Min: 1, Max: 12, OnDecision: func(since time.Duration, d control.Decision) {
			seen++
			if since <= last {
				t.Errorf("decision at %v after one at %v", since, last)
			}
			last = since
			for _, ch := range d.Changes {
				if ch.Kind == control.KindReplicas {
					changes++
				}
			}
		}}}
	res := run(t, cfg, tr, "switchyard")
	if seen == 0 || seen != res.Autoscale.Decisions {
		t.Fatalf("decision log saw %d decisions, the stats count %d", seen, res.Autoscale.Decisions)
	}
	if changes == 0 || changes != res.Autoscale.Changes[control.KindReplicas] {
		t.Fatalf("decision log saw %d replica changes, the stats count %d", changes, res.Autoscale.Changes[control.KindReplicas])
	}
}
