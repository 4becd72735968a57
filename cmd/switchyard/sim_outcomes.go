package main

import (
	"bufio"
	"encoding/json"
	"os"
	"sync"
	"time"

	"github.com/switchyard-ai/switchyard/internal/core/control"
	"github.com/switchyard-ai/switchyard/internal/driver/sim"
)

// outcomeLine is one request's outcome as `sim --outcomes` writes it: the
// per-request record behind the summary table, so a miss can be placed
// in time (which burst, which scale-down) rather than only counted.
type outcomeLine struct {
	Policy      string  `json:"policy"`
	RateScale   float64 `json:"rate_scale"`
	ID          string  `json:"id"`
	Tenant      string  `json:"tenant"`
	Class       string  `json:"class"`
	SubmittedS  float64 `json:"submitted_s"`
	PlacedS     float64 `json:"placed_s,omitempty"`
	DoneS       float64 `json:"done_s"`
	Status      string  `json:"status"`
	Code        string  `json:"code,omitempty"`
	SLOMet      bool    `json:"slo_met"`
	TTFTMs      float64 `json:"ttft_ms,omitempty"`
	Worker      string  `json:"worker,omitempty"`
	Attempts    int     `json:"attempts"`
	Preemptions int     `json:"preemptions,omitempty"`
	// What the request asked for, so a miss can be read against its size
	// and targets.
	PromptTokens int     `json:"prompt_tokens"`
	OutputTokens int     `json:"output_tokens"`
	TTFTTargetMs float64 `json:"ttft_target_ms,omitempty"`
	TPOTTargetMs float64 `json:"tpot_target_ms,omitempty"`
	DeadlineS    float64 `json:"deadline_s,omitempty"`
	// ITLMs is the mean time between output tokens, for finished requests.
	ITLMs float64 `json:"itl_ms,omitempty"`
	// HeldReason: why the router first held it unplaced (sim.Outcome).
	HeldReason string `json:"held_reason,omitempty"`
	// What its placement predicted (sim.Outcome.Predicted*): TTFT from
	// placement, TPOT, and the queue term of that TTFT.
	PredictedTTFTMs  float64 `json:"predicted_ttft_ms,omitempty"`
	PredictedTPOTMs  float64 `json:"predicted_tpot_ms,omitempty"`
	PredictedQueueMs float64 `json:"predicted_queue_ms,omitempty"`
	// Workflow steps: the workflow, this step's place in it, and the
	// whole workflow's deadline (seconds after its first step's arrival),
	// so a late workflow can be read step by step.
	Workflow          string  `json:"workflow,omitempty"`
	WorkflowStep      int     `json:"workflow_step,omitempty"`
	WorkflowSteps     int     `json:"workflow_steps,omitempty"`
	WorkflowDeadlineS float64 `json:"workflow_deadline_s,omitempty"`
}

// decisionLine is one control decision as `sim --decisions` writes it:
// the log behind an autoscaled run's GPU-hours (why the fleet grew, held
// or shrank, and on what rate and forecast).
type decisionLine struct {
	Policy    string           `json:"policy"`
	RateScale float64          `json:"rate_scale"`
	AtS       float64          `json:"at_s"`
	Pools     []decisionPool   `json:"pools"`
	Changes   []decisionChange `json:"changes,omitempty"`
}

// decisionPool is one pool's state after a decision (control.ReplicaDecision
// in the file's snake_case).
type decisionPool struct {
	Pool        string  `json:"pool"`
	ArrivalRate float64 `json:"arrival_rate"`
	Forecast    float64 `json:"forecast"`
	Capacity    float64 `json:"capacity_per_replica"`
	Backlog     int     `json:"backlog"`
	Held        int     `json:"held,omitempty"`
	Current     int     `json:"current"`
	Raw         int     `json:"raw"`
	Desired     int     `json:"desired"`
	Reason      string  `json:"reason,omitempty"`
}

// decisionChange is one change a decision made (control.Change).
type decisionChange struct {
	Kind   string `json:"kind"`
	Target string `json:"target"`
	From   string `json:"from"`
	To     string `json:"to"`
	Reason string `json:"reason,omitempty"`
}

// jsonLines serialises the parallel runs' records onto one writer.
type jsonLines struct {
	mu  sync.Mutex
	w   *bufio.Writer
	enc *json.Encoder
}

// createJSONLines creates path for records (nil and a no-op close for
// an empty path); close flushes and closes it.
func createJSONLines(path string) (*jsonLines, func(), error) {
	if path == "" {
		return nil, func() {}, nil
	}
	f, err := os.Create(path)
	if err != nil {
		return nil, nil, err
	}
	bw := bufio.NewWriterSize(f, 1<<16)
	o := &jsonLines{w: bw, enc: json.NewEncoder(bw)}
	return o, func() { o.flush(); f.Close() }, nil
}

// record returns the OnResolve hook for one run.
func (o *jsonLines) record(policy string, scale float64) func(sim.Outcome) {
	secs := func(t time.Time) float64 { return t.Sub(sim.Epoch).Seconds() }
	ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
	return func(out sim.Outcome) {
		l := outcomeLine{Policy: policy, RateScale: scale, ID: out.Request.ID, Tenant: out.Request.Tenant,
			Class: out.Request.Priority, SubmittedS: secs(out.Submitted), DoneS: secs(out.Done), Status: out.Status,
			Code: out.Code, SLOMet: out.SLOMet, TTFTMs: out.TTFT * 1000, Worker: out.Worker, Attempts: out.Attempts,
			Preemptions: out.Preemptions, HeldReason: out.HeldReason,
			PromptTokens: out.Request.PromptTokens, OutputTokens: out.Request.OutputTokens,
			TTFTTargetMs: ms(out.Request.TTFTTarget), TPOTTargetMs: ms(out.Request.TPOTTarget),
			DeadlineS: out.Request.Deadline.Seconds(), ITLMs: out.ITL * 1000,
			PredictedTTFTMs: out.PredictedTTFT * 1000, PredictedTPOTMs: out.PredictedTPOT * 1000, PredictedQueueMs: out.PredictedQueue * 1000}
		if !out.Placed.IsZero() {
			l.PlacedS = secs(out.Placed)
		}
		if w := out.Request.Workflow; w != nil {
			l.Workflow, l.WorkflowStep, l.WorkflowSteps, l.WorkflowDeadlineS = w.ID, w.Step, w.Of, w.Deadline.Seconds()
		}
		o.mu.Lock()
		defer o.mu.Unlock()
		_ = o.enc.Encode(&l)
	}
}

// decision returns the OnDecision hook for one autoscaled run.
func (o *jsonLines) decision(policy string, scale float64) func(time.Duration, control.Decision) {
	return func(since time.Duration, d control.Decision) {
		l := decisionLine{Policy: policy, RateScale: scale, AtS: since.Seconds()}
		for _, r := range d.Replicas {
			l.Pools = append(l.Pools, decisionPool{Pool: r.Pool, ArrivalRate: r.ArrivalRate, Forecast: r.Forecast, Capacity: r.Capacity,
				Backlog: r.Backlog, Held: r.Held, Current: r.Current, Raw: r.Raw, Desired: r.Desired, Reason: r.Reason})
		}
		for _, c := range d.Changes {
			l.Changes = append(l.Changes, decisionChange{Kind: c.Kind, Target: c.Target, From: c.From, To: c.To, Reason: c.Reason})
		}
		o.mu.Lock()
		defer o.mu.Unlock()
		_ = o.enc.Encode(&l)
	}
}

func (o *jsonLines) flush() {
	o.mu.Lock()
	defer o.mu.Unlock()
	_ = o.w.Flush()
}
