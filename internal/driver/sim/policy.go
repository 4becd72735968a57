package sim

import (
	"fmt"
	"strings"

	"github.com/switchyard-ai/switchyard/internal/core/baselines"
	"github.com/switchyard-ai/switchyard/internal/core/catalog"
	"github.com/switchyard-ai/switchyard/internal/core/perf"
	"github.com/switchyard-ai/switchyard/internal/core/placement"
	"github.com/switchyard-ai/switchyard/internal/core/routing"
)

// Policy is one contender: a placement policy, with whatever queue and
// flow control it brings (baselines.Gatekeeper; routing.Core keeps them),
// plus whether Switchyard's admitter stands in front of it.
type Policy struct {
	Name string
	placement.Policy
	// Admission puts Switchyard's admitter in front of the router: its
	// delay step sheds requests that would miss their deadline behind the
	// queue and defers batch work while the fleet is busy. The baselines
	// run without it, each with only the admission its own system has.
	Admission bool
	// EngineTargets runs the workers' engines with Switchyard's per-step
	// budget from the running sequences' TPOT targets
	// (engine.Config.TargetStepCap); the baselines' engines, vLLM's fixed
	// token budget, run without it.
	EngineTargets bool
}

// PolicyNames lists the policies NewPolicy knows, ablations included.
func PolicyNames() []string {
	names := append([]string{}, baselines.Names()...)
	names = append(names, "switchyard", routing.PolicyShortYield, routing.PolicySharedQueue)
	for _, a := range placement.Axes {
		names = append(names, "switchyard-no-"+a)
	}
	return names
}

// NewPolicy builds a fresh policy by name, through routing.PolicyNamed as
// the live router does: a baseline (internal/core/baselines), "switchyard", or
// "switchyard-no-<axis>" with one placement axis disabled, or
// "switchyard-short-yield" (routing.PolicyShortYield), or
// "switchyard-shared-queue" (routing.PolicySharedQueue).
func NewPolicy(name string, pred *perf.Predictor) (Policy, error) {
	p, err := routing.PolicyNamed(name, catalog.Default(), pred)
	if err != nil {
		return Policy{}, fmt.Errorf("sim: %w (known: %s)", err, strings.Join(PolicyNames(), ", "))
	}
	ours := name == "switchyard" || name == routing.PolicyShortYield || name == routing.PolicySharedQueue || strings.HasPrefix(name, "switchyard-no-")
	return Policy{Name: name, Policy: p, Admission: ours, EngineTargets: ours}, nil
}
