package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"slices"
	"strings"

	"github.com/switchyard-ai/switchyard/internal/core/control"
	"github.com/switchyard-ai/switchyard/internal/driver/sim"
	"github.com/switchyard-ai/switchyard/schemas"

	"github.com/switchyard-ai/switchyard/services/stack"
)

// autoscaleFlags are the local-scaler flags `up` and `demo` share.
type autoscaleFlags struct {
	on       *bool
	min, max *int
	util     *float64
	planFor  *string
	fromZero *bool
	planner  *string
	// shift and parked are GPUs that change model (--shift-models,
	// --parked-tier), as `sim --shift-models` runs them.
	shift  *bool
	parked *string
}

func addAutoscaleFlags(fs *flag.FlagSet, usage string) *autoscaleFlags {
	return &autoscaleFlags{
		on:       fs.Bool("autoscale", false, usage),
		min:      fs.Int("autoscale-min", 1, "autoscale: fewest workers per pool"),
		max:      fs.Int("autoscale-max", 0, "autoscale: most workers per pool (0 = twice the starting fleet, at least 4)"),
		util:     fs.Float64("target-utilization", 0, "autoscale: share of a replica's modelled capacity the controller plans to use (0 = the controller's default)"),
		planFor:  fs.String("autoscale-for", "all", "autoscale: size the fleet to serve all classes, or only the high classes (critical, interactive) with the rest on spare capacity: all|high"),
		planner:  fs.String("planner", control.PlannerSwitchyard, "autoscale: what sizes the pools, live: "+strings.Join(sim.PlannerNames(), "|")),
		fromZero: fs.Bool("autoscale-from-zero", false, "autoscale: start no workers; the fleet names the pools, each at minimum 0, and requests for a pool are held while its first worker cold-starts"),
		shift:    fs.Bool("shift-models", false, "autoscale: GPUs change model — on a fleet serving several models each GPU type's GPUs are shared by its models, and the controller moves a GPU from a model whose demand fell to one whose demand rose (the worker drains, sleeps the old model in host memory, wakes the new one) instead of starting and releasing workers"),
		parked:   fs.String("parked-tier", "", "shift-models: where each worker's other models sit at the start (host, page_cache, disk, remote; default host: started once and put to sleep)"),
	}
}

// config is the stack's control configuration, nil without --autoscale.
func (a *autoscaleFlags) config() (*stack.ControlConfig, error) {
	if !slices.Contains(sim.PlannerNames(), *a.planner) {
		return nil, fmt.Errorf("--planner %q: want one of %s", *a.planner, strings.Join(sim.PlannerNames(), ", "))
	}
	if !*a.on {
		if *a.planner != control.PlannerSwitchyard {
			return nil, errors.New("--planner needs --autoscale: without it nothing sizes the fleet")
		}
		if *a.fromZero {
			return nil, errors.New("--autoscale-from-zero needs --autoscale: nothing else starts a worker")
		}
		if *a.shift {
			return nil, errors.New("--shift-models needs --autoscale: the controller orders the switches")
		}
		if *a.parked != "" {
			return nil, errors.New("--parked-tier needs --shift-models: only GPUs that change model park models")
		}
		return nil, nil
	}
	if *a.parked != "" && !*a.shift {
		return nil, errors.New("--parked-tier needs --shift-models: only GPUs that change model park models")
	}
	if *a.parked != "" && (schemas.TierState(*a.parked) == "" || *a.parked == schemas.TierHBM) {
		return nil, fmt.Errorf("--parked-tier %q: want host, page_cache, disk or remote", *a.parked)
	}
	if *a.shift && *a.planner != control.PlannerSwitchyard {
		return nil, fmt.Errorf("--shift-models with --planner %s: only %s moves GPUs between models", *a.planner, control.PlannerSwitchyard)
	}
	if *a.shift && *a.fromZero {
		return nil, errors.New("--shift-models with --autoscale-from-zero: GPUs that change model are the fleet's, started at once")
	}
	if *a.min < 0 {
		return nil, fmt.Errorf("--autoscale-min %d: want 0 or more", *a.min)
	}
	highOnly, err := planHighOnly(*a.planFor)
	if err != nil {
		return nil, err
	}
	cc := &stack.ControlConfig{Min: *a.min, Max: *a.max, FromZero: *a.fromZero, Planner: *a.planner}
	cc.Control.TargetUtilization = *a.util
	cc.Control.PlanHighOnly = highOnly
	cc.Control.ShiftModels, cc.ParkedTier = *a.shift, *a.parked
	return cc, nil
}

// start starts the stack over cfg with the control these flags ask for
// (none without --autoscale): up and demo start theirs this way, so a
// command cannot start one without its scaler.
func (a *autoscaleFlags) start(ctx context.Context, cfg stack.Config) (*stack.Stack, error) {
	cc, err := a.config()
	if err != nil {
		return nil, err
	}
	cfg.Control = cc
	return stack.Start(ctx, cfg)
}
