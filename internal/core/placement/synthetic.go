package placement

import (
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/switchyard-ai/switchyard/internal/core/fleet"
	"github.com/switchyard-ai/switchyard/internal/core/tokens"
	"github.com/switchyard-ai/switchyard/schemas"
)

// SyntheticConfig sizes a made-up fleet for benchmarks.
type SyntheticConfig struct {
	Workers int
	// Blocks is the number of (worker, block) entries to index.
	Blocks   int
	Requests int
	Seed     uint64
	// Rename, when set, replaces GPU and model names (the keys of
	// DefaultLinearGPUs, "llama-8b", "llama-70b") with others, so that a
	// cost model with its own catalog, such as internal/core/perf's, can cost
	// the same fleet.
	Rename map[string]string
	// Links, when set, gives every worker one of them and a role (both,
	// prefill or decode, a third each), for disaggregated placements;
	// unset, the fleet is the same as before it existed.
	Links []string
}

// Synthetic builds, for benchmarks and the `bench placement` command only, a
// fleet of mixed GPUs (the DefaultLinearGPUs), model residencies and loads
// whose workers hold prefixes of shared prompt families, and requests that
// extend those prefixes with mixed priorities, deadlines and workflows. All
// workers are fresh at now. It is deterministic for a seed.
func Synthetic(cfg SyntheticConfig, now time.Time) (*fleet.Fleet, []Request) {
	rng := rand.New(rand.NewPCG(cfg.Seed, 0x5eed))
	name := func(s string) string {
		if n, ok := cfg.Rename[s]; ok {
			return n
		}
		return s
	}
	gpus := []string{"b200", "h200", "h100", "h100", "a100", "a100", "l40s", "l4"}
	states := []string{schemas.WeightHot, schemas.WeightHot, schemas.WeightHot, schemas.WeightSleeping, schemas.WeightCold}
	f := fleet.New(fleet.Options{})
	ids := make([]string, cfg.Workers)
	for i := range ids {
		ids[i] = fmt.Sprintf("w%04d", i)
		gpu := gpus[rng.IntN(len(gpus))]
		total := 20000 + rng.IntN(60000)
		models := []schemas.ModelState{{Name: name("llama-8b"), Dtype: "bf16", State: states[rng.IntN(len(states))]}}
		if rng.IntN(4) == 0 {
			models = append(models, schemas.ModelState{Name: name("llama-70b"), Dtype: "fp8", State: states[rng.IntN(len(states))]})
		}
		var role, link string
		if len(cfg.Links) > 0 {
			role = []string{schemas.RoleBoth, schemas.RolePrefill, schemas.RoleDecode}[rng.IntN(3)]
			link = cfg.Links[rng.IntN(len(cfg.Links))]
		}
		f.ApplyHeartbeat(&schemas.Heartbeat{
			WorkerID: ids[i], Pool: "bench", GPU: name(gpu), TP: 1, Simulated: true, Role: role, Link: link,
			HBMTotalBytes: 80 << 30, HBMFreeBytes: uint64(rng.IntN(40)) << 30,
			KVBlocksTotal: total, KVBlocksFree: total * (10 + rng.IntN(90)) / 100, BlockSize: tokens.BlockSize,
			Models: models, Running: rng.IntN(64), QueuedTokens: rng.IntN(8000), MaxBatch: 256,
			PricePerHour: DefaultLinearGPUs[gpu].PricePerHour,
		}, now)
	}

	// Prompt families: a 64-block shared prefix each (a system prompt plus
	// tool definitions), held to varying depths by a handful of workers.
	const chain = 64
	families := cfg.Blocks/(chain*8) + 1
	fam := make([][]uint64, families)
	for i := range fam {
		fam[i] = make([]uint64, chain)
		var parent uint64
		for j := range fam[i] {
			parent = tokens.ChainHash(parent, []uint32{uint32(i), uint32(j)})
			fam[i][j] = parent
		}
	}
	seq := make([]uint64, cfg.Workers)
	for n := 0; f.Prefix().Entries() < cfg.Blocks && n < cfg.Blocks; n++ {
		w := rng.IntN(cfg.Workers)
		seq[w]++
		f.ApplyKV(&schemas.KVEvent{
			WorkerID: ids[w], Seq: seq[w], Kind: schemas.KVStored,
			Hashes: fam[rng.IntN(families)][:16+rng.IntN(chain-16)],
		}, now)
	}

	reqs := make([]Request, cfg.Requests)
	for i := range reqs {
		hashes := append([]uint64(nil), fam[rng.IntN(families)]...)
		for j := 0; j < 20; j++ {
			hashes = append(hashes, rng.Uint64())
		}
		r := Request{
			ID: fmt.Sprintf("r%06d", i), Tenant: "bench", Model: name("llama-8b"), Dtype: "bf16",
			Priority:     schemas.Priorities[rng.IntN(len(schemas.Priorities))],
			PromptTokens: len(hashes)*tokens.BlockSize + 7, OutputTokens: 64 + rng.IntN(512),
			BlockHashes: hashes, Deadline: now.Add(time.Duration(5+rng.IntN(60)) * time.Second),
		}
		if rng.IntN(3) == 0 {
			r.Workflow = &schemas.Workflow{ID: fmt.Sprintf("wf%d", i%50), Step: 1 + rng.IntN(8), Of: 8}
			r.WorkflowDeadline = now.Add(5 * time.Minute)
		}
		reqs[i] = r
	}
	return f, reqs
}

// BenchCost returns the LinearCost the benchmarks use.
func BenchCost() *LinearCost {
	return &LinearCost{GPUs: DefaultLinearGPUs, ModelScale: map[string]float64{"llama-8b": 1, "llama-70b": 8}}
}
