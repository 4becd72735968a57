package loadgen

import (
	"fmt"
	"math"
	"math/rand/v2"
	"sort"
	"strings"
	"time"

	"github.com/switchyard-ai/switchyard/internal/core/tokens"
	"github.com/switchyard-ai/switchyard/schemas"
)

// Arrival is one request to submit at Offset from the start of the run.
type Arrival struct {
	Offset  time.Duration
	Tenant  string
	Request schemas.Request
}

// TenantMix is one tenant's share of the demo load.
type TenantMix struct {
	Name     string
	Priority string
	// Share of the steady rate.
	Share float64
	// DeadlineMs is the latency budget given to its requests.
	DeadlineMs int64
	MaxTokens  int
}

// Workload describes a demo load. The zero value is not useful; use
// DefaultWorkload.
type Workload struct {
	Seed     uint64
	Duration time.Duration
	// Rate is the steady request rate per second across tenants.
	Rate    float64
	Tenants []TenantMix
	Model   string
	// RepeatFraction of single-turn requests repeat an earlier prompt
	// verbatim with temperature 0 (exact-cache candidates).
	RepeatFraction float64
	// AutoFraction of single-turn requests ask for model "auto".
	AutoFraction float64
	// Workflows is the number of agentic workflows started; DoomedFraction
	// of them get a workflow deadline too tight to finish.
	Workflows      int
	WorkflowSteps  int
	DoomedFraction float64
	// Burst multiplies the rate by BurstFactor during [BurstAt, BurstAt+BurstFor).
	BurstAt     time.Duration
	BurstFor    time.Duration
	BurstFactor float64
	// Curve, when set, shapes the rate over time: the rate at t is Rate ×
	// Curve.At(t) (times BurstFactor inside the burst).
	Curve RateCurve
	// Sizes, when set, replaces the chat prompts of single-turn requests
	// with unique prompts of drawn lengths (no repeats, no "auto").
	Sizes *Sizes
}

// Sizes draws request lengths uniformly from [Min, Max]: prompt tokens
// (as counted by internal/core/tokens) and max_tokens.
type Sizes struct {
	PromptMin, PromptMax int
	OutputMin, OutputMax int
}

// DefaultWorkload is the demo's mix over d.
func DefaultWorkload(d time.Duration, seed uint64) Workload {
	return Workload{
		Seed:     seed,
		Duration: d,
		Rate:     12,
		Model:    "llama-3.1-8b",
		Tenants: []TenantMix{
			{Name: "acme", Priority: schemas.PriorityCritical, Share: 0.2, DeadlineMs: 8000, MaxTokens: 64},
			{Name: "globex", Priority: schemas.PriorityInteractive, Share: 0.3, DeadlineMs: 10000, MaxTokens: 96},
			{Name: "initech", Priority: schemas.PriorityStandard, Share: 0.3, DeadlineMs: 6000, MaxTokens: 128},
			{Name: "umbrella", Priority: schemas.PriorityBatch, Share: 0.2, DeadlineMs: 5000, MaxTokens: 256},
		},
		RepeatFraction: 0.15,
		AutoFraction:   0.15,
		Workflows:      8,
		WorkflowSteps:  4,
		DoomedFraction: 0.25,
		BurstAt:        d * 2 / 5,
		BurstFor:       d / 5,
		BurstFactor:    6,
	}
}

var systemPrompts = []string{
	"You are a support assistant for a payments company. Answer precisely, cite the policy section, and never invent account details. ",
	"You are a coding assistant. Prefer small, tested changes; explain the reasoning in one paragraph before the code. ",
	"You are a research analyst. Summarise sources faithfully, separate facts from inference, and flag uncertainty. ",
}

var questions = []string{
	"How do I dispute a card charge that I do not recognise?",
	"Write a function that merges two sorted lists.",
	"Summarise the main risks in the attached quarterly report.",
	"Classify this ticket: the app crashes when I upload a photo.",
	"Extract the invoice number and total from: Invoice INV-2231, total 412.50 EUR.",
	"Explain why the build fails with an undefined symbol error.",
	"Compare the two vendor proposals on cost and delivery time.",
	"Translate the refund policy into plain language for customers.",
}

// Generate returns the arrivals sorted by offset. The same Workload always
// yields the same arrivals.
func (w Workload) Generate() []Arrival {
	rng := rand.New(rand.NewPCG(w.Seed, w.Seed^0x9e3779b97f4a7c15))
	var out []Arrival
	var cum []float64
	total := 0.0
	for _, t := range w.Tenants {
		total += t.Share
		cum = append(cum, total)
	}
	pickTenant := func() TenantMix {
		x := rng.Float64() * total
		for i, c := range cum {
			if x < c {
				return w.Tenants[i]
			}
		}
		return w.Tenants[len(w.Tenants)-1]
	}
	// history holds deterministic prompts with the tenant that sent them:
	// a repeat comes from the same tenant, as real repeats do (and as the
	// per-tenant cache requires to hit).
	type asked struct {
		tenant TenantMix
		req    schemas.Request
	}
	var history []asked
	zero := 0.0
	n := 0
	burst := func(t time.Duration) float64 {
		if w.BurstFactor > 1 && t >= w.BurstAt && t < w.BurstAt+w.BurstFor {
			return w.BurstFactor
		}
		return 1
	}
	// A shaped rate is drawn by thinning (Lewis and Shedler): candidates at
	// the curve's peak rate, each kept with probability rate(t)/peak, which
	// is exact for a rate that varies within one gap. Without a curve the
	// draw is the plain piecewise-constant one, so the seeds of existing
	// workloads keep their arrivals.
	peak := w.Curve.Peak()
	for t := time.Duration(0); t < w.Duration; {
		rate := w.Rate * burst(t)
		if len(w.Curve) > 0 {
			rate *= peak
		}
		t += time.Duration(rng.ExpFloat64() / rate * float64(time.Second))
		if t >= w.Duration {
			break
		}
		if len(w.Curve) > 0 && rng.Float64()*peak >= w.Curve.At(t) {
			continue
		}
		n++
		tm := pickTenant()
		var req schemas.Request
		switch r := rng.Float64(); {
		case w.Sizes != nil:
			req = w.Sizes.request(rng, w.Model, n)
		case r < w.RepeatFraction && len(history) > 0:
			h := history[rng.IntN(len(history))]
			tm, req = h.tenant, h.req
			req.ID = ""
		default:
			sys := systemPrompts[rng.IntN(len(systemPrompts))]
			q := questions[rng.IntN(len(questions))]
			req = schemas.Request{
				Model:     w.Model,
				Messages:  []schemas.Message{{Role: "system", Content: strings.Repeat(sys, 6)}, {Role: "user", Content: q}},
				MaxTokens: tm.MaxTokens/2 + rng.IntN(tm.MaxTokens/2+1),
			}
			if rng.Float64() < 0.5 {
				req.Temperature = &zero
				history = append(history, asked{tenant: tm, req: req})
			}
			if rng.Float64() < w.AutoFraction/(1-w.RepeatFraction) {
				req.Model = "auto"
				req.Metadata = map[string]string{"task": "classify"}
				req.Messages = req.Messages[1:]
			}
		}
		req.Priority = tm.Priority
		req.DeadlineMs = tm.DeadlineMs
		out = append(out, Arrival{Offset: t, Tenant: tm.Name, Request: req})
	}
	out = append(out, w.workflows(rng)...)
	sort.SliceStable(out, func(i, j int) bool { return out[i].Offset < out[j].Offset })
	return out
}

// workflows lays out agentic workflows: each step arrives after the
// previous step's expected completion plus a tool-call gap, shares the
// workflow's growing context, and carries the workflow deadline. Doomed
// workflows get a deadline shorter than their steps can take, and are a
// standard tenant's (initech's) background pipelines: they are there to
// show the admitter cancelling a workflow before it spends GPU time, and
// as interactive work they were misses by construction that no policy
// could serve (docs/benchmarks.md, "demo --policy": every policy's
// interactive attainment was exactly its 8 doomed steps short of 1.000),
// so the high classes' attainment measured the load, not the scheduler.
func (w Workload) workflows(rng *rand.Rand) []Arrival {
	var out []Arrival
	if w.Workflows == 0 || w.WorkflowSteps == 0 {
		return out
	}
	spacing := w.Duration / time.Duration(w.Workflows+1)
	for i := 0; i < w.Workflows; i++ {
		doomed := float64(i) < math.Round(float64(w.Workflows)*w.DoomedFraction)
		wfID := fmt.Sprintf("wf-%d-%d", w.Seed, i)
		deadline := int64(30000)
		if doomed {
			deadline = 1200
		}
		start := spacing * time.Duration(i+1) / 2
		ctx := systemPrompts[i%len(systemPrompts)]
		tenant, priority := "globex", schemas.PriorityInteractive
		if doomed {
			tenant, priority = "initech", schemas.PriorityStandard
		}
		for s := 1; s <= w.WorkflowSteps; s++ {
			ctx += fmt.Sprintf(" Step %d: call the tool and reason about its output %d.", s, rng.IntN(1000))
			out = append(out, Arrival{
				Offset: start + time.Duration(s-1)*900*time.Millisecond,
				Tenant: tenant,
				Request: schemas.Request{
					Model:      w.Model,
					Prompt:     strings.Repeat(ctx, 3),
					MaxTokens:  48,
					Priority:   priority,
					DeadlineMs: 10000,
					Workflow:   &schemas.Workflow{ID: wfID, Step: s, Of: w.WorkflowSteps, DeadlineMs: deadline, ToolState: fmt.Sprintf("t%d", s)},
				},
			})
		}
	}
	return out
}

// filler is the body of sized prompts: one-letter words, one token each,
// so a 2,048-token prompt costs 4 KiB of payload and not 12.
var filler = strings.Repeat("a b c d e f g h ", 1024)

// request is a prompt of a drawn length whose first words are unique to
// request n: the block hashes chain, so no two prompts share a cached
// prefix — as in the Azure trace, which records no prefix reuse.
func (s *Sizes) request(rng *rand.Rand, model string, n int) schemas.Request {
	draw := func(lo, hi int) int { return lo + rng.IntN(max(hi-lo, 0)+1) }
	prompt := max(draw(s.PromptMin, s.PromptMax), 8)
	head := fmt.Sprintf("request %d nonce %d %d :", n, rng.Uint32(), rng.Uint32())
	body := min(prompt-tokens.Count(head), len(filler)/2)
	return schemas.Request{
		Model:     model,
		Prompt:    head + " " + filler[:max(body, 0)*2],
		MaxTokens: max(draw(s.OutputMin, s.OutputMax), 1),
	}
}
