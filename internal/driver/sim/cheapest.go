package sim

import (
	"context"
	"fmt"
	"sort"
	"strings"

	"github.com/switchyard-ai/switchyard/internal/core/perf"
	"github.com/switchyard-ai/switchyard/schemas"
)

// The cheapest fleet that serves a trace at 1× within both SLO bars,
// searched over fleet mixes (issue 28's cost figure: Splitwise found a
// prompt-on-H100, tokens-on-A100 fleet 20 % cheaper than a homogeneous one
// at the same throughput). Each candidate runs the policy on every seed's
// trace at 1×; a fleet serves the trace when a majority of seeds meet both
// bars (the median seed does). Candidates are tried cheapest first within
// each family, and a family stops at its first fleet that serves: a larger
// fleet of the same family costs more.

// FleetFamily names a kind of candidate fleet.
const (
	// FamilyHomogeneous is one GPU generation, every worker role both.
	FamilyHomogeneous = "homogeneous"
	// FamilySplit is a prefill pool of one generation and a decode pool
	// of another, roles fixed.
	FamilySplit = "split"
	// FamilyMixed is two generations, roles both: the router splits or
	// not, request by request.
	FamilyMixed = "mixed"
)

// FleetMix is one candidate fleet of a cheapest-fleet search.
type FleetMix struct {
	Family string    `json:"family"`
	Fleet  string    `json:"fleet"`
	Pools  []GPUSpec `json:"-"`
	// PricePerHour is the fleet's $/h at the catalog's prices.
	PricePerHour float64 `json:"price_per_hour"`
}

// FleetMixOutcome is a candidate's result over the seeds.
type FleetMixOutcome struct {
	FleetMix
	// Serves is set when a majority of seeds met both bars at 1×.
	Serves bool `json:"serves"`
	// Per seed: task attainment, the high classes' worst attainment and
	// whether both bars were met.
	Task  []float64 `json:"task_attainment"`
	High  []float64 `json:"high_min"`
	Meets []bool    `json:"meets"`
	// Split counts the requests the median seed split.
	Split int `json:"split"`
}

// FleetMixes lists candidate fleets over gpus, up to maxReplicas workers
// each: every generation alone (FamilyHomogeneous, 1..maxReplicas), and for
// every ordered pair of generations a prefill pool of the first and a
// decode pool of the second (FamilySplit) and the same two pools with
// roles left to the router (FamilyMixed), p + d ≤ maxReplicas. link is
// every worker's (FamilySplit defaults to DefaultRoleLink).
func FleetMixes(gpus []string, maxReplicas int, link string, price func(gpu string) float64) []FleetMix {
	var out []FleetMix
	add := func(family string, pools []GPUSpec) {
		m := FleetMix{Family: family, Pools: pools, Fleet: DescribePools(pools)}
		for _, g := range pools {
			m.PricePerHour += float64(g.Count) * float64(max(g.TP, 1)) * price(g.GPU)
		}
		out = append(out, m)
	}
	for _, g := range gpus {
		for n := 1; n <= maxReplicas; n++ {
			add(FamilyHomogeneous, []GPUSpec{{GPU: g, Count: n, TP: 1, Link: link}})
		}
	}
	for _, a := range gpus {
		for _, b := range gpus {
			for p := 1; p < maxReplicas; p++ {
				for d := 1; p+d <= maxReplicas; d++ {
					add(FamilySplit, []GPUSpec{{GPU: a, Count: p, TP: 1, Role: schemas.RolePrefill, Link: link}, {GPU: b, Count: d, TP: 1, Role: schemas.RoleDecode, Link: link}})
					if a < b && link != "" {
						add(FamilyMixed, []GPUSpec{{GPU: a, Count: p, TP: 1, Link: link}, {GPU: b, Count: d, TP: 1, Link: link}})
					}
				}
			}
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].PricePerHour < out[j].PricePerHour })
	return out
}

// DescribePools is a fleet in --gpus form ("h100:2@prefill,a100-80g:3@decode").
func DescribePools(pools []GPUSpec) string {
	var parts []string
	for _, g := range pools {
		s := fmt.Sprintf("%s:%d", g.GPU, g.Count)
		if g.TP > 1 {
			s += fmt.Sprintf(":%d", g.TP)
		}
		if g.Role != "" {
			s += "@" + g.Role
		}
		if g.Model != "" {
			s += "@" + g.Model
		}
		parts = append(parts, s)
	}
	return strings.Join(parts, ",")
}

// CatalogPrice is a GPU's $/h in runs' catalog (0 when unknown).
func CatalogPrice(cfg Config) func(gpu string) float64 {
	return func(gpu string) float64 {
		rep, err := perf.NewReplica(cfg.Catalog, gpu, cfg.Model, cfg.Dtype, 1)
		if err != nil {
			return 0
		}
		return rep.PricePerHour()
	}
}

// CheapestFleets runs candidates (cheapest first within each family) until
// each family's first fleet that serves runs' traces at 1× with policy,
// and returns every candidate tried, in the order tried. The runs give the
// seeds (their Config's fleet is replaced by each candidate's).
func CheapestFleets(ctx context.Context, runs []CapacityRun, candidates []FleetMix, policy string, s CapacitySearch) ([]FleetMixOutcome, error) {
	s.fill()
	found := map[string]bool{}
	var out []FleetMixOutcome
	for _, m := range candidates {
		if found[m.Family] {
			continue
		}
		if err := ctx.Err(); err != nil {
			return out, fmt.Errorf("sim: cheapest fleet: %w", err)
		}
		o := FleetMixOutcome{FleetMix: m}
		met := 0
		var splits []int
		for k, run := range runs {
			// A majority decided either way needs no more seeds.
			if met > len(runs)/2 || k-met > len(runs)/2 {
				break
			}
			cfg := run.Config
			cfg.GPUs, cfg.Faults = m.Pools, nil
			pol, err := NewPolicy(policy, perf.NewPredictor(cfg.Catalog))
			if err != nil {
				return out, err
			}
			tr := run.Trace.Window(ProbeWindow(run.Trace, run.Window, 1, s.MinHighRequests))
			r, err := Run(cfg, tr, pol)
			if err != nil {
				return out, fmt.Errorf("sim: cheapest fleet %s: %w", m.Fleet, err)
			}
			high := 1.0
			for _, cl := range HighClasses {
				if cr, ok := r.ByPriority[cl]; ok && cr.SLOAttainment < high {
					high = cr.SLOAttainment
				}
			}
			ok := r.TaskAttainment >= s.SLOTarget && meetsHigh(r, s.HighTarget)
			if ok {
				met++
			}
			o.Task, o.High, o.Meets = append(o.Task, r.TaskAttainment), append(o.High, high), append(o.Meets, ok)
			splits = append(splits, r.Split)
		}
		sort.Ints(splits)
		o.Split = splits[len(splits)/2]
		o.Serves = met > len(runs)/2
		found[m.Family] = o.Serves
		out = append(out, o)
		if s.OnProbe != nil {
			s.OnProbe(policy+" "+m.Fleet, CapacityProbe{Scale: 1, Meets: o.Serves, MeetsH: o.Serves}, 0)
		}
	}
	return out, nil
}
