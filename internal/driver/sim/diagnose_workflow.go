package sim

import (
	"math"
	"sort"
	"strings"
	"time"

	"github.com/switchyard-ai/switchyard/internal/core/perf"
	"github.com/switchyard-ai/switchyard/internal/core/stats"
	"github.com/switchyard-ai/switchyard/loadgen/traces"
	"github.com/switchyard-ai/switchyard/schemas"
)

// WorkflowDiagnosis is where one class's workflows lost their end-to-end
// deadline. A request-level breakdown (ClassDiagnosis) cannot show it: a
// workflow can miss while every one of its steps meets its own SLO, and
// then the question is which part of its elapsed time outgrew the budget —
// the router's queue, first tokens, decoding at the batch it ran in, or the
// client's tool calls between steps.
type WorkflowDiagnosis struct {
	// Class is the workflow's class (its first step's).
	Class     string `json:"class"`
	Workflows int    `json:"workflows"`
	Succeeded int    `json:"succeeded"`
	// Late workflows had every step succeed but finished after the
	// deadline; Broken ones had a step fail, be shed or never be issued.
	Late   int `json:"late"`
	Broken int `json:"broken"`
	// Of the late workflows, per workflow on average: the deadline, the
	// time from the first step's arrival to the last step's end, and that
	// time split into queue wait (submission to placement), TTFT, decode
	// and tool gaps (a step's end to the next step's arrival).
	// LateDecode1S is what the same decodes would take alone on the GPUs
	// that ran them (the roofline step at batch 1): LateDecodeS above it is
	// the price of the batch they shared.
	LateDeadlineS   float64        `json:"late_deadline_s,omitempty"`
	LateElapsedS    float64        `json:"late_elapsed_s,omitempty"`
	LateWaitS       float64        `json:"late_wait_s,omitempty"`
	LateTTFTS       float64        `json:"late_ttft_s,omitempty"`
	LateDecodeS     float64        `json:"late_decode_s,omitempty"`
	LateDecode1S    float64        `json:"late_decode_batch1_s,omitempty"`
	LateToolGapS    float64        `json:"late_tool_gap_s,omitempty"`
	LateOverrunP50  float64        `json:"late_overrun_p50,omitempty"` // elapsed ÷ deadline − 1, median
	LateStepsByPool map[string]int `json:"late_steps_by_gpu,omitempty"`
}

// workflowStep is one finished or failed step as the diagnosis keeps it.
type workflowStep struct {
	submitted, placed, done float64 // seconds of virtual time
	ttft, decode, decode1   float64
	ok                      bool
	pool                    string
}

// workflowDiagnoser collects steps by workflow from Config.OnResolve.
type workflowDiagnoser struct {
	cfg  *Config
	pred *perf.Predictor
	// by workflow id: its class, step count, deadline and the steps seen.
	wfs map[string]*workflowSeen
}

type workflowSeen struct {
	class    string
	of       int
	deadline float64
	wf       traces.Workflow // for InTime, the one rule of lateness
	steps    map[int]workflowStep
}

func newWorkflowDiagnoser(cfg *Config) *workflowDiagnoser {
	return &workflowDiagnoser{cfg: cfg, pred: perf.NewPredictor(cfg.Catalog), wfs: map[string]*workflowSeen{}}
}

func (d *workflowDiagnoser) observe(o Outcome) {
	w := o.Request.Workflow
	if w == nil {
		return
	}
	s := d.wfs[w.ID]
	if s == nil {
		s = &workflowSeen{of: w.Of, deadline: w.Deadline.Seconds(), wf: *w, steps: map[int]workflowStep{}}
		d.wfs[w.ID] = s
	}
	if w.Step == 1 {
		s.class = o.Request.Priority
	}
	st := workflowStep{submitted: o.Submitted.Sub(Epoch).Seconds(), done: o.Done.Sub(Epoch).Seconds(), ok: o.Status == "ok"}
	st.placed = st.submitted
	if !o.Placed.IsZero() {
		st.placed = o.Placed.Sub(Epoch).Seconds()
	}
	if st.ok {
		st.ttft = o.TTFT
		st.decode = max(st.done-st.placed-o.TTFT, 0)
		if g, ok := d.poolSpec(o.Worker); ok {
			st.pool = g.GPU
			model, dtype := firstNonEmpty(o.Request.Model, g.Model, d.cfg.Model), firstNonEmpty(d.cfg.Dtype, "bf16")
			alone := d.pred.DecodeSeconds(g.GPU, model, dtype, max(g.TP, 1), o.Request.OutputTokens-1, 1, o.Request.PromptTokens)
			if !math.IsInf(alone, 0) {
				st.decode1 = alone
			}
		}
	}
	s.steps[w.Step] = st
}

// poolOf is the GPU type of the pool a worker named GPU-NN belongs to;
// "-" for none (never placed).
func poolOf(worker string) string {
	if worker == "" {
		return "-"
	}
	if i := strings.LastIndexByte(worker, '-'); i > 0 {
		return worker[:i]
	}
	return worker
}

// poolSpec is the GPUSpec of the pool a worker belongs to.
func (d *workflowDiagnoser) poolSpec(worker string) (GPUSpec, bool) {
	pool := poolOf(worker)
	for _, g := range d.cfg.GPUs {
		if g.GPU == pool {
			return g, true
		}
	}
	return GPUSpec{}, false
}

func firstNonEmpty(s ...string) string {
	for _, v := range s {
		if v != "" {
			return v
		}
	}
	return ""
}

// summary is one row per class, in priority order.
func (d *workflowDiagnoser) summary() []WorkflowDiagnosis {
	type acc struct {
		row      WorkflowDiagnosis
		overruns []float64
	}
	by := map[string]*acc{}
	for _, s := range d.wfs {
		class := s.class
		if class == "" {
			class = "-"
		}
		a := by[class]
		if a == nil {
			a = &acc{row: WorkflowDiagnosis{Class: class}}
			by[class] = a
		}
		a.row.Workflows++
		first, okAll := math.Inf(1), len(s.steps) == s.of
		end := 0.0
		for _, st := range s.steps {
			okAll = okAll && st.ok
			first = math.Min(first, st.submitted)
			end = math.Max(end, st.done)
		}
		switch {
		case !okAll:
			a.row.Broken++
			continue
		case s.wf.InTime(time.Duration((end - first) * float64(time.Second))):
			a.row.Succeeded++
			continue
		}
		a.row.Late++
		r := &a.row
		r.LateDeadlineS += s.deadline
		r.LateElapsedS += end - first
		if s.deadline > 0 {
			a.overruns = append(a.overruns, (end-first)/s.deadline-1)
		}
		if r.LateStepsByPool == nil {
			r.LateStepsByPool = map[string]int{}
		}
		for k := 1; k <= s.of; k++ {
			st := s.steps[k]
			r.LateWaitS += st.placed - st.submitted
			r.LateTTFTS += st.ttft
			r.LateDecodeS += st.decode
			r.LateDecode1S += st.decode1
			if prev, ok := s.steps[k-1]; ok {
				r.LateToolGapS += max(st.submitted-prev.done, 0)
			}
			if st.pool != "" {
				r.LateStepsByPool[st.pool]++
			}
		}
	}
	out := make([]WorkflowDiagnosis, 0, len(by))
	for _, a := range by {
		r := a.row
		if n := float64(r.Late); n > 0 {
			r.LateDeadlineS /= n
			r.LateElapsedS /= n
			r.LateWaitS /= n
			r.LateTTFTS /= n
			r.LateDecodeS /= n
			r.LateDecode1S /= n
			r.LateToolGapS /= n
			sort.Float64s(a.overruns)
			r.LateOverrunP50 = stats.Quantile(a.overruns, 0.5)
		}
		out = append(out, r)
	}
	// A class the schema does not know (a workflow whose first step never
	// resolved) sorts last.
	rank := func(class string) int {
		if r := schemas.PriorityRank(class); r >= 0 {
			return r
		}
		return len(schemas.Priorities)
	}
	sort.Slice(out, func(i, j int) bool { return rank(out[i].Class) < rank(out[j].Class) })
	return out
}
