package main

import (
	"flag"

	"github.com/switchyard-ai/switchyard/services/stack"
)

// autoscaleFlags are the local-scaler flags `up` and `demo` share.
type autoscaleFlags struct {
	on       *bool
	min, max *int
	util     *float64
	planFor  *string
}

func addAutoscaleFlags(fs *flag.FlagSet, usage string) *autoscaleFlags {
	return &autoscaleFlags{
		on:      fs.Bool("autoscale", false, usage),
		min:     fs.Int("autoscale-min", 1, "autoscale: fewest workers per pool"),
		max:     fs.Int("autoscale-max", 0, "autoscale: most workers per pool (0 = twice the starting fleet, at least 4)"),
		util:    fs.Float64("target-utilization", 0, "autoscale: share of a replica's modelled capacity the controller plans to use (0 = the controller's default)"),
		planFor: fs.String("autoscale-for", "all", "autoscale: size the fleet to serve all classes, or only the high classes (critical, interactive) with the rest on spare capacity: all|high"),
	}
}

// config is the stack's control configuration, nil without --autoscale.
func (a *autoscaleFlags) config() (*stack.ControlConfig, error) {
	if !*a.on {
		return nil, nil
	}
	highOnly, err := planHighOnly(*a.planFor)
	if err != nil {
		return nil, err
	}
	cc := &stack.ControlConfig{Min: *a.min, Max: *a.max}
	cc.Control.TargetUtilization = *a.util
	cc.Control.PlanHighOnly = highOnly
	return cc, nil
}
