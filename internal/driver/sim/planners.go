package sim

import (
	"github.com/switchyard-ai/switchyard/internal/core/baselines"
	"github.com/switchyard-ai/switchyard/internal/core/control"
)

// PlannerNames lists the planners Autoscale.Planner takes: Switchyard's
// controller first, then the baselines.
func PlannerNames() []string {
	return append([]string{control.PlannerSwitchyard}, baselines.PlannerNames()...)
}
