package traces

import (
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/switchyard-ai/switchyard/internal/core/tokens"
	"github.com/switchyard-ai/switchyard/schemas"
)

// SharedPrefixConfig is the llm-d precise-prefix-cache benchmark shape
// (llm-d blog "KV-Cache Wins You Can See", 2025-09-24, appendix A.2, and
// llm-d-kv-cache-manager benchmarking/73-capacity): Groups customers, each
// with a SystemTokens shared context, PromptsPerGroup users per customer,
// each with a fixed QuestionTokens question; a Poisson ladder of rates.
type SharedPrefixConfig struct {
	Seed            int64
	Groups          int           // 150
	PromptsPerGroup int           // 5
	SystemTokens    int           // 6000
	QuestionTokens  int           // 1200
	OutputTokens    int           // not published; see SharedPrefix
	Ladder          []float64     // QPS stages; default 3, 10, 20, 30, 40, 50, 60
	StageDuration   time.Duration // per stage; default 60 s
}

// DefaultLadder is the 3→60 QPS Poisson ladder.
var DefaultLadder = []float64{3, 10, 20, 30, 40, 50, 60}

// SharedPrefix generates the llm-d shared-prefix workload. Each request
// picks one of the Groups×PromptsPerGroup prompts uniformly (seeded). The
// blog does not state the output length; the default 150 tokens is inferred
// from its 8,730 output tok/s at up to 60 QPS (8730/60 ≈ 145) and is an
// assumption. Every request is interactive-class with the default SLO.
func SharedPrefix(c SharedPrefixConfig) *Trace {
	if c.Groups <= 0 {
		c.Groups = 150
	}
	if c.PromptsPerGroup <= 0 {
		c.PromptsPerGroup = 5
	}
	if c.SystemTokens <= 0 {
		c.SystemTokens = 6000
	}
	if c.QuestionTokens <= 0 {
		c.QuestionTokens = 1200
	}
	if c.OutputTokens <= 0 {
		c.OutputTokens = 150
	}
	if len(c.Ladder) == 0 {
		c.Ladder = DefaultLadder
	}
	if c.StageDuration <= 0 {
		c.StageDuration = 60 * time.Second
	}
	rng := rand.New(rand.NewPCG(uint64(c.Seed), 0x6c6c6d64))
	bs := tokens.BlockSize
	sysBlocks, qBlocks := c.SystemTokens/bs, c.QuestionTokens/bs
	prompt := (sysBlocks + qBlocks) * bs
	hashes := make([][]uint64, c.Groups*c.PromptsPerGroup)
	id := uint64(3) << 61
	for g := 0; g < c.Groups; g++ {
		sys := make([]uint64, sysBlocks)
		for i := range sys {
			sys[i] = id
			id++
		}
		for p := 0; p < c.PromptsPerGroup; p++ {
			coarse := append(append([]uint64(nil), sys...), make([]uint64, qBlocks)...)
			for i := sysBlocks; i < len(coarse); i++ {
				coarse[i] = id
				id++
			}
			hashes[g*c.PromptsPerGroup+p] = tokens.ExpandBlocks(coarse, bs, prompt)
		}
	}
	t := &Trace{Name: "llm-d-shared-prefix"}
	var start time.Duration
	for _, qps := range c.Ladder {
		end := start + c.StageDuration
		for at := start; ; {
			at += time.Duration(rng.ExpFloat64() / qps * float64(time.Second))
			if at >= end {
				break
			}
			k := rng.IntN(len(hashes))
			r := Request{
				ID:           fmt.Sprintf("sp-%06d", len(t.Requests)),
				Arrival:      at,
				PromptTokens: prompt,
				OutputTokens: c.OutputTokens,
				BlockHashes:  hashes[k],
				Tenant:       fmt.Sprintf("customer-%03d", k/c.PromptsPerGroup),
				Priority:     schemas.PriorityInteractive,
			}
			SetSLO(&r)
			t.Requests = append(t.Requests, r)
		}
		start = end
	}
	t.Rules = append(t.Rules,
		fmt.Sprintf("llm-d shared prefix (seed %d): %d groups × %d prompts, %d-token shared system prompt + %d-token question, %d output tokens (assumed), Poisson ladder %v QPS, %v per stage",
			c.Seed, c.Groups, c.PromptsPerGroup, c.SystemTokens, c.QuestionTokens, c.OutputTokens, c.Ladder, c.StageDuration),
		"llm-d shared prefix: tenant = customer group, every request interactive class")
	return t
}
