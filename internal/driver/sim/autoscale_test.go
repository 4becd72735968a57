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

// TestAutoscalePhasePoolsSizedSeparately: a fleet of one prefill H100 and
// one decode A100 on the Mooncake conversation slice, autoscaled from one
// replica each. The two pools are sized separately — the prefill pool by
// the uncached prompt tokens, the decode pool by the output tokens — and
// every worker the autoscaler starts takes its pool's role (every request
// still splits). The same requests in two versions — three quarters of
// every prompt a prefix all of them share (a long common document, cached
// once per worker), and no prefix shared at all (every block hash unique)
// — bring the prefill pool four times the uncached tokens at the same
// request rate in the second: it grows, and the decode pool, whose work is
// the same, does not follow it.
func TestAutoscalePhasePoolsSizedSeparately(t *testing.T) {
	base := mooncakeSlice(t, 1000)
	rehash := func(name string, sharedShare float64) *traces.Trace {
		tr := &traces.Trace{Name: name, Requests: make([]traces.Request, len(base.Requests))}
		copy(tr.Requests, base.Requests)
		next := uint64(1 << 40)
		for i := range tr.Requests {
			hs := make([]uint64, len(tr.Requests[i].BlockHashes))
			common := int(sharedShare * float64(len(hs)))
			for k := range hs {
				if k < common {
					hs[k] = uint64(k + 1) // the prefix every request shares
					continue
				}
				hs[k], next = next, next+1
			}
			tr.Requests[i].BlockHashes = hs
		}
		return tr
	}
	shared, cold := rehash("3/4 shared prefix", 0.75), rehash("no shared prefix", 0)
	pre := control.RolePoolKey("h100", "llama-3.1-8b", schemas.RolePrefill)
	dec := control.RolePoolKey("a100-80g", "llama-3.1-8b", schemas.RoleDecode)
	type sizing struct {
		meanDesired, tokenRate map[string]float64
		maxDesired             map[string]int
		res                    *Result
	}
	measure := func(tr *traces.Trace) sizing {
		gpus, err := ParseGPUs("h100:1@prefill,a100-80g:1@decode")
		if err != nil {
			t.Fatal(err)
		}
		sz := sizing{meanDesired: map[string]float64{}, tokenRate: map[string]float64{}, maxDesired: map[string]int{}}
		n := 0
		cfg := Config{GPUs: gpus, Model: "llama-3.1-8b", Seed: 1, Autoscale: &Autoscale{Min: 1, Max: 16,
			OnDecision: func(_ time.Duration, d control.Decision) {
				n++
				for _, rd := range d.Replicas {
					sz.meanDesired[rd.Pool] += float64(rd.Desired)
					sz.tokenRate[rd.Pool] += rd.TokenRate
					sz.maxDesired[rd.Pool] = max(sz.maxDesired[rd.Pool], rd.Desired)
				}
			}}}
		sz.res = run(t, cfg, tr, "switchyard")
		for k := range sz.meanDesired {
			sz.meanDesired[k] /= float64(n)
			sz.tokenRate[k] /= float64(n)
		}
		as := sz.res.Autoscale
		t.Logf("%s: %d requests, %d finished, %d split, attainment %.3f; started %d; prefill desired mean %.2f max %d (%.0f uncached tokens/s), decode mean %.2f max %d (%.0f output tokens/s)",
			tr.Name, sz.res.Requests, sz.res.Finished, sz.res.Split, sz.res.SLOAttainment, as.Started,
			sz.meanDesired[pre], sz.maxDesired[pre], sz.tokenRate[pre], sz.meanDesired[dec], sz.maxDesired[dec], sz.tokenRate[dec])
		return sz
	}
	a, b := measure(shared), measure(cold)
	for _, sz := range []sizing{a, b} {
		if sz.res.Autoscale.Started == 0 {
			t.Fatalf("nothing started: %+v", sz.res.Autoscale)
		}
		if sz.res.Split != sz.res.Finished {
			t.Errorf("%d of %d finished requests split: a started worker without its pool's role takes whole requests", sz.res.Split, sz.res.Finished)
		}
		if sz.maxDesired[pre] < 2 || sz.maxDesired[dec] < 2 {
			t.Errorf("prefill max %d, decode max %d: both pools should grow from one replica under this load", sz.maxDesired[pre], sz.maxDesired[dec])
		}
	}
	if b.tokenRate[pre] <= a.tokenRate[pre] {
		t.Errorf("uncached tokens/s planned: %.0f with shared prefixes, %.0f with none: want more with none", a.tokenRate[pre], b.tokenRate[pre])
	}
	if b.meanDesired[pre] <= a.meanDesired[pre] {
		t.Errorf("prefill pool mean %.2f replicas with shared prefixes, %.2f with none: want it to grow with the uncached tokens", a.meanDesired[pre], b.meanDesired[pre])
	}
	if grow, follow := b.meanDesired[pre]-a.meanDesired[pre], b.meanDesired[dec]-a.meanDesired[dec]; follow >= grow {
		t.Errorf("decode pool moved %.2f replicas where prefill moved %.2f: the pools are not sized separately", follow, grow)
	}
}

// TestAutoscaleAssignsRoles: with AssignRoles, a fleet of role-both H100s
// on a KV link, serving the Mooncake slice's long uncached prompts, has
// workers turned to prefill by the controller: the changes are counted,
// the turned workers' heartbeats carry the role, and nothing is lost.
func TestAutoscaleAssignsRoles(t *testing.T) {
	tr := mooncakeSlice(t, 400)
	roles := map[string]string{}
	cfg := Config{GPUs: []GPUSpec{{GPU: "h100", Count: 4}}, Link: "ib-ndr", Model: "llama-3.1-8b", Seed: 1,
		Autoscale: &Autoscale{Min: 4, Max: 4, Control: control.Config{AssignRoles: true},
			OnDecision: func(_ time.Duration, d control.Decision) {
				for _, r := range d.Roles {
					roles[r.Worker] = r.Role
				}
			}}}
	res := run(t, cfg, tr, "switchyard")
	off := cfg
	off.Autoscale = &Autoscale{Min: 4, Max: 4}
	base := run(t, off, tr, "switchyard")
	t.Logf("role changes %d, final roles %v; %d finished (%d split), attainment %.3f; without role changes %d finished (%d split), attainment %.3f",
		res.Autoscale.Changes[control.KindRole], roles, res.Finished, res.Split, res.SLOAttainment, base.Finished, base.Split, base.SLOAttainment)
	if res.Autoscale.Changes[control.KindRole] == 0 {
		t.Fatal("no role change on long uncached prompts")
	}
	if res.Finished+res.Failed+res.Shed != res.Requests {
		t.Fatalf("lost requests: %d of %d resolved", res.Finished+res.Failed+res.Shed, res.Requests)
	}
	if base.Autoscale.Changes[control.KindRole] != 0 {
		t.Errorf("roles changed without AssignRoles")
	}
}

// A planner baseline is lent the sleeping tier Switchyard's controller
// has (control.WithSleepTier): with SleepOnRelease its scale-down puts a
// replica to sleep, and its next rise within the prior hold wakes that
// sleeper where without the tier it cold-starts one. Bursts of 15 s every
// 40 s fall and return inside one hold (32 s for llama-3.1-8b on an H100),
// so bursts after the first are served by wakes. Dynamo's load planner
// is the baseline that scales down within seconds of a fall (the HPA's
// five-minute window holds through these gaps: its tier goes unused here).
func TestAutoscaleBaselineWakesASleeperOnTheNextRise(t *testing.T) {
	tr := repeatTrace(11, 0.5, 60, 15, 40, 480)
	const name = "dynamo-load"
	type out struct {
		started, wakes, sleeps int
		gpuH                   float64
	}
	runOne := func(sleep bool) out {
		var o out
		cfg := Config{GPUs: []GPUSpec{{GPU: "h100", Count: 1, TP: 1}}, Model: "llama-3.1-8b", Seed: 3,
			Autoscale: &Autoscale{Min: 1, Max: 8, Planner: name, OnDecision: func(_ time.Duration, d control.Decision) {
				// The tier's own commands, not wakes by work placed on a sleeper.
				for _, w := range d.Warmth {
					switch w.State {
					case schemas.WeightHot:
						o.wakes++
					case schemas.WeightSleeping:
						o.sleeps++
					}
				}
			}}}
		cfg.Autoscale.Control.SleepOnRelease = sleep
		res := run(t, cfg, tr, "switchyard")
		o.started, o.gpuH = res.Autoscale.Started, res.GPUHours
		t.Logf("sleep-on-release %v: started %d, sleep commands %d, wake commands %d, GPU-h %.3f, attainment %.4f",
			sleep, o.started, o.sleeps, o.wakes, o.gpuH, res.SLOAttainment)
		return o
	}
	released, slept := runOne(false), runOne(true)
	if released.sleeps != 0 || released.wakes != 0 {
		t.Fatalf("without SleepOnRelease the baseline slept %d and woke %d replicas", released.sleeps, released.wakes)
	}
	if slept.sleeps == 0 || slept.wakes == 0 {
		t.Fatalf("with SleepOnRelease the baseline slept %d and woke %d replicas: its scale-down should sleep and its next rise wake", slept.sleeps, slept.wakes)
	}
	if slept.started >= released.started {
		t.Fatalf("with SleepOnRelease %d cold starts, without %d: wakes should replace some", slept.started, released.started)
	}
}
