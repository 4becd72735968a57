package main

import (
	"context"
	_ "embed"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/switchyard-ai/switchyard/internal/core/baselines"
	"github.com/switchyard-ai/switchyard/internal/core/catalog"
	"github.com/switchyard-ai/switchyard/internal/core/perf"
	"github.com/switchyard-ai/switchyard/internal/core/routing"
	"github.com/switchyard-ai/switchyard/loadgen"
	"github.com/switchyard-ai/switchyard/loadgen/tally"
	"github.com/switchyard-ai/switchyard/schemas"
	"github.com/switchyard-ai/switchyard/services/stack"
)

func runDemo(ctx context.Context, args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("demo", flag.ContinueOnError)
	duration := fs.Duration("duration", 0, "how long to generate load (default: the scenario's, 15s for default, 6m for rise-fall)")
	workers := fs.Int("workers", 4, "simulated workers (mixed GPU generations)")
	fleetFlag := fs.String("fleet", "", "fleet as gpu:count[=model],... serving the scenario's model unless an entry names its own (overrides --workers), e.g. h100:4, or h100:2,h100:1=qwen2.5-7b (--shift-models)")
	scenario := fs.String("scenario", "default", "workload: default (steady mix with an overload burst), rise-fall (quiet, ramp, peak, fall, quiet over several minutes) or rise-fall-repeat (a rise and fall every 2.5 minutes, 10 minutes)")
	jsonOut := fs.Bool("json", false, "end with one JSON summary line on stdout")
	store := fs.String("store", "", "keep the streams in this directory so the run can be replayed")
	seed := fs.Uint64("seed", 1, "workload seed")
	rate := fs.Float64("rate", 0, "request rate per second (default: the workload's; the peak rate for rise-fall)")
	verbose := fs.Bool("v", false, "debug logging")
	scale := addAutoscaleFlags(fs, "run the controller and a local scaler over the demo fleet (workers join and drain as it decides)")
	tenants := fs.String("tenants", "", "tenant profiles JSON (default: the demo's acme critical, globex interactive, initech standard, umbrella batch)")
	sleepOnRelease := fs.Bool("sleep-on-release", false, "autoscale: put a replica past its release hold to sleep (weights to host memory, its GPU still held and counted) instead of releasing it when its level's recent returns say it is wanted again within another hold; woken in about a second before any cold start. The run then prints the weight-tier timeline")
	startTier := fs.String("start-tier", "", "autoscale: the weight tier a started replica loads from (hbm, host, page_cache, disk, remote; default disk): a what-if for the bound a faster cold start sets")
	policy := fs.String("policy", "switchyard", "the router's placement policy: switchyard, its opt-in variant switchyard-short-yield, switchyard-shared-queue (standard and batch queues priced as the engine shares its prefill steps), or a baseline ("+strings.Join(baselines.Names(), ", ")+") with its own queue and flow control; everything else, the load included, stays the same")
	if err := fs.Parse(args); err != nil {
		return err
	}
	// Refuse an unknown name before the stack starts: the router would
	// fail it only after the services are up.
	if _, err := routing.PolicyNamed(*policy, catalog.Default(), perf.NewPredictor(nil)); err != nil {
		return fmt.Errorf("--policy: %w", err)
	}
	if *duration <= 0 {
		*duration = loadgen.DefaultScenarioDuration(*scenario)
	}
	wl, err := loadgen.Scenario(*scenario, *duration, *seed)
	if err != nil {
		return err
	}
	if *rate > 0 {
		wl.Rate = *rate
	}
	logger := newLogger(*verbose)
	fleet := demoFleet(*workers)
	if *fleetFlag != "" {
		if fleet, err = parseFleet(*fleetFlag, wl.Model, "bf16"); err != nil {
			return err
		}
		if len(fleet) == 0 {
			return fmt.Errorf("--fleet %q names no worker", *fleetFlag)
		}
	}
	if *tenants == "" {
		dir, err := os.MkdirTemp("", "switchyard-demo-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(dir)
		*tenants = filepath.Join(dir, "tenants.json")
		profiles := demoTenants
		if wl.Sizes != nil {
			// Its prompts are unique by construction, so a cache could only
			// hit by mistake: the semantic cache's n-gram embedding finds
			// prompts of one length from one filler alike.
			if profiles, err = withoutCache(profiles); err != nil {
				return err
			}
		}
		if err := os.WriteFile(*tenants, profiles, 0o600); err != nil {
			return err
		}
	}
	cfg := stack.Config{StoreDir: *store, Fleet: fleet, Logger: logger, Tenants: *tenants, Policy: *policy}
	st, err := startDemoStack(ctx, scale, cfg, *sleepOnRelease, *startTier)
	if err != nil {
		return err
	}
	defer st.Close()
	nc, err := st.Connect("demo-client")
	if err != nil {
		return err
	}
	var tiers *tierWatch
	if *sleepOnRelease {
		if tiers, err = watchTiers(nc); err != nil {
			return err
		}
	}
	arrivals := wl.Generate()
	if !*jsonOut {
		fmt.Fprintf(stdout, "switchyard demo: scenario %s, policy %s, %d simulated workers %v, %d requests over %s (simulated GPUs: timings from the roofline model)\n",
			*scenario, *policy, len(fleet), fleetNames(fleet), len(arrivals), *duration)
	}
	watch := watchFleet(ctx, st.WorkerIDs, time.Second)
	// Every request is owed its answer by its deadline + 5 s; whatever has
	// none by then counts as lost.
	sum, took, err := loadgen.Run(ctx, nc, arrivals, loadgen.RunOptions{Drain: 2 * time.Minute, Logger: logger})
	if err != nil {
		return err
	}
	// Read together, so GPU-hours and the replica count cover one span.
	sum.GPUHours = st.GPUHours()
	rep := demoReport{Summary: sum, Scenario: *scenario, Policy: *policy, Fleet: watch()}
	if *scale.on {
		rep.Planner = *scale.planner
	}
	if tiers != nil {
		ts := tiers.stop()
		rep.Tiers = &ts
	}
	if !*jsonOut {
		printSummary(stdout, sum, took)
		printFleet(stdout, rep.Fleet)
		if rep.Tiers != nil {
			printTiers(stdout, *rep.Tiers)
		}
	} else {
		b, err := json.Marshal(rep)
		if err != nil {
			return err
		}
		fmt.Fprintln(stdout, string(b))
	}
	if err := st.Err(); err != nil {
		return fmt.Errorf("a service failed during the demo: %w", err)
	}
	return nil
}

// demoReport is the demo's --json line: the tally's summary with the
// scenario and what the fleet did, so fixed and autoscaled runs compare in
// one table.
type demoReport struct {
	tally.Summary
	Scenario string `json:"scenario"`
	// Policy is the router's placement policy (demo --policy).
	Policy string `json:"policy"`
	// Planner is what sized the fleet under --autoscale (demo --planner).
	Planner string     `json:"planner,omitempty"`
	Fleet   fleetStats `json:"fleet"`
	// Tiers is the sleeping tier's timeline (demo --sleep-on-release).
	Tiers *tierStats `json:"tiers,omitempty"`
}

// startDemoStack starts the stack with the autoscale flags' control, the
// sleeping tier's settings added: they need --autoscale, as nothing else
// would carry them out.
func startDemoStack(ctx context.Context, scale *autoscaleFlags, cfg stack.Config, sleepOnRelease bool, startTier string) (*stack.Stack, error) {
	if !*scale.on {
		if sleepOnRelease {
			return nil, errors.New("--sleep-on-release needs --autoscale: only the controller puts replicas to sleep")
		}
		if startTier != "" {
			return nil, errors.New("--start-tier needs --autoscale: only the scaler starts replicas")
		}
		return scale.start(ctx, cfg)
	}
	if startTier != "" && !slices.Contains(catalog.TierOrder, startTier) {
		return nil, fmt.Errorf("--start-tier %q: want one of %s", startTier, strings.Join(catalog.TierOrder, ", "))
	}
	cc, err := scale.config()
	if err != nil {
		return nil, err
	}
	cc.Control.SleepOnRelease, cc.Control.StartTier = sleepOnRelease, startTier
	cfg.Control = cc
	return stack.Start(ctx, cfg)
}

// demoTenants are the demo's tenant profiles, one per priority class:
// acme critical, globex interactive, initech standard, umbrella batch.
//
//go:embed demo_tenants.json
var demoTenants []byte

// withoutCache turns the cache off for the default profile and every
// tenant of a tenant profiles file, leaving the rest as it is.
func withoutCache(profiles []byte) ([]byte, error) {
	var doc map[string]any
	if err := json.Unmarshal(profiles, &doc); err != nil {
		return nil, fmt.Errorf("demo tenants: %w", err)
	}
	off := func(p any) {
		if m, ok := p.(map[string]any); ok {
			m["cache"] = map[string]any{"mode": "off"}
		}
	}
	off(doc["default"])
	if ts, ok := doc["tenants"].(map[string]any); ok {
		for _, p := range ts {
			off(p)
		}
	}
	return json.Marshal(doc)
}

// demoFleet mixes GPU generations so placement has real choices. The
// fourth worker (or the last of two or three) is a cheap L40S serving the
// small tier, llama-3.2-1b, where admission moves "auto" requests whose
// task a small model handles.
func demoFleet(n int) []stack.WorkerSpec {
	gens := []string{"h100", "a100-80g", "h100", "l40s", "h200", "a100-80g"}
	out := make([]stack.WorkerSpec, 0, n)
	small := 3
	if n < 4 && n > 1 {
		small = n - 1
	}
	for i := 0; i < n; i++ {
		spec := stack.WorkerSpec{GPU: gens[i%len(gens)], Model: "llama-3.1-8b", Dtype: "bf16", TP: 1}
		if i == small {
			spec = stack.WorkerSpec{GPU: "l40s", Model: "llama-3.2-1b", Dtype: "bf16", TP: 1}
		}
		out = append(out, spec)
	}
	return out
}

func fleetNames(f []stack.WorkerSpec) []string {
	out := make([]string, len(f))
	for i, w := range f {
		out[i] = w.GPU
	}
	return out
}

func printSummary(w io.Writer, s tally.Summary, took time.Duration) {
	fmt.Fprintf(w, "\nafter %s:\n", took.Round(time.Millisecond))
	fmt.Fprintf(w, "  submitted %d  completed %d  rejected %d  shed %d  failed %d  lost %d  duplicates %d\n",
		s.Submitted, s.Completed, s.Rejected, s.Shed, s.Failed, s.Lost, s.Duplicates)
	fmt.Fprintf(w, "  SLO attainment %.3f   cost per successful task $%.6f   GPU-hours provisioned %.4f   simulated %v\n", s.SLOAttainment, s.CostPerSuccessUSD, s.GPUHours, s.Simulated)
	fmt.Fprintf(w, "  cache hits %d  moved %d  workflows cancelled %d  GPU-seconds saved %.2f\n", s.CacheHits, s.Moved, s.WorkflowsCancelled, s.GPUSecondsSaved)
	if len(s.ErrorsByCode) > 0 {
		codes := slices.Sorted(maps.Keys(s.ErrorsByCode))
		fmt.Fprint(w, "  errors by code")
		for _, c := range codes {
			fmt.Fprintf(w, "  %s %d", c, s.ErrorsByCode[c])
		}
		if s.ErrorsByCode[schemas.CodeWorkflowDoomed] > 0 {
			// The default load dooms some workflows on purpose
			// (loadgen.Workload.DoomedFraction): a new user reading the
			// class attainment should know those misses are by design.
			fmt.Fprint(w, "\n    (workflow_doomed: a workflow whose deadline its steps cannot meet is cancelled before it spends GPU time;\n     the default demo load dooms a quarter of its workflows on purpose, standard-class, and their steps count as misses)")
		}
		fmt.Fprintln(w)
	}
	if len(s.CompletedByGPU) > 0 {
		gpus := make([]string, 0, len(s.CompletedByGPU))
		for g := range s.CompletedByGPU {
			gpus = append(gpus, g)
		}
		sort.Strings(gpus)
		fmt.Fprint(w, "  computed on")
		for _, g := range gpus {
			fmt.Fprintf(w, "  %s %d", g, s.CompletedByGPU[g])
		}
		fmt.Fprintln(w)
	}
	classes := make([]string, 0, len(s.SLOAttainmentByPriority))
	for c := range s.SLOAttainmentByPriority {
		classes = append(classes, c)
	}
	sort.Slice(classes, func(i, j int) bool { return schemas.PriorityRank(classes[i]) < schemas.PriorityRank(classes[j]) })
	for _, c := range classes {
		fmt.Fprintf(w, "  %-12s SLO attainment %.3f\n", c, s.SLOAttainmentByPriority[c])
	}
}

// fleetStats is what the demo fleet did over the run, sampled from the
// stack's running workers.
type fleetStats struct {
	// Started and Stopped count workers that joined and left after the
	// run began (the scaler's doing; 0 for a fixed fleet).
	Started int `json:"workers_started"`
	Stopped int `json:"workers_stopped"`
	// Replicas: running workers (loading, serving or draining);
	// ReplicasMean is time-weighted.
	ReplicasMin  int     `json:"replicas_min"`
	ReplicasMax  int     `json:"replicas_max"`
	ReplicasMean float64 `json:"replicas_mean"`
	// Timeline has a point at the start and at every change of the count.
	Timeline []fleetPoint `json:"timeline"`
}

type fleetPoint struct {
	AtSeconds float64 `json:"t_s"`
	Replicas  int     `json:"replicas"`
}

// fleetTally accumulates samples of the running workers' ids.
type fleetTally struct {
	seen    map[string]bool
	running map[string]bool
	last    time.Duration
	area    float64 // replica-seconds
	stats   fleetStats
}

// observe records the workers running at offset at (offsets increase).
func (f *fleetTally) observe(at time.Duration, ids []string) {
	now := map[string]bool{}
	for _, id := range ids {
		now[id] = true
	}
	if f.seen == nil {
		f.seen = map[string]bool{}
		for id := range now {
			f.seen[id] = true
		}
		f.running, f.last = now, at
		f.stats = fleetStats{ReplicasMin: len(ids), ReplicasMax: len(ids), Timeline: []fleetPoint{{AtSeconds: at.Seconds(), Replicas: len(ids)}}}
		return
	}
	for id := range now {
		if !f.seen[id] {
			f.seen[id] = true
			f.stats.Started++
		}
	}
	for id := range f.running {
		if !now[id] {
			f.stats.Stopped++
		}
	}
	f.area += float64(len(f.running)) * (at - f.last).Seconds()
	f.last = at
	if len(now) != len(f.running) {
		f.stats.Timeline = append(f.stats.Timeline, fleetPoint{AtSeconds: at.Seconds(), Replicas: len(now)})
	}
	f.running = now
	f.stats.ReplicasMin = min(f.stats.ReplicasMin, len(now))
	f.stats.ReplicasMax = max(f.stats.ReplicasMax, len(now))
}

// result is the stats so far; the mean covers the first to the last sample.
func (f *fleetTally) result() fleetStats {
	out := f.stats
	if span := f.last - time.Duration(out.Timeline[0].AtSeconds*float64(time.Second)); span > 0 {
		out.ReplicasMean = f.area / span.Seconds()
	} else {
		out.ReplicasMean = float64(len(f.running))
	}
	return out
}

// watchFleet samples the running workers every period until the returned
// function is called; that takes a last sample and returns the stats.
func watchFleet(ctx context.Context, running func() []string, period time.Duration) func() fleetStats {
	var (
		mu sync.Mutex
		f  fleetTally
	)
	start := time.Now()
	sample := func() {
		mu.Lock()
		defer mu.Unlock()
		f.observe(time.Since(start), running())
	}
	sample()
	wctx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(period)
		defer t.Stop()
		for {
			select {
			case <-wctx.Done():
				return
			case <-t.C:
				sample()
			}
		}
	}()
	return func() fleetStats {
		stop()
		<-done
		sample()
		mu.Lock()
		defer mu.Unlock()
		return f.result()
	}
}

func printFleet(w io.Writer, f fleetStats) {
	fmt.Fprintf(w, "  fleet: replicas min %d  mean %.2f  max %d   workers started %d  stopped %d\n",
		f.ReplicasMin, f.ReplicasMean, f.ReplicasMax, f.Started, f.Stopped)
}
