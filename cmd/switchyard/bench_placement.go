package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"runtime"
	"runtime/pprof"
	"slices"
	"time"

	"github.com/switchyard-ai/switchyard/internal/core/perf"
	"github.com/switchyard-ai/switchyard/internal/core/placement"
	"github.com/switchyard-ai/switchyard/internal/core/stats"
)

// runBenchPlacement measures one placement decision over a synthetic fleet:
// per-call latency percentiles (each call timed), allocations per call and
// the heap the fleet view and prefix index occupy. By default it uses
// placement.BenchCost, a linear stand-in for the roofline cost model, so the
// figures measure the placer, not the predictor; --cost roofline puts
// internal/core/perf's predictor in, for what a live placement costs.
//
// The timed calls cycle through 1,024 requests, so each request is timed
// about ops/1024 times; best_p50_us and best_p99_us are the percentiles of
// each request's fastest time. On a shared machine the plain p99 is mostly
// the scheduler preempting the benchmark, while the best-of figures show
// what the slowest requests themselves cost; load_avg_1m (Linux, -1
// elsewhere) says how busy the machine was.
func runBenchPlacement(ctx context.Context, args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("bench placement", flag.ContinueOnError)
	workers := fs.Int("workers", 1000, "workers in the synthetic fleet")
	blocks := fs.Int("blocks", 100000, "(worker, block) entries in the prefix index")
	ops := fs.Int("ops", 20000, "placements to time")
	seed := fs.Uint64("seed", 1, "synthetic fleet seed")
	asJSON := fs.Bool("json", false, "print a JSON summary as the last line")
	cpuProfile := fs.String("cpuprofile", "", "write a CPU profile of the timed placements (not the fleet's build or warm-up) here")
	costName := fs.String("cost", "linear", "cost model: linear (placement.BenchCost, the default: measures the placer) or roofline (internal/core/perf's predictor, as the router uses; the fleet's names mapped to the catalog)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *workers < 1 || *blocks < 0 || *ops < 1 {
		return fmt.Errorf("need --workers >= 1, --blocks >= 0, --ops >= 1")
	}
	var cost placement.CostModel = placement.BenchCost()
	var rename map[string]string
	switch *costName {
	case "linear":
	case "roofline":
		cost = perf.NewPredictor(nil)
		rename = map[string]string{"llama-8b": "llama-3.1-8b", "llama-70b": "llama-3.1-70b", "a100": "a100-80g"}
	default:
		return fmt.Errorf("--cost %q: want linear or roofline", *costName)
	}

	var ms runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&ms)
	heapBefore := ms.HeapAlloc
	now := time.Now()
	f, reqs := placement.Synthetic(placement.SyntheticConfig{Workers: *workers, Blocks: *blocks, Requests: 1024, Seed: *seed, Rename: rename}, now)
	p := placement.New(cost, placement.Options{})

	// Warm the placer's scratch (its copy of the fleet included) so steady
	// state is measured, and counted in the heap.
	placed, skipped := 0, 0
	for i := range reqs {
		d := p.Place(f, &reqs[i], now)
		if d.OK() {
			placed++
		}
		skipped += d.Skipped
	}
	load := loadAverage()
	runtime.GC()
	runtime.ReadMemStats(&ms)
	heapMB := float64(ms.HeapAlloc) / (1 << 20)
	fleetMB := float64(ms.HeapAlloc-min(heapBefore, ms.HeapAlloc)) / (1 << 20)
	lat := make([]time.Duration, *ops)
	if *cpuProfile != "" {
		stop, err := startCPUProfile(*cpuProfile)
		if err != nil {
			return err
		}
		defer stop()
	}
	runtime.ReadMemStats(&ms)
	mallocs := ms.Mallocs
	for i := range lat {
		if i&1023 == 0 && ctx.Err() != nil {
			return ctx.Err()
		}
		t := time.Now()
		p.Place(f, &reqs[i%len(reqs)], now)
		lat[i] = time.Since(t)
	}
	runtime.ReadMemStats(&ms)
	allocs := float64(ms.Mallocs-mallocs) / float64(len(lat))
	if *cpuProfile != "" {
		pprof.StopCPUProfile()
	}
	best := make([]time.Duration, min(len(reqs), len(lat)))
	for i, d := range lat {
		if b := &best[i%len(reqs)]; i < len(reqs) || d < *b {
			*b = d
		}
	}
	slices.Sort(lat)
	slices.Sort(best)
	micros := func(s []time.Duration) []float64 {
		out := make([]float64, len(s))
		for i, d := range s {
			out[i] = float64(d.Nanoseconds()) / 1e3
		}
		return out
	}
	latUs, bestUs := micros(lat), micros(best) // sorted, as stats.Quantile needs
	us := func(q float64) float64 { return stats.Quantile(latUs, q) }
	bestQ := func(q float64) float64 { return stats.Quantile(bestUs, q) }

	fmt.Fprintf(stdout, "placement over %d workers, %d indexed blocks (%d distinct), %d placements\n",
		f.Len(), f.Prefix().Entries(), f.Prefix().Blocks(), len(lat))
	fmt.Fprintf(stdout, "  latency  p50 %.1f µs  p99 %.1f µs  max %.1f µs\n", us(0.50), us(0.99), us(1))
	fmt.Fprintf(stdout, "  each request's fastest of %d: p50 %.1f µs  p99 %.1f µs (load average %.2f)\n",
		(len(lat)+len(best)-1)/len(best), bestQ(0.50), bestQ(0.99), load)
	fmt.Fprintf(stdout, "  pruning  %.0f of %d workers skipped by their lower bound per placement\n",
		float64(skipped)/float64(len(reqs)), f.Len())
	fmt.Fprintf(stdout, "  allocs   %.3f per placement\n", allocs)
	fmt.Fprintf(stdout, "  heap     %.1f MB after building and warming up (fleet view, index and placer %.1f MB)\n", heapMB, fleetMB)
	fmt.Fprintf(stdout, "  placed   %d of %d warm-up requests\n", placed, len(reqs))
	if *asJSON {
		return json.NewEncoder(stdout).Encode(map[string]float64{
			"p50_us": us(0.50), "p99_us": us(0.99), "allocs_per_op": allocs, "heap_mb": heapMB,
			"best_p50_us": bestQ(0.50), "best_p99_us": bestQ(0.99), "load_avg_1m": load,
			"skipped_per_op": float64(skipped) / float64(len(reqs)),
		})
	}
	return nil
}

// loadAverage is the one-minute load average, or -1 where /proc/loadavg
// cannot be read.
func loadAverage() float64 {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return -1
	}
	var l float64
	if _, err := fmt.Sscan(string(b), &l); err != nil {
		return -1
	}
	return l
}

// startCPUProfile starts a CPU profile into path; the returned func stops
// it (a second stop is harmless) and closes the file.
func startCPUProfile(path string) (func(), error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, fmt.Errorf("cpu profile: %w", err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, fmt.Errorf("cpu profile: %w", err)
	}
	return func() { pprof.StopCPUProfile(); f.Close() }, nil
}
