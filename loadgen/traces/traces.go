// Package traces owns the workloads Switchyard is evaluated on: readers for
// published production traces (Mooncake JSONL, Azure LLM inference CSV), a
// seeded synthetic agentic-workflow generator, the llm-d shared-prefix
// benchmark shape, and the documented, seeded rules that give traces the
// tenants, priority classes and latency targets they do not carry.
//
// Every request's prompt is described by the chained 16-token block hashes
// of internal/core/tokens, so the simulator's engines, the fleet's prefix index
// and every routing policy see prefix reuse exactly as the live system does.
// Readers are deterministic: the same file and seed give the same requests.
package traces

import (
	"fmt"
	"sort"
	"time"
)

// Request is one inference call of a workload, timed from the trace start.
type Request struct {
	ID string
	// Arrival is when the request is submitted. For a workflow step after
	// the first it is only a lower bound: the step is released ToolGap
	// after its predecessor finishes (see Workflow).
	Arrival      time.Duration
	PromptTokens int
	OutputTokens int
	// BlockHashes are the chained hashes of the prompt's full KV blocks.
	BlockHashes []uint64

	Tenant   string
	Priority string
	// TTFTTarget and TPOTTarget are the request's SLO: time to first token
	// and mean time per output token after the first.
	TTFTTarget time.Duration
	TPOTTarget time.Duration
	// Deadline is the end-to-end budget from arrival (0 = none): what the
	// router's EDF queue orders by and admission sheds against.
	Deadline time.Duration

	Workflow *Workflow
	// Model names the model pool the request is for when a workload mixes
	// several ("" = the run's one model).
	Model string
}

// InTime reports whether a workflow that took elapsed from its first
// step's arrival to its last step's end finished within its deadline; one
// without a deadline always has. The simulator's task count and its
// late-workflow diagnosis both judge by it.
func (w *Workflow) InTime(elapsed time.Duration) bool {
	return w.Deadline <= 0 || elapsed <= w.Deadline
}

// Workflow places a request in a multi-step agentic task.
type Workflow struct {
	ID   string
	Step int // 1-based
	Of   int
	// Deadline is the whole workflow's budget from its first step's arrival;
	// 0 is none, and the workflow is then never late (InTime).
	Deadline time.Duration
	// Prev is the index in Trace.Requests of the step this one waits for
	// (-1 for the first step), and ToolGap the tool-call time between that
	// step finishing and this one being submitted.
	Prev    int
	ToolGap time.Duration
}

// Trace is a workload: requests in arrival order plus how they were made.
type Trace struct {
	Name     string
	Requests []Request
	// Rules describes, in words, every modelling choice applied on top of
	// the source data (tenant, priority and SLO assignment, jitter,
	// synthetic structure). Reports print it.
	Rules []string
}

// Span is the time from the first to the last arrival.
func (t *Trace) Span() time.Duration {
	if len(t.Requests) == 0 {
		return 0
	}
	return t.Requests[len(t.Requests)-1].Arrival - t.Requests[0].Arrival
}

// Scale returns a copy of t whose arrivals are compressed by factor x
// (x = 2 doubles the request rate). Workflow tool gaps and deadlines are
// kept: they are properties of the task, not of the load.
func (t *Trace) Scale(x float64) *Trace {
	if x <= 0 || x == 1 {
		return t
	}
	out := &Trace{Name: fmt.Sprintf("%s@%gx", t.Name, x), Requests: make([]Request, len(t.Requests)), Rules: t.Rules}
	copy(out.Requests, t.Requests)
	for i := range out.Requests {
		out.Requests[i].Arrival = time.Duration(float64(out.Requests[i].Arrival) / x)
	}
	return out
}

// Window returns the requests arriving in [0, d) (all when d <= 0). Every
// step of a workflow carries its first step's arrival, so a window keeps or
// drops whole workflows.
func (t *Trace) Window(d time.Duration) *Trace {
	if d <= 0 {
		return t
	}
	n := sort.Search(len(t.Requests), func(i int) bool { return t.Requests[i].Arrival >= d })
	out := &Trace{Name: t.Name, Requests: t.Requests[:n:n], Rules: t.Rules}
	return out
}

// Stats summarises a trace for reports.
type Stats struct {
	Requests       int
	Span           time.Duration
	RatePerSec     float64
	MeanPrompt     float64
	MeanOutput     float64
	IdealHitTokens float64 // fraction of prompt tokens in blocks seen before (infinite global cache)
}

// Summarise computes Stats.
func (t *Trace) Summarise() Stats {
	s := Stats{Requests: len(t.Requests), Span: t.Span()}
	if s.Requests == 0 {
		return s
	}
	seen := make(map[uint64]struct{})
	var prompt, output, hit, blocks float64
	for i := range t.Requests {
		r := &t.Requests[i]
		prompt += float64(r.PromptTokens)
		output += float64(r.OutputTokens)
		for _, h := range r.BlockHashes {
			if _, ok := seen[h]; ok {
				hit++
			} else {
				seen[h] = struct{}{}
			}
			blocks++
		}
	}
	s.MeanPrompt = prompt / float64(s.Requests)
	s.MeanOutput = output / float64(s.Requests)
	if blocks > 0 {
		s.IdealHitTokens = hit / blocks
	}
	if s.Span > 0 {
		s.RatePerSec = float64(s.Requests) / s.Span.Seconds()
	}
	return s
}
