package main

import (
	"context"
	_ "embed"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"time"

	"github.com/switchyard-ai/switchyard/internal/stack"
	"github.com/switchyard-ai/switchyard/loadgen"
	"github.com/switchyard-ai/switchyard/loadgen/tally"
	"github.com/switchyard-ai/switchyard/schemas"
)

func runDemo(ctx context.Context, args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("demo", flag.ContinueOnError)
	duration := fs.Duration("duration", 15*time.Second, "how long to generate load")
	workers := fs.Int("workers", 4, "simulated workers (mixed GPU generations)")
	jsonOut := fs.Bool("json", false, "end with one JSON summary line on stdout")
	store := fs.String("store", "", "keep the streams in this directory so the run can be replayed")
	seed := fs.Uint64("seed", 1, "workload seed")
	rate := fs.Float64("rate", 0, "steady request rate per second (default: the workload's)")
	verbose := fs.Bool("v", false, "debug logging")
	autoscale := fs.Bool("autoscale", false, "run the controller and a local scaler over the demo fleet (workers join and drain as it decides)")
	tenants := fs.String("tenants", "", "tenant profiles JSON (default: the demo's acme critical, globex interactive, initech standard, umbrella batch)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	logger := newLogger(*verbose)
	fleet := demoFleet(*workers)
	if *tenants == "" {
		dir, err := os.MkdirTemp("", "switchyard-demo-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(dir)
		*tenants = filepath.Join(dir, "tenants.json")
		if err := os.WriteFile(*tenants, demoTenants, 0o600); err != nil {
			return err
		}
	}
	cfg := stack.Config{StoreDir: *store, Fleet: fleet, Logger: logger, Tenants: *tenants}
	if *autoscale {
		cfg.Control = &stack.ControlConfig{Min: 1}
	}
	st, err := stack.Start(ctx, cfg)
	if err != nil {
		return err
	}
	defer st.Close()
	nc, err := st.Connect("demo-client")
	if err != nil {
		return err
	}
	wl := loadgen.DefaultWorkload(*duration, *seed)
	if *rate > 0 {
		wl.Rate = *rate
	}
	arrivals := wl.Generate()
	if !*jsonOut {
		fmt.Fprintf(stdout, "switchyard demo: %d simulated workers %v, %d requests over %s (simulated GPUs: timings from the roofline model)\n",
			len(fleet), fleetNames(fleet), len(arrivals), *duration)
	}
	// Every request is owed its answer by its deadline + 5 s; whatever has
	// none by then counts as lost.
	sum, took, err := loadgen.Run(ctx, nc, arrivals, loadgen.RunOptions{Drain: 2 * time.Minute, Logger: logger})
	if err != nil {
		return err
	}
	sum.GPUHours = st.GPUHours()
	if !*jsonOut {
		printSummary(stdout, sum, took)
	} else {
		b, err := json.Marshal(sum)
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

// demoTenants are the demo's tenant profiles, one per priority class:
// acme critical, globex interactive, initech standard, umbrella batch.
//
//go:embed demo_tenants.json
var demoTenants []byte

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
