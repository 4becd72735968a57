package sim

import (
	"fmt"
	"strings"

	"github.com/switchyard-ai/switchyard/internal/baselines"
	"github.com/switchyard-ai/switchyard/internal/perf"
	"github.com/switchyard-ai/switchyard/internal/placement"
)

// Policy is one contender: a placement policy plus the router behaviour
// around it.
type Policy struct {
	Name string
	placement.Policy
	// ClassQueue puts the Switchyard router in front of placement: the
	// weighted-class EDF queue with deadline expiry (internal/queue) and
	// load shedding. Gateway-style baselines forward every request at once
	// in arrival order, as the systems they re-implement do.
	ClassQueue bool
}

// PolicyNames lists the policies NewPolicy knows, ablations included.
func PolicyNames() []string {
	names := append([]string{}, baselines.Names()...)
	names = append(names, "switchyard")
	for _, a := range placement.Axes {
		names = append(names, "switchyard-no-"+a)
	}
	return names
}

// NewPolicy builds a fresh policy by name: a baseline (internal/baselines),
// "switchyard", or "switchyard-no-<axis>" with one placement axis disabled.
func NewPolicy(name string, pred *perf.Predictor) (Policy, error) {
	if name == "switchyard" {
		return Policy{Name: name, Policy: placement.New(pred, placement.Options{}), ClassQueue: true}, nil
	}
	if axis, ok := strings.CutPrefix(name, "switchyard-no-"); ok {
		for _, a := range placement.Axes {
			if a == axis {
				p := placement.New(pred, placement.Options{Disabled: map[string]bool{a: true}})
				return Policy{Name: name, Policy: p, ClassQueue: true}, nil
			}
		}
		return Policy{}, fmt.Errorf("sim: unknown axis %q (want one of %s)", axis, strings.Join(placement.Axes, ", "))
	}
	p, err := baselines.New(name, pred)
	if err != nil {
		return Policy{}, fmt.Errorf("sim: %w (known: %s)", err, strings.Join(PolicyNames(), ", "))
	}
	return Policy{Name: name, Policy: p}, nil
}
