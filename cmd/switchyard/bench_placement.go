package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"runtime"
	"slices"
	"time"

	"github.com/switchyard-ai/switchyard/internal/placement"
)

// runBenchPlacement measures one placement decision over a synthetic fleet:
// per-call latency percentiles (each call timed), allocations per call and
// the heap the fleet view and prefix index occupy. It uses
// placement.BenchCost, a linear stand-in for the roofline cost model, so the
// figures measure the placer, not the predictor.
func runBenchPlacement(ctx context.Context, args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("bench placement", flag.ContinueOnError)
	workers := fs.Int("workers", 1000, "workers in the synthetic fleet")
	blocks := fs.Int("blocks", 100000, "(worker, block) entries in the prefix index")
	ops := fs.Int("ops", 20000, "placements to time")
	seed := fs.Uint64("seed", 1, "synthetic fleet seed")
	asJSON := fs.Bool("json", false, "print a JSON summary as the last line")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *workers < 1 || *blocks < 0 || *ops < 1 {
		return fmt.Errorf("need --workers >= 1, --blocks >= 0, --ops >= 1")
	}

	var ms runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&ms)
	heapBefore := ms.HeapAlloc
	now := time.Now()
	f, reqs := placement.Synthetic(placement.SyntheticConfig{Workers: *workers, Blocks: *blocks, Requests: 1024, Seed: *seed}, now)
	p := placement.New(placement.BenchCost(), placement.Options{})
	runtime.GC()
	runtime.ReadMemStats(&ms)
	heapMB := float64(ms.HeapAlloc) / (1 << 20)
	fleetMB := float64(ms.HeapAlloc-min(heapBefore, ms.HeapAlloc)) / (1 << 20)

	// Warm the placer's scratch so steady state is measured.
	placed := 0
	for i := range reqs {
		if p.Place(f, &reqs[i], now).OK() {
			placed++
		}
	}
	lat := make([]time.Duration, *ops)
	runtime.GC()
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
	slices.Sort(lat)
	us := func(q float64) float64 { return float64(lat[int(q*float64(len(lat)-1))].Nanoseconds()) / 1e3 }

	fmt.Fprintf(stdout, "placement over %d workers, %d indexed blocks (%d distinct), %d placements\n",
		f.Len(), f.Prefix().Entries(), f.Prefix().Blocks(), len(lat))
	fmt.Fprintf(stdout, "  latency  p50 %.1f µs  p99 %.1f µs  max %.1f µs\n", us(0.50), us(0.99), us(1))
	fmt.Fprintf(stdout, "  allocs   %.3f per placement\n", allocs)
	fmt.Fprintf(stdout, "  heap     %.1f MB after building (fleet view + index %.1f MB)\n", heapMB, fleetMB)
	fmt.Fprintf(stdout, "  placed   %d of %d warm-up requests\n", placed, len(reqs))
	if *asJSON {
		return json.NewEncoder(stdout).Encode(map[string]float64{
			"p50_us": us(0.50), "p99_us": us(0.99), "allocs_per_op": allocs, "heap_mb": heapMB,
		})
	}
	return nil
}
