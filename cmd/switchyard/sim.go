package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/switchyard-ai/switchyard/internal/adapter/config"
	"github.com/switchyard-ai/switchyard/internal/core/catalog"
	"github.com/switchyard-ai/switchyard/internal/core/control"
	"github.com/switchyard-ai/switchyard/internal/core/perf"
	"github.com/switchyard-ai/switchyard/internal/driver/sim"
	"github.com/switchyard-ai/switchyard/loadgen"
	"github.com/switchyard-ai/switchyard/loadgen/traces"
)

// runSim is `switchyard sim`: replay a trace against a simulated fleet under
// several placement policies and compare them.
func runSim(ctx context.Context, args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("sim", flag.ContinueOnError)
	trace := fs.String("trace", "", "trace file (mooncake JSONL or azure CSV; servegen: servegen_<model>_client_rates.csv files, comma-separated, with servegen_client_length_stats.csv beside them)")
	format := fs.String("format", "mooncake", "mooncake | azure | servegen | agentic | shared-prefix | rise-fall | rise-fall-repeat (the last four are generated; --trace unused; rise-fall and rise-fall-repeat are the demo's scenarios over --duration, default 6m and 10m)")
	sgRate := fs.Float64("servegen-rate", 1, "servegen: multiply every client's published rate (thins the workload, keeps its diurnal shape)")
	sgStart := fs.Duration("servegen-start", 0, "servegen: offset into the rate data to start at")
	sgLengths := fs.String("servegen-lengths", "", "servegen: length statistics file (default: servegen_client_length_stats.csv beside the first rates file)")
	sgModels := fs.String("servegen-models", "", "servegen: the catalog model serving each ServeGen pool, e.g. m-large=llama-3.1-70b,mm-image=qwen2.5-7b (pools not named are served by --model; give pools of other models GPUs with --gpus h100:4@MODEL)")
	gpus := fs.String("gpus", "h100:16", "replicas per GPU type: gpu:count[:tp][@role][@model],... (role prefill or decode fixes a pool's phases: h100:4@prefill,a100-80g:4@decode)")
	link := fs.String("link", "", "every worker's network link for KV transfers (a catalog link: "+strings.Join(catalog.LinkNames(), ", ")+"); with one the router may split a request's prefill from its decode; pools with a fixed role default to "+sim.DefaultRoleLink)
	model := fs.String("model", "llama-3.1-8b", "catalog model")
	policies := fs.String("policies", "round-robin,least-loaded,llm-d,llm-d-slo,dynamo,sglang,switchyard", "comma-separated policies, or 'all'")
	rate := fs.Float64("rate-scale", 1, "multiply the trace's arrival rate")
	duration := fs.Duration("duration", 0, "use only arrivals in the first D of the (scaled) trace; 0 = all")
	limit := fs.Int("limit", 0, "read only the first N trace rows")
	seed := fs.Int64("seed", 1, "seed for jitter, tenant rules and generators")
	jsonOut := fs.Bool("json", false, "print a JSON summary as the last line")
	htmlOut := fs.String("html", "", "write a self-contained HTML report here")
	sweep := fs.String("sweep", "", "comma-separated rate scales to sweep, e.g. 0.5,1,2,4")
	kvBlocks := fs.Int("kv-blocks", 0, "override each replica's KV capacity in 16-token blocks")
	heartbeat := fs.Duration("heartbeat", time.Second, "worker heartbeat period")
	drain := fs.Duration("drain", 5*time.Minute, "run on after the last arrival before counting unfinished requests failed")
	workflowRate := fs.Float64("workflows-per-sec", 0.5, "agentic: workflow start rate")
	genDur := fs.Duration("gen-duration", 10*time.Minute, "agentic: generation window")
	stage := fs.Duration("stage", 60*time.Second, "shared-prefix: duration of each ladder stage")
	parallel := fs.Int("parallel", runtime.GOMAXPROCS(0), "runs in parallel")
	autoscale := fs.Bool("autoscale", false, "also run each policy with the control loop scaling the fleet (internal/core/control in virtual time); --gpus is then the starting fleet")
	autoscaleOnly := fs.Bool("autoscale-only", false, "autoscale: run only the autoscaled variants, not each policy on the fixed starting fleet as well")
	asMin := fs.Int("autoscale-min", 1, "autoscale: fewest replicas per pool")
	asMax := fs.Int("autoscale-max", 64, "autoscale: most replicas per pool")
	ctlInterval := fs.Duration("control-interval", 2*time.Second, "autoscale: controller decision interval")
	asUtil := fs.Float64("target-utilization", 0, "autoscale: share of a replica's modelled capacity the scaler plans to use (0: the controller's default, 1 — its burst and noise headroom is planned explicitly)")
	asWarmth := fs.Bool("autoscale-warmth", false, "autoscale: also apply the controller's sleep/wake/unload decisions")
	asRoles := fs.Bool("assign-roles", false, "autoscale: let the controller turn role-both workers with a link into prefill workers, or back, as the mix's uncached prompts grow or shrink (internal/core/control/phases.go)")
	fixedError := fs.Bool("fixed-error", false, "keep the placer's prediction error at its configured 25 % instead of the spread per GPU kind and phase the router learns from results (for A/B runs)")
	asSleepOnRelease := fs.Bool("sleep-on-release", false, "autoscale: put a replica past its release hold to sleep (weights to host memory, its GPU still counted) instead of releasing it when the forecast asks for it again within another hold; implies --autoscale-warmth")
	asStartTier := fs.String("start-tier", "", "autoscale: the weight tier a started replica loads from (hbm, host, page_cache, disk, remote; default disk): a what-if for the bound a faster cold start sets")
	shiftModels := fs.Bool("shift-models", false, "GPUs change model: on a fleet serving several models, each GPU type's GPUs are shared by its models and the controller moves a GPU from a model whose demand fell to one whose demand rose (drain, sleep in host memory, wake) instead of starting and releasing replicas; runs the autoscaled variants, and with --capacity every probe, on that fixed fleet (internal/core/control/shift.go)")
	parkedTier := fs.String("parked-tier", "", "shift-models: where each worker's other models sit at the start (host, page_cache, disk; default host: started once and put to sleep)")
	catFile := fs.String("catalog", "", "JSON file merged over the built-in catalog (GPUs, models, weight tiers)")
	asDownWindow := fs.Duration("scale-down-window", 0, "autoscale: scale-down stabilization window (0: the controller's default, 4 lead times)")
	asHeadroom := fs.Float64("headroom-z", 0, "autoscale: arrival-noise headroom in Poisson standard deviations (0: the controller's default; negative: none)")
	asHeadroomAll := fs.Bool("headroom-all", false, "autoscale: buy burst and noise headroom for every class, not only the high classes' share of the traffic")
	asPlanFor := fs.String("autoscale-for", "all", "autoscale: size the fleet to serve all classes, or only the high classes (critical, interactive) with the rest on spare capacity: all|high")
	asDamping := fs.Float64("trend-damping", 0, "autoscale: forecast trend damping per interval (0: the controller's default; 1: undamped)")
	planners := fs.String("planner", control.PlannerSwitchyard, "autoscale: comma-separated planners sizing the fleet, each run on the same fleet: "+strings.Join(sim.PlannerNames(), "|"))
	scenario := fs.String("scenario", "", "scenario file (JSON, or YAML by extension; loadgen/scenarios/): fleet, tenants, trace and faults in one file, instead of --gpus, --model, --trace and --format")
	capacity := fs.Bool("capacity", false, "search each policy's capacity at SLO instead of one run: the highest rate scale with overall attainment ≥ 0.90 and with critical and interactive each ≥ 0.99, and the smallest fleet meeting both at 1×")
	capTol := fs.Float64("capacity-tolerance", 0.05, "capacity: end the bisection when the failing scale is within 1+this of the passing one")
	capMax := fs.Float64("capacity-max-scale", 64, "capacity: highest rate scale searched")
	capFleet := fs.Int("capacity-max-fleet", 4, "capacity: search the smallest fleet up to this multiple of the given fleet; 0 skips the fleet search")
	capSeeds := fs.Int("seeds", 3, "capacity: search with this many seeds (the scenario's seed or --seed, then the next ones: each draws its own tenants, arrivals and jitter) and report the median and range")
	capMinHigh := fs.Int("capacity-min-high", 1000, "capacity: lengthen each probe's window until it holds this many critical and interactive requests, or to the whole trace (negative: the window as given)")
	decisionsOut := fs.String("decisions", "", "autoscale: write every control decision here, one JSON object a line: policy, at_s (virtual seconds since the first arrival), pools (arrival_rate, forecast, capacity_per_replica, backlog, current, raw and desired replicas, reason) and changes")
	outcomesOut := fs.String("outcomes", "", "write every request's outcome here, one JSON object a line (policy, id, tenant, class, submitted and done in seconds of virtual time, status, code, SLO met, TTFT, worker, attempts)")
	cheapest := fs.String("cheapest-fleet", "", "with --capacity: instead of the capacity search, find the cheapest fleet ($/h) over these GPU generations (comma-separated) that serves the trace at 1× within both bars (majority of --seeds), by family: each generation alone, a prefill pool of one and a decode pool of another (roles fixed), and two generations with roles left to the router; the first policy of --policies places")
	cheapestMax := fs.Int("cheapest-max", 8, "cheapest-fleet: most replicas in a candidate fleet")
	diagnose := fs.Float64("diagnose", 0, "capacity: also break each policy's outcomes down by class and GPU type at this rate scale (queue wait, TTFT and TPOT misses)")
	fs.SetOutput(stdout)
	if err := fs.Parse(args); err != nil {
		return err
	}
	seedSet := false
	fs.Visit(func(f *flag.Flag) { seedSet = seedSet || f.Name == "seed" })
	if *scenario != "" {
		var clash []string
		fs.Visit(func(f *flag.Flag) {
			switch f.Name {
			case "gpus", "model", "trace", "format", "limit", "kv-blocks", "servegen-rate", "servegen-start", "servegen-lengths", "servegen-models", "workflows-per-sec", "gen-duration", "stage":
				clash = append(clash, "--"+f.Name)
			}
		})
		if len(clash) > 0 {
			return fmt.Errorf("--scenario describes the fleet and trace itself; drop %s (or edit the scenario)", strings.Join(clash, ", "))
		}
	}
	highOnly, err := planHighOnly(*asPlanFor)
	if err != nil {
		return err
	}
	specs, err := sim.ParseGPUs(*gpus)
	if err != nil && *scenario == "" {
		return err
	}
	names := strings.Split(*policies, ",")
	if *policies == "all" {
		names = sim.PolicyNames()
	}
	pred := perf.NewPredictor(nil)
	for _, n := range names {
		if _, err := sim.NewPolicy(strings.TrimSpace(n), pred); err != nil {
			return err
		}
	}
	var plannerList []string
	for _, p := range strings.Split(*planners, ",") {
		if p = strings.TrimSpace(p); p != "" {
			if !slices.Contains(sim.PlannerNames(), p) {
				return fmt.Errorf("--planner %q: want one of %v", p, sim.PlannerNames())
			}
			plannerList = append(plannerList, p)
		}
	}
	if len(plannerList) == 0 {
		plannerList = []string{control.PlannerSwitchyard}
	}
	var tr *traces.Trace
	var cfg sim.Config
	window := *duration
	fleetText := fmt.Sprintf("fleet %s, model %s", *gpus, *model)
	if *scenario != "" {
		ls, err := sim.ReadScenarioFile(*scenario)
		if err != nil {
			return err
		}
		if seedSet && ls.Scenario.Seed != *seed {
			// An explicit --seed draws the scenario's tenants, arrivals
			// and jitter anew, as each further seed of --seeds does.
			file := ls.File
			ls.Scenario.Seed = *seed
			if ls, err = ls.Scenario.Load(filepath.Dir(*scenario)); err != nil {
				return fmt.Errorf("scenario %s, seed %d: %w", *scenario, *seed, err)
			}
			ls.File = file
		}
		tr, cfg = ls.Trace, ls.Config
		if window == 0 {
			window = ls.Window
		}
		cfg.HeartbeatInterval = *heartbeat
		if ls.Scenario.Drain == "" {
			cfg.Drain = *drain
		}
		fleetText = "scenario " + ls.File + ": fleet " + sim.DescribePools(cfg.GPUs) + ", model " + cfg.Model
		if len(cfg.Faults) > 0 {
			fleetText += fmt.Sprintf(", %d faults", len(cfg.Faults))
		}
	} else {
		sg := traces.ServeGenConfig{Seed: *seed, Start: *sgStart, Duration: *duration, RateScale: *sgRate}
		tr, err = loadTrace(*format, *trace, traces.ReadOptions{Limit: *limit, Seed: *seed}, *seed, *workflowRate, *genDur, *stage, sg, *sgLengths, *sgModels)
		if err != nil {
			return err
		}
		cfg = sim.Config{GPUs: specs, Model: *model, KVBlocks: *kvBlocks, HeartbeatInterval: *heartbeat, Drain: *drain, Seed: *seed}
	}
	cfg.FixedError = *fixedError
	if *link != "" {
		if _, ok := catalog.LinkNamed(*link); !ok {
			return fmt.Errorf("--link %q: want one of %s", *link, strings.Join(catalog.LinkNames(), ", "))
		}
		cfg.Link = *link
	}
	if *catFile != "" {
		cat, err := config.LoadCatalog(*catFile)
		if err != nil {
			return err
		}
		cfg.Catalog = cat
	}
	if *shiftModels && !*capacity {
		// The fleet's GPUs change model under the controller: that is an
		// autoscaled run.
		*autoscale = true
	}
	if *capacity {
		if *capSeeds < 1 {
			return fmt.Errorf("--seeds %d: want 1 or more", *capSeeds)
		}
		// The 1× of a capacity search is the first window of the trace at
		// --rate-scale (a scenario's own rate_scale already applied). Each
		// seed draws the trace and the fleet's jitter anew, as the first
		// did; the first seed is the scenario's (or --seed).
		first := cfg.Seed
		if first == 0 {
			first = 1
		}
		runs := []sim.CapacityRun{{Seed: first, Config: cfg, Trace: tr.Scale(*rate), Window: window}}
		for k := int64(1); k < int64(*capSeeds); k++ {
			seed := first + k
			var (
				str  *traces.Trace
				scfg sim.Config
			)
			if *scenario != "" {
				ls, err := sim.ReadScenarioFile(*scenario)
				if err != nil {
					return err
				}
				ls.Scenario.Seed = seed
				again, err := ls.Scenario.Load(filepath.Dir(*scenario))
				if err != nil {
					return fmt.Errorf("scenario %s, seed %d: %w", *scenario, seed, err)
				}
				str, scfg = again.Trace, again.Config
				scfg.HeartbeatInterval = cfg.HeartbeatInterval
				scfg.Drain = cfg.Drain
				scfg.Link = cfg.Link
			} else {
				sg := traces.ServeGenConfig{Seed: seed, Start: *sgStart, Duration: *duration, RateScale: *sgRate}
				if str, err = loadTrace(*format, *trace, traces.ReadOptions{Limit: *limit, Seed: seed}, seed, *workflowRate, *genDur, *stage, sg, *sgLengths, *sgModels); err != nil {
					return fmt.Errorf("seed %d: %w", seed, err)
				}
				scfg = cfg
				scfg.Seed = seed
			}
			runs = append(runs, sim.CapacityRun{Seed: seed, Config: scfg, Trace: str.Scale(*rate), Window: window})
		}
		if *shiftModels || *autoscale {
			// Every probe runs the controller over the probe's fleet: with
			// --shift-models its GPUs change model (the fleet search
			// resizes the inventory), else it scales each pool within
			// --autoscale-min and --autoscale-max.
			for i := range runs {
				as := &sim.Autoscale{ShiftModels: *shiftModels, ParkedTier: *parkedTier, Min: *asMin, Max: *asMax}
				as.Control.Interval = *ctlInterval
				runs[i].Config.Autoscale = as
			}
			if *shiftModels {
				fleetText += ", GPUs change model (--shift-models)"
			} else {
				fleetText += fmt.Sprintf(", autoscaled (--autoscale, %d–%d replicas per pool)", *asMin, *asMax)
			}
		}
		var trimmed []string
		for _, n := range names {
			trimmed = append(trimmed, strings.TrimSpace(n))
		}
		if *cheapest != "" {
			return runCheapest(ctx, stdout, runs, trimmed[0], strings.Split(*cheapest, ","), *cheapestMax, cfg.Link, *jsonOut)
		}
		return runCapacity(ctx, stdout, runs, trimmed, fleetText, capacityOptions{
			search: sim.CapacitySearch{Tolerance: *capTol, MaxScale: *capMax, MaxFleetFactor: *capFleet, NoFleet: *capFleet == 0, Parallel: *parallel,
				MinHighRequests: *capMinHigh},
			diagnose: *diagnose, json: *jsonOut, progress: os.Stderr,
		})
	}
	scales := []float64{*rate}
	if *sweep != "" {
		scales = scales[:0]
		for _, s := range strings.Split(*sweep, ",") {
			x, err := strconv.ParseFloat(strings.TrimSpace(s), 64)
			if err != nil || x <= 0 {
				return fmt.Errorf("bad --sweep value %q", s)
			}
			scales = append(scales, x)
		}
	}
	st := tr.Window(window).Summarise() // the first window, as the runs see it at 1×
	fmt.Fprintf(stdout, "trace %s: %d requests over %v (%.2f req/s), mean prompt %.0f, mean output %.0f, ideal prefix hit %.1f %%\n",
		tr.Name, st.Requests, st.Span.Round(time.Second), st.RatePerSec, st.MeanPrompt, st.MeanOutput, 100*st.IdealHitTokens)
	fmt.Fprintln(stdout, fleetText)

	// Each policy runs on the fixed fleet and, with --autoscale, again
	// with the controller sizing it, so both compare in one table.
	type variant struct {
		policy  string
		auto    bool
		planner string
	}
	var variants []variant
	for _, n := range names {
		if !*autoscale || !*autoscaleOnly {
			variants = append(variants, variant{strings.TrimSpace(n), false, ""})
		}
		if *autoscale {
			for _, p := range plannerList {
				variants = append(variants, variant{strings.TrimSpace(n), true, p})
			}
		}
	}
	type job struct{ si, pi int }
	points := make([]sim.SweepPoint, len(scales))
	var jobs []job
	for si, s := range scales {
		points[si] = sim.SweepPoint{Scale: s, Results: make([]*sim.Result, len(variants))}
		for pi := range variants {
			jobs = append(jobs, job{si, pi})
		}
	}
	outcomes, closeOutcomes, err := createJSONLines(*outcomesOut)
	if err != nil {
		return fmt.Errorf("outcomes: %w", err)
	}
	defer closeOutcomes()
	decisions, closeDecisions, err := createJSONLines(*decisionsOut)
	if err != nil {
		return fmt.Errorf("decisions: %w", err)
	}
	defer closeDecisions()
	errs := make([]error, len(jobs))
	ch := make(chan int)
	var wg sync.WaitGroup
	for k := 0; k < max(*parallel, 1); k++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range ch {
				jb := jobs[j]
				t := tr.Scale(points[jb.si].Scale).Window(window)
				v := variants[jb.pi]
				pol, err := sim.NewPolicy(v.policy, perf.NewPredictor(nil))
				c := cfg
				if v.auto {
					pol.Name += "+autoscale"
					if v.planner != control.PlannerSwitchyard {
						pol.Name += ":" + v.planner
					}
					c.Autoscale = &sim.Autoscale{Min: *asMin, Max: *asMax, Warmth: *asWarmth, Planner: v.planner}
					c.Autoscale.Control.Interval = *ctlInterval
					c.Autoscale.Control.TargetUtilization = *asUtil
					c.Autoscale.Control.DownWindow = *asDownWindow
					c.Autoscale.Control.HeadroomZ = *asHeadroom
					c.Autoscale.Control.HeadroomForAll = *asHeadroomAll
					c.Autoscale.Control.PlanHighOnly = highOnly
					c.Autoscale.Control.TrendDamping = *asDamping
					c.Autoscale.Control.SleepOnRelease = *asSleepOnRelease
					c.Autoscale.Control.StartTier = *asStartTier
					c.Autoscale.Control.AssignRoles = *asRoles
					c.Autoscale.ShiftModels, c.Autoscale.ParkedTier = *shiftModels, *parkedTier
					if decisions != nil {
						c.Autoscale.OnDecision = decisions.decision(pol.Name, points[jb.si].Scale)
					}
				}
				if outcomes != nil && err == nil {
					c.OnResolve = outcomes.record(pol.Name, points[jb.si].Scale)
				}
				if err == nil {
					points[jb.si].Results[jb.pi], err = sim.Run(c, t, pol)
				}
				errs[j] = err
			}
		}()
	}
	for j := range jobs {
		if ctx.Err() != nil {
			break
		}
		ch <- j
	}
	close(ch)
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return err
	}
	if ctx.Err() != nil {
		return ctx.Err()
	}
	for _, p := range points {
		if len(points) > 1 {
			fmt.Fprintf(stdout, "\nrate scale %g×\n", p.Scale)
		}
		printTable(stdout, p.Results)
		printAutoscale(stdout, p.Results)
	}
	main := points[len(points)-1].Results
	for _, p := range points {
		if p.Scale == *rate {
			main = p.Results
		}
	}
	if len(points) > 1 {
		fmt.Fprintln(stdout, "\ncapacity at 90 % SLO attainment (highest swept scale that met it):")
		for _, r := range points[0].Results {
			s, g := sim.Capacity(points, r.Name, 0.9)
			fmt.Fprintf(stdout, "  %-24s %5g×  goodput/GPU-h %.1f\n", r.Name, s, g)
		}
	}
	if *htmlOut != "" {
		f, err := os.Create(*htmlOut)
		if err != nil {
			return err
		}
		rep := sim.Report{Title: "Switchyard simulation: " + tr.Name, Command: "switchyard sim " + strings.Join(args, " "), Rules: tr.Rules, Results: main}
		if len(points) > 1 {
			rep.Sweep = points
		}
		if err := sim.WriteHTML(f, rep); err != nil {
			f.Close()
			return err
		}
		if err := f.Close(); err != nil {
			return err
		}
		// On stderr: with --json, stdout must end with the JSON object.
		where, _ := filepath.Abs(*htmlOut)
		fmt.Fprintf(os.Stderr, "report: %s\n", where)
	}
	if *jsonOut {
		out := struct {
			Trace    string           `json:"trace"`
			Policies []*sim.Result    `json:"policies"`
			Sweep    []sim.SweepPoint `json:"sweep,omitempty"`
		}{Trace: tr.Name, Policies: main}
		if len(points) > 1 {
			out.Sweep = points
		}
		b, err := json.Marshal(out)
		if err != nil {
			return err
		}
		fmt.Fprintln(stdout, string(b))
	} else {
		fmt.Fprintln(stdout, "\nrules:")
		for _, r := range tr.Rules {
			fmt.Fprintln(stdout, "  "+r)
		}
	}
	return nil
}

func loadTrace(format, path string, o traces.ReadOptions, seed int64, wfRate float64, genDur, stage time.Duration, sg traces.ServeGenConfig, sgLengths, sgModels string) (*traces.Trace, error) {
	switch format {
	case "servegen":
		if path == "" {
			return nil, errors.New("--trace is required for --format servegen: one or more servegen_<model>_client_rates.csv, comma-separated")
		}
		tr, err := traces.ReadServeGenFiles(path, sgLengths, sg)
		if err != nil {
			return nil, err
		}
		// ServeGen names its pools (m-large, deepseek-r1, mm-image), not
		// catalog models: each request goes to the model its pool maps to,
		// "" (the run's --model) where none is given.
		to := map[string]string{}
		for _, kv := range strings.Split(sgModels, ",") {
			if kv = strings.TrimSpace(kv); kv == "" {
				continue
			}
			k, v, ok := strings.Cut(kv, "=")
			if !ok || strings.TrimSpace(k) == "" || strings.TrimSpace(v) == "" {
				return nil, fmt.Errorf("--servegen-models %q: want a comma-separated list of pool=model", kv)
			}
			to[strings.TrimSpace(k)] = strings.TrimSpace(v)
		}
		for i := range tr.Requests {
			tr.Requests[i].Model = to[tr.Requests[i].Model]
		}
		return tr, nil
	case "mooncake", "azure":
		if path == "" {
			return nil, fmt.Errorf("--trace is required for --format %s", format)
		}
		if format == "mooncake" {
			return traces.ReadMooncakeFile(path, o)
		}
		return traces.ReadAzureFile(path, o)
	case "agentic":
		return traces.Agentic(traces.AgenticConfig{Seed: seed, Duration: genDur, WorkflowsPerSec: wfRate}), nil
	case "shared-prefix", "llm-d":
		return traces.SharedPrefix(traces.SharedPrefixConfig{Seed: seed, StageDuration: stage}), nil
	case "rise-fall", "rise-fall-repeat":
		// The demo's scenarios, drawn by the demo's own code: --duration
		// is the demo's (default 6 and 10 min), --seed its workload seed.
		d := sg.Duration
		if d <= 0 {
			d = loadgen.DefaultScenarioDuration(format)
		}
		w, err := loadgen.Scenario(format, d, uint64(seed))
		if err != nil {
			return nil, err
		}
		return w.Trace(format)
	}
	return nil, fmt.Errorf("unknown --format %q (want mooncake, azure, servegen, agentic, shared-prefix, rise-fall or rise-fall-repeat)", format)
}

// printAutoscale sets each autoscaled run beside the fixed fleet: GPU-hours
// and the high-priority classes' attainment, the two figures the control
// loop trades.
func printAutoscale(w io.Writer, rs []*sim.Result) {
	var any bool
	for _, r := range rs {
		any = any || r.Autoscale != nil
	}
	if !any {
		return
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "policy\tGPU-h\tcritical\tinteractive\tstandard\tbatch\treplicas min/mean/max\tstarted\tretired\tchanges\t")
	for _, r := range rs {
		reps, started, retired, changes := "fixed", "", "", ""
		if a := r.Autoscale; a != nil {
			reps = fmt.Sprintf("%d/%.2f/%d", a.MinReplicas, a.MeanReplicas, a.MaxReplicas)
			started, retired = strconv.Itoa(a.Started), strconv.Itoa(a.Retired)
			var kv []string
			for _, k := range []string{"replicas", "spec", "budget", "warmth", "shed"} {
				if a.Changes[k] > 0 {
					kv = append(kv, fmt.Sprintf("%s %d", k, a.Changes[k]))
				}
			}
			changes = strings.Join(kv, ", ")
		}
		cls := func(c string) string {
			cr, ok := r.ByPriority[c]
			if !ok {
				return "-"
			}
			return fmt.Sprintf("%.4f", cr.SLOAttainment)
		}
		fmt.Fprintf(tw, "%s\t%.3f\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t\n", r.Name, r.GPUHours,
			cls("critical"), cls("interactive"), cls("standard"), cls("batch"), reps, started, retired, changes)
	}
	tw.Flush()
}

func printTable(w io.Writer, rs []*sim.Result) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "policy\treqs\tSLO\ttasks ok\tgoodput/s\tgood/GPU-h\t$/success\tTTFT p50\tTTFT p90\tTTFT p99\tITL p50\tITL p99\thit\tshed\tfailed\twasted GPU-s\twall\t")
	for _, r := range rs {
		fmt.Fprintf(tw, "%s\t%d\t%.3f\t%d/%d\t%.3f\t%.1f\t%.5f\t%.0f\t%.0f\t%.0f\t%.1f\t%.1f\t%.3f\t%d\t%d\t%.0f\t%.1fs\t\n",
			r.Name, r.Requests, r.SLOAttainment, r.TasksSucceeded, r.Tasks, r.GoodputRPS, r.GoodputPerGPUHour, r.CostPerSuccessUSD,
			r.TTFTP50ms, r.TTFTP90ms, r.TTFTP99ms, r.ITLP50ms, r.ITLP99ms, r.PrefixHitRate, r.Shed, r.Failed, r.WastedGPUSeconds, r.WallSeconds)
	}
	tw.Flush()
}

// planHighOnly reads --autoscale-for: which classes the autoscaler sizes
// the fleet to serve.
func planHighOnly(v string) (bool, error) {
	switch v {
	case "", "all":
		return false, nil
	case "high":
		return true, nil
	}
	return false, fmt.Errorf("--autoscale-for %q: want all or high", v)
}
