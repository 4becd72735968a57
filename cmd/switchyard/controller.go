package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/switchyard-ai/switchyard/internal/core/control"
	"github.com/switchyard-ai/switchyard/internal/driver/sim"
	"github.com/switchyard-ai/switchyard/services/controller"
)

// runController runs the control loop against a running system.
func runController(ctx context.Context, args []string, _ io.Writer) error {
	fs := flag.NewFlagSet("controller", flag.ContinueOnError)
	var f serviceFlags
	f.register(fs, hostID("controller"))
	interval := fs.Duration("interval", 2*time.Second, "decision interval")
	pools := fs.String("pools", "h100:llama-3.1-8b:1:8", "autoscaled pools: gpu:model:min:max[,...]")
	itl := fs.Duration("itl-target", 50*time.Millisecond, "inter-token latency the batch sizing protects")
	slo := fs.Float64("slo-target", 0.99, "high-priority SLO attainment to hold")
	planner := fs.String("planner", control.PlannerSwitchyard, "what sizes the pools: "+strings.Join(sim.PlannerNames(), "|"))
	if err := fs.Parse(args); err != nil {
		return err
	}
	if !slices.Contains(sim.PlannerNames(), *planner) {
		return fmt.Errorf("--planner %q: want one of %s", *planner, strings.Join(sim.PlannerNames(), ", "))
	}
	ps, err := parsePools(*pools)
	if err != nil {
		return err
	}
	sh, cat, err := f.connect(ctx, "controller")
	if err != nil {
		return err
	}
	defer sh.NC.Drain()
	c, err := controller.New(sh, controller.Config{Control: control.Config{
		Pools: ps, Catalog: cat, Interval: *interval, ITLTarget: *itl, SLOTarget: *slo,
	}, Planner: *planner})
	if err != nil {
		return err
	}
	return c.Run(ctx)
}

// parsePools parses "h100:llama-3.1-8b:1:8,a100-80g:llama-3.1-8b:0:4".
func parsePools(s string) ([]control.Pool, error) {
	var out []control.Pool
	for _, part := range strings.Split(s, ",") {
		if part = strings.TrimSpace(part); part == "" {
			continue
		}
		f := strings.Split(part, ":")
		if len(f) != 4 {
			return nil, fmt.Errorf("pool %q: want gpu:model:min:max", part)
		}
		lo, err1 := strconv.Atoi(f[2])
		hi, err2 := strconv.Atoi(f[3])
		if err1 != nil || err2 != nil {
			return nil, fmt.Errorf("pool %q: min and max must be integers", part)
		}
		out = append(out, control.Pool{GPU: f[0], Model: f[1], Min: lo, Max: hi})
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no pools in %q", s)
	}
	return out, nil
}
