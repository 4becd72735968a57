package traces

import (
	"fmt"
	"math"
	"math/rand/v2"
	"time"

	"github.com/switchyard-ai/switchyard/internal/core/tokens"
)

// AgenticConfig shapes the synthetic agentic workload.
type AgenticConfig struct {
	Seed int64
	// Duration is the window in which workflows start (default 10 min).
	Duration time.Duration
	// WorkflowsPerSec is the Poisson start rate of workflows (default 0.5).
	WorkflowsPerSec float64
	// Agents is how many agent types there are (default 6); each has one
	// shared system prompt and belongs to one tenant.
	Agents int
}

// agent is one agent type: its system prompt and step-shape ranges.
type agent struct {
	tenant             Tenant
	systemBlocks       []uint64
	minSteps, maxSteps int
	stepIn             [2]int // new tokens per step (tool result + instruction)
	stepOut            [2]int // output tokens per step
	meanToolGap        time.Duration
	deadlineSlack      [2]float64
}

// Agentic generates multi-step agentic workflows:
//
//   - Agent types: Agents types, round-robin over DefaultTenants, each with
//     its own system prompt of 2k-8k tokens (uniform, seeded) shared by all
//     of its workflows.
//   - A workflow starts by a Poisson process and has 3-12 steps (uniform).
//     Step k's prompt is the system prompt, the task (300-1500 tokens) and
//     everything before it: earlier outputs and tool results, so each step's
//     prompt extends the previous step's (the multi-turn prefix pattern).
//   - Each step adds 100-1500 new tokens and generates 20-400 tokens.
//   - A tool call separates steps: exponential, mean 2 s, capped at 30 s.
//   - The workflow deadline is slack × (steps × 1.5 s + the tool gaps), with
//     slack uniform in [1.5, 3]: an unloaded fleet finishes comfortably, a
//     queued one does not.
//
// A workflow succeeds only if every step succeeds by its deadline. Priority
// and SLO come from the agent's tenant.
func Agentic(c AgenticConfig) *Trace {
	if c.Duration <= 0 {
		c.Duration = 10 * time.Minute
	}
	if c.WorkflowsPerSec <= 0 {
		c.WorkflowsPerSec = 0.5
	}
	if c.Agents <= 0 {
		c.Agents = 6
	}
	rng := rand.New(rand.NewPCG(uint64(c.Seed), 0x6167656e74))
	var nextID uint64 = 1 << 62 // distinct from trace ids
	fresh := func(tokensN int) []uint64 {
		out := make([]uint64, tokensN/tokens.BlockSize)
		for i := range out {
			out[i] = nextID
			nextID++
		}
		return out
	}
	round := func(n int) int { return max(tokens.BlockSize, n/tokens.BlockSize*tokens.BlockSize) }
	uni := func(lo, hi int) int { return lo + rng.IntN(hi-lo+1) }

	agents := make([]agent, c.Agents)
	for i := range agents {
		agents[i] = agent{
			tenant:        DefaultTenants[i%len(DefaultTenants)],
			systemBlocks:  fresh(round(uni(2000, 8000))),
			minSteps:      3,
			maxSteps:      12,
			stepIn:        [2]int{100, 1500},
			stepOut:       [2]int{20, 400},
			meanToolGap:   2 * time.Second,
			deadlineSlack: [2]float64{1.5, 3},
		}
	}
	t := &Trace{Name: fmt.Sprintf("agentic-seed%d", c.Seed)}
	at := time.Duration(0)
	for w := 0; ; w++ {
		at += time.Duration(rng.ExpFloat64() / c.WorkflowsPerSec * float64(time.Second))
		if at >= c.Duration {
			break
		}
		a := &agents[rng.IntN(len(agents))]
		steps := uni(a.minSteps, a.maxSteps)
		ctx := append([]uint64(nil), a.systemBlocks...)
		ctx = append(ctx, fresh(round(uni(300, 1500)))...)
		gaps := make([]time.Duration, steps)
		var gapSum time.Duration
		for k := 1; k < steps; k++ {
			g := time.Duration(math.Min(rng.ExpFloat64()*float64(a.meanToolGap), float64(30*time.Second)))
			gaps[k] = g
			gapSum += g
		}
		slack := a.deadlineSlack[0] + rng.Float64()*(a.deadlineSlack[1]-a.deadlineSlack[0])
		deadline := time.Duration(slack * float64(time.Duration(steps)*1500*time.Millisecond+gapSum))
		wid := fmt.Sprintf("wf-%05d", w)
		prev := -1
		for k := 1; k <= steps; k++ {
			if k > 1 {
				ctx = append(ctx, fresh(round(uni(a.stepIn[0], a.stepIn[1])))...)
			}
			prompt := len(ctx) * tokens.BlockSize
			coarse := append([]uint64(nil), ctx...)
			out := uni(a.stepOut[0], a.stepOut[1])
			r := Request{
				ID:           fmt.Sprintf("%s-s%02d", wid, k),
				Arrival:      at,
				PromptTokens: prompt,
				OutputTokens: out,
				BlockHashes:  tokens.ExpandBlocks(coarse, tokens.BlockSize, prompt),
				Tenant:       a.tenant.Name,
				Priority:     a.tenant.Priority,
				Workflow:     &Workflow{ID: wid, Step: k, Of: steps, Deadline: deadline, Prev: prev, ToolGap: gaps[k-1]},
			}
			SetSLO(&r)
			prev = len(t.Requests)
			t.Requests = append(t.Requests, r)
			// The step's output becomes context for the next step.
			ctx = append(ctx, fresh(round(out))...)
		}
	}
	t.Rules = append(t.Rules,
		fmt.Sprintf("agentic (seed %d): %d agent types, one shared 2k-8k-token system prompt each; workflows start Poisson at %.2f/s for %v", c.Seed, c.Agents, c.WorkflowsPerSec, c.Duration),
		"agentic: 3-12 steps; step k's prompt = system + task + all earlier outputs and tool results; +100-1500 tokens and 20-400 output tokens per step",
		"agentic: tool gap between steps exponential mean 2 s (cap 30 s); workflow deadline = U[1.5,3] × (steps × 1.5 s + tool gaps); a workflow succeeds only if every step does",
		"agentic: agent type i belongs to tenant i mod 6 of the tenant table, which fixes its class and SLO")
	t.Rules = append(t.Rules, RulesText(c.Seed)[1:]...)
	return t
}
