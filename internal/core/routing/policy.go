package routing

import (
	"fmt"
	"slices"
	"strings"

	"github.com/switchyard-ai/switchyard/internal/core/baselines"
	"github.com/switchyard-ai/switchyard/internal/core/catalog"
	"github.com/switchyard-ai/switchyard/internal/core/placement"
	"github.com/switchyard-ai/switchyard/schemas"
)

// The policies a core can run, by name — the same names live, in the
// simulator and in replay.

// CatalogWeights sizes model weights from the catalog, for placement's
// fits-in-HBM and headroom checks.
func CatalogWeights(cat *catalog.Catalog) func(model, dtype string) uint64 {
	return func(model, dtype string) uint64 {
		m, ok := cat.Model(model)
		if !ok {
			return 0
		}
		return uint64(float64(m.Params) * catalog.DtypeBytes(dtype))
	}
}

// PolicyShortYield is the placer with Options.QueueCeilingYieldsUnder set
// for interactive, standard and batch (PolicyNamed).
const PolicyShortYield = "switchyard-short-yield"

// PolicySharedQueue is the placer with Options.SharedPrefill set for
// standard and batch: their queue priced as a step-sharing engine serves
// it (PolicyNamed). Not the higher classes: priced so for every class,
// short critical and interactive prompts went to workers whose engine ran
// a long prompt uncapped at that moment (no decode with a target, so no
// sharing), and Mooncake conversation's high bar (h100:4, 3 seeds) fell
// from 1.414 to 0.7071. Not the default: it raises the 0.90 bar on five of
// the eight capacity cases but lifts interactive ITL p99 at low load above
// Dynamo's (docs/benchmarks.md, "The shared prefill queue").
const PolicySharedQueue = "switchyard-shared-queue"

// PolicyNamed returns a fresh placement policy by name: "switchyard" (the
// seven-axis placer with the catalog's weight sizes), "switchyard-no-<axis>"
// (the same with one axis switched off, for ablations),
// "switchyard-short-yield" (the same with interactive, standard and batch
// prompts of one chunk or less placed past the queue ceiling when their
// first token is in time and no higher class waits in the router:
// placement.Options.QueueCeilingYieldsUnder), "switchyard-shared-queue"
// (the same with standard and batch requests' queue priced as an engine
// that shares its prefill steps serves it: placement.Options.SharedPrefill),
// or any baseline.
// The live router, replay and the simulator all build their policy here,
// so a replay with the recorded name runs exactly the recorded policy and
// a simulated figure is the shipped policy's.
func PolicyNamed(name string, cat *catalog.Catalog, cost placement.CostModel) (placement.Policy, error) {
	if name == "" || name == "switchyard" {
		return placement.New(cost, placement.Options{WeightBytes: CatalogWeights(cat)}), nil
	}
	if name == PolicyShortYield {
		under := map[string]int{schemas.PriorityInteractive: placement.DefaultChunkTokens,
			schemas.PriorityStandard: placement.DefaultChunkTokens, schemas.PriorityBatch: placement.DefaultChunkTokens}
		return placement.New(cost, placement.Options{WeightBytes: CatalogWeights(cat), QueueCeilingYieldsUnder: under}), nil
	}
	if name == PolicySharedQueue {
		shared := map[string]bool{schemas.PriorityStandard: true, schemas.PriorityBatch: true}
		return placement.New(cost, placement.Options{WeightBytes: CatalogWeights(cat), SharedPrefill: shared}), nil
	}
	if axis, ok := strings.CutPrefix(name, "switchyard-no-"); ok {
		if !slices.Contains(placement.Axes, axis) {
			return nil, fmt.Errorf("routing: unknown axis %q (want one of %s)", axis, strings.Join(placement.Axes, ", "))
		}
		return placement.New(cost, placement.Options{WeightBytes: CatalogWeights(cat), Disabled: map[string]bool{axis: true}}), nil
	}
	return baselines.New(name, cost)
}
