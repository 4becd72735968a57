package control

import (
	"fmt"

	"github.com/switchyard-ai/switchyard/schemas"
)

// The pools and parked models of a fleet whose GPUs change model
// (Config.ShiftModels), one definition for the simulator's autoscaler and
// the live stack.

// ShiftReplica is one fleet entry as GPUs that change model see it: the
// catalog's GPU name, its TP, the model it starts serving, and how many
// GPUs the entry has.
type ShiftReplica struct {
	GPU   string
	TP    int
	Model string
	Count int
}

// ShiftPools is every GPU type (and TP) of fleet × every model the fleet
// serves, each pool bounded by that type's GPUs (Min 0, Max the type's
// count), in fleet order, and that inventory: the GPUs per type the pools
// of one type share. Dtype and the rest of each Pool are the caller's.
func ShiftPools(fleet []ShiftReplica) ([]Pool, map[string]int) {
	type gpuTP struct {
		gpu string
		tp  int
	}
	var gpus []gpuTP
	var models []string
	seenG, seenM := map[gpuTP]bool{}, map[string]bool{}
	inventory := map[string]int{}
	for _, r := range fleet {
		inventory[r.GPU] += r.Count
		if k := (gpuTP{r.GPU, max(r.TP, 1)}); !seenG[k] {
			seenG[k] = true
			gpus = append(gpus, k)
		}
		if !seenM[r.Model] {
			seenM[r.Model] = true
			models = append(models, r.Model)
		}
	}
	var pools []Pool
	for _, g := range gpus {
		for _, m := range models {
			pools = append(pools, Pool{GPU: g.gpu, Model: m, TP: g.tp, Min: 0, Max: inventory[g.gpu]})
		}
	}
	return pools, inventory
}

// ParkedModels is what a worker of gpu and tp serving own keeps parked
// when GPUs change model: every other model of pools on its GPU type and TP.
func ParkedModels(pools []Pool, gpu string, tp int, own string) []string {
	var out []string
	seen := map[string]bool{own: true}
	for _, p := range pools {
		if p.GPU != gpu || max(p.TP, 1) != max(tp, 1) || seen[p.Model] {
			continue
		}
		seen[p.Model] = true
		out = append(out, p.Model)
	}
	return out
}

// ParkedTier is the tier a fleet's other models start in when GPUs change
// model: tier, host when empty; the HBM tier or an unknown one is refused.
func ParkedTier(tier string) (string, error) {
	if tier == "" {
		return schemas.TierHost, nil
	}
	if schemas.TierState(tier) == "" || tier == schemas.TierHBM {
		return "", fmt.Errorf("parked tier %q: want host, page_cache, disk or remote", tier)
	}
	return tier, nil
}
