package placement

import (
	"math"

	"github.com/switchyard-ai/switchyard/internal/core/fleet"
)

// Axis: workflow context (row AxisWorkflow in axes.go).
//
// Why: in an agentic chain, a late or failed step wastes every step
// before it.
//
// Reads: the request's workflow position (step k of n) and the workflow's
// deadline.
//
// Term: (1) the closer a workflow is to finishing, the more its time is
// worth: workflow_factor = 1 + FinishWeight × (k−1)/n multiplies
// value_of_time, favouring fast placements for steps that finish
// workflows; and (2) the workflow's deadline is split across the steps
// left: this step must finish early enough to leave the remaining n−k
// steps, each estimated at this step's own prefill+decode, before the
// workflow deadline. That per-step deadline feeds the latency axis, so a
// step that would doom its workflow on a slow worker is not put there.
// Steps of one workflow share their prefix, so the KV axis keeps them on
// the worker that holds it. No filter of its own.
//
// Trade-offs: the steps left are assumed to cost what this one does on
// this worker, which overstates a chain whose later steps are short and
// understates one that grows; the factor is linear in the fraction done,
// with FinishWeight chosen, not fitted.
//
// Disabled: workflow_factor is 1 and only the request's own deadline counts.

func workflowTerm(p *Placer, c *cand, r *Request) {
	c.t.WorkflowFactor = p.rp.workflowFactor
	c.deadlineIn = effectiveDeadline(p, r, c.t.PrefillSeconds, c.t.DecodeSeconds)
}

// effectiveDeadline is the seconds from now this step must finish in on a
// worker where it prefills and decodes in the given times: the request's
// own deadline, or sooner when the steps left of its workflow need the
// time; +Inf for none.
func effectiveDeadline(p *Placer, _ *Request, prefill, decode float64) float64 {
	d := p.rp.deadlineIn
	if !p.rp.stepped {
		return d
	}
	if step := p.rp.workflowDeadlineIn - p.rp.stepsLeft*(prefill+decode); step < d {
		return step
	}
	return d
}

// workflowPrepare sets the request's workflow parameters, once per
// placement: its factor, and whether (and over how many steps left) the
// workflow's deadline is split, which the scan's bound reads too.
func workflowPrepare(p *Placer, _ *fleet.Fleet, r *Request) {
	p.rp.workflowFactor = workflowFactor(p, r)
	p.rp.stepped, p.rp.stepsLeft = false, 0
	if wf := r.Workflow; p.on[axWorkflow] && wf != nil && !math.IsInf(p.rp.workflowDeadlineIn, 1) {
		p.rp.stepped, p.rp.stepsLeft = true, float64(max(wf.Of-wf.Step, 0))
	}
}

// workflowFactor depends on the request alone, so it is computed once.
func workflowFactor(p *Placer, r *Request) float64 {
	wf := r.Workflow
	if !p.on[axWorkflow] || wf == nil || wf.Of <= 0 || wf.Step <= 1 {
		return 1
	}
	done := float64(wf.Step-1) / float64(wf.Of)
	if done > 1 {
		done = 1
	}
	return 1 + p.opts.FinishWeight*done
}
