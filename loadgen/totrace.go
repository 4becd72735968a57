package loadgen

import (
	"errors"
	"fmt"
	"time"

	"github.com/switchyard-ai/switchyard/internal/core/tokens"
	"github.com/switchyard-ai/switchyard/loadgen/traces"
)

// Trace turns a workload's arrivals into a simulator trace, so the
// simulator runs the very requests a live demo sends (`switchyard sim
// --format rise-fall` and `switchyard demo --scenario rise-fall` draw them
// from the same Workload and seed): each keeps its offset, tenant, class,
// deadline and output length (the simulated worker generates max_tokens),
// and its prompt is tokenized as the admitter does, so token counts and
// block hashes are the live run's. No TTFT or TPOT target is set, as the
// demo sets none: a request meets its SLO by answering before its
// deadline, on both sides.
//
// Workflow steps and repeated prompts are refused: a step waits for its
// predecessor, and a repeat would hit the live response cache, which the
// simulator does not have. Both scenarios built on Sizes have neither.
func (w Workload) Trace(name string) (*traces.Trace, error) {
	arrivals := w.Generate()
	if len(arrivals) == 0 {
		return nil, errors.New("the workload generates no requests")
	}
	tr := &traces.Trace{Name: name, Requests: make([]traces.Request, 0, len(arrivals))}
	for i, a := range arrivals {
		req := a.Request
		if req.Workflow != nil {
			return nil, fmt.Errorf("arrival %d is workflow step %d of %s: only single-turn workloads become traces", i, req.Workflow.Step, req.Workflow.ID)
		}
		if w.Sizes == nil {
			return nil, errors.New("only workloads with drawn sizes (unique prompts, no cache hits) become traces")
		}
		toks := tokens.Tokenize(req.PromptText())
		tr.Requests = append(tr.Requests, traces.Request{
			ID:           fmt.Sprintf("%s-%d", name, i),
			Arrival:      a.Offset,
			PromptTokens: len(toks),
			OutputTokens: max(req.MaxTokens, 1),
			BlockHashes:  tokens.BlockHashes(toks),
			Tenant:       a.Tenant,
			Priority:     req.Priority,
			Deadline:     time.Duration(req.DeadlineMs) * time.Millisecond,
			Model:        req.Model,
		})
	}
	tr.Rules = []string{fmt.Sprintf("loadgen workload %s, seed %d, over %s: the live demo's arrivals, tenants, classes and deadlines; no TTFT/TPOT targets (the demo sets none: met = answered by the deadline)", name, w.Seed, w.Duration)}
	return tr, nil
}
