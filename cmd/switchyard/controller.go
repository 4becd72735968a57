package main

import (
	"context"
	"errors"
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
	shift := fs.Bool("shift-models", false, "GPUs change model: the pools of one GPU type (two or more models) share its --inventory GPUs, and the controller moves a GPU from a model whose demand fell to one whose demand rose with a switch command to its worker (sy.ctl.switch.<worker>) instead of asking for workers started and released")
	inventory := fs.String("inventory", "", "shift-models: the GPUs of each type the models share: gpu=count[,...] (e.g. h100=4)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	inv, err := parseInventory(*inventory)
	if err != nil {
		return err
	}
	if *shift && len(inv) == 0 {
		return errors.New("--shift-models needs --inventory gpu=count[,...]: the GPUs each type's models share")
	}
	if !*shift && len(inv) > 0 {
		return errors.New("--inventory needs --shift-models: only GPUs that change model share an inventory")
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
	// The core keys the inventory by the catalog's GPU names, as its pools.
	canon := make(map[string]int, len(inv))
	for name, n := range inv {
		g, ok := cat.GPU(name)
		if !ok {
			return fmt.Errorf("--inventory: unknown GPU %q", name)
		}
		canon[g.Name] += n
	}
	if len(canon) > 0 {
		inv = canon
	}
	c, err := controller.New(sh, controller.Config{Control: control.Config{
		Pools: ps, Catalog: cat, Interval: *interval, ITLTarget: *itl, SLOTarget: *slo,
		ShiftModels: *shift, Inventory: inv,
	}, Planner: *planner})
	if err != nil {
		return err
	}
	return c.Run(ctx)
}

// parseInventory parses "h100=4,a100-80g=2" ("" is none).
func parseInventory(s string) (map[string]int, error) {
	out := map[string]int{}
	for _, part := range strings.Split(s, ",") {
		if part = strings.TrimSpace(part); part == "" {
			continue
		}
		gpu, n, ok := strings.Cut(part, "=")
		count, err := strconv.Atoi(n)
		if !ok || gpu == "" || err != nil || count < 1 {
			return nil, fmt.Errorf("--inventory %q: want gpu=count with a count of at least 1", part)
		}
		if _, dup := out[gpu]; dup {
			return nil, fmt.Errorf("--inventory: GPU %s named twice", gpu)
		}
		out[gpu] = count
	}
	return out, nil
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
