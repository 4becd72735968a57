package sim

import (
	"sort"
	"time"

	"github.com/switchyard-ai/switchyard/internal/core/routing"
	"github.com/switchyard-ai/switchyard/internal/core/stats"
	"github.com/switchyard-ai/switchyard/schemas"
)

// Result is one policy's outcome on one trace.
type Result struct {
	Name string `json:"name"`
	// Requests counts issued requests; workflow steps never sent because an
	// earlier step failed are in Skipped instead.
	Requests  int `json:"requests"`
	Succeeded int `json:"succeeded"` // finished and met its SLO
	Finished  int `json:"finished"`
	Failed    int `json:"failed"`
	Shed      int `json:"shed"`
	Skipped   int `json:"skipped,omitempty"`
	// SLOAttainment is Succeeded / Requests: shed and failed requests count
	// against it.
	SLOAttainment float64 `json:"slo_attainment"`
	// Tasks are workflows when the trace has them, else requests; a
	// workflow succeeds when every step finished by the workflow deadline.
	Tasks          int     `json:"tasks"`
	TasksSucceeded int     `json:"tasks_succeeded"`
	TaskAttainment float64 `json:"task_attainment"`

	// GoodputRPS is successful requests per second of makespan;
	// GoodputPerGPUHour per provisioned GPU-hour.
	GoodputRPS        float64 `json:"goodput_rps"`
	GoodputPerGPUHour float64 `json:"goodput_per_gpu_hour"`
	// GPUHours is provisioned GPU time: every GPU for the whole makespan,
	// idle or busy. CostUSD prices it at each generation's $/hour, and
	// CostPerSuccessUSD divides it by successful tasks, so shed, failed and
	// wasted work all raise it (0 when nothing succeeded).
	GPUHours          float64 `json:"gpu_hours"`
	BusyGPUHours      float64 `json:"busy_gpu_hours"`
	CostUSD           float64 `json:"cost_usd"`
	CostPerSuccessUSD float64 `json:"cost_per_success_usd"`
	MakespanSeconds   float64 `json:"makespan_s"`

	TTFTP50ms  float64 `json:"ttft_p50_ms"`
	TTFTP90ms  float64 `json:"ttft_p90_ms"`
	TTFTP99ms  float64 `json:"ttft_p99_ms"`
	TTFTMeanms float64 `json:"ttft_mean_ms"`
	// ITL is each finished request's mean time per output token after the
	// first; the percentiles are over requests.
	ITLP50ms float64 `json:"itl_p50_ms"`
	ITLP99ms float64 `json:"itl_p99_ms"`
	// PrefixHitRate is cached prompt tokens over prompt tokens of finished
	// requests.
	PrefixHitRate float64 `json:"prefix_hit_rate"`
	// WastedGPUSeconds is GPU time spent on requests of workflows that did
	// not succeed (doomed work).
	WastedGPUSeconds float64 `json:"wasted_gpu_seconds"`
	OutputTokPerSec  float64 `json:"output_tok_per_s"`

	ByPriority map[string]ClassResult `json:"slo_attainment_by_priority"`

	// Autoscale is what the control loop did (autoscaled runs only); the
	// GPU-hours above then count each replica only while provisioned.
	Autoscale *AutoscaleStats `json:"autoscale,omitempty"`

	// Reliability is what breakers and retries did.
	Reliability Reliability `json:"reliability"`
	// LearnedError is the prediction error the router core learned per
	// GPU kind and phase from the run's results (routing.Core.LearnedError;
	// empty with Config.FixedError or for a policy that takes none).
	LearnedError []routing.LearnedSpread `json:"learned_error,omitempty"`

	// Split counts the requests whose prefill ran on one worker and
	// decode on another (their last attempt's placement), and
	// TransferP99ms the priced KV transfer their decode legs waited.
	Split         int     `json:"split,omitempty"`
	TransferP99ms float64 `json:"transfer_p99_ms,omitempty"`

	Steps       uint64  `json:"engine_steps"`
	WallSeconds float64 `json:"wall_s"`

	// TTFTs holds every finished request's TTFT in seconds, sorted, for
	// CDF charts; it is not serialised.
	TTFTs []float64 `json:"-"`
	ITLs  []float64 `json:"-"`
}

// ClassResult is one priority class's outcome.
type ClassResult struct {
	Requests      int     `json:"requests"`
	Succeeded     int     `json:"succeeded"`
	Shed          int     `json:"shed"`
	Failed        int     `json:"failed"`
	SLOAttainment float64 `json:"slo_attainment"`
	TTFTP99ms     float64 `json:"ttft_p99_ms"`
	// ITLP99ms is the class's p99 over finished requests of the mean
	// time per output token after the first (what its TPOT target
	// judges).
	ITLP99ms float64 `json:"itl_p99_ms,omitempty"`
}

func (r *runner) result(name string) *Result {
	res := &Result{Name: name, ByPriority: map[string]ClassResult{}, Steps: r.steps}
	var prompt, cached, outTok float64
	ttftByClass := map[string][]float64{}
	itlByClass := map[string][]float64{}
	var transfers []float64
	wfOK := map[string]bool{}
	var end int64
	for i := range r.reqs {
		st := &r.reqs[i]
		q := &r.tr.Requests[i]
		if st.status == stSkipped {
			res.Skipped++
			continue
		}
		res.Requests++
		c := res.ByPriority[q.Priority]
		c.Requests++
		end = max(end, st.doneAt)
		switch st.status {
		case stOK:
			res.Finished++
			prompt += float64(q.PromptTokens)
			cached += float64(st.cached)
			outTok += float64(q.OutputTokens)
			res.TTFTs = append(res.TTFTs, st.ttft)
			res.ITLs = append(res.ITLs, st.itl)
			ttftByClass[q.Priority] = append(ttftByClass[q.Priority], st.ttft)
			if q.OutputTokens > 1 {
				itlByClass[q.Priority] = append(itlByClass[q.Priority], st.itl)
			}
			if st.phase == schemas.PhaseDecode {
				res.Split++
				transfers = append(transfers, float64(st.transfer)/1e9)
			}
			if st.sloMet {
				res.Succeeded++
				c.Succeeded++
			}
		case stShed:
			res.Shed++
			c.Shed++
		default:
			res.Failed++
			c.Failed++
		}
		res.ByPriority[q.Priority] = c
		if w := q.Workflow; w != nil && w.Step == w.Of && st.status == stOK {
			first := int32(i)
			for r.tr.Requests[first].Workflow.Prev >= 0 {
				first = int32(r.tr.Requests[first].Workflow.Prev)
			}
			if w.InTime(time.Duration(st.doneAt-r.reqs[first].submitAt)) && !r.wfFail[w.ID] {
				wfOK[w.ID] = true
			}
		}
	}
	// Wasted GPU time: every request of a workflow that did not succeed.
	wfSeen := map[string]bool{}
	for i := range r.reqs {
		q := &r.tr.Requests[i]
		if q.Workflow == nil {
			continue
		}
		wfSeen[q.Workflow.ID] = true
		if !wfOK[q.Workflow.ID] {
			res.WastedGPUSeconds += r.reqs[i].gpuSec
		}
	}
	if len(wfSeen) > 0 {
		res.Tasks, res.TasksSucceeded = len(wfSeen), len(wfOK)
	} else {
		res.Tasks, res.TasksSucceeded = res.Requests, res.Succeeded
	}
	res.TaskAttainment = ratio(res.TasksSucceeded, res.Tasks)
	res.SLOAttainment = ratio(res.Succeeded, res.Requests)

	// Provisioned time runs from the first arrival to the last resolution
	// (at least the trace's span): a policy that needs longer to drain its
	// backlog pays for the GPUs that long.
	first := int64(r.tr.Requests[0].Arrival)
	last := int64(r.tr.Requests[len(r.tr.Requests)-1].Arrival)
	span := float64(max(end, last)-first) / 1e9
	if span <= 0 {
		span = 1e-9
	}
	res.MakespanSeconds = span
	endAt := first + int64(span*1e9)
	for _, w := range r.ws {
		prov := r.provisionedSeconds(w, first, endAt)
		res.GPUHours += prov / 3600 * float64(w.rep.TP)
		res.CostUSD += prov / 3600 * w.rep.PricePerHour()
		res.BusyGPUHours += w.busyGPU / 3600
	}
	r.autoscaleResult(res, first, endAt)
	res.GoodputRPS = float64(res.Succeeded) / span
	res.OutputTokPerSec = outTok / span
	if res.GPUHours > 0 {
		res.GoodputPerGPUHour = float64(res.TasksSucceeded) / res.GPUHours
	}
	if res.TasksSucceeded > 0 {
		res.CostPerSuccessUSD = res.CostUSD / float64(res.TasksSucceeded)
	}
	if prompt > 0 {
		res.PrefixHitRate = cached / prompt
	}
	sort.Float64s(res.TTFTs)
	sort.Float64s(res.ITLs)
	res.TTFTP50ms = 1000 * stats.Quantile(res.TTFTs, 0.5)
	res.TTFTP90ms = 1000 * stats.Quantile(res.TTFTs, 0.9)
	res.TTFTP99ms = 1000 * stats.Quantile(res.TTFTs, 0.99)
	res.TTFTMeanms = 1000 * mean(res.TTFTs)
	res.ITLP50ms = 1000 * stats.Quantile(res.ITLs, 0.5)
	res.ITLP99ms = 1000 * stats.Quantile(res.ITLs, 0.99)
	sort.Float64s(transfers)
	res.TransferP99ms = 1000 * stats.Quantile(transfers, 0.99)
	for p, c := range res.ByPriority {
		c.SLOAttainment = ratio(c.Succeeded, c.Requests)
		xs := ttftByClass[p]
		sort.Float64s(xs)
		c.TTFTP99ms = 1000 * stats.Quantile(xs, 0.99)
		is := itlByClass[p]
		sort.Float64s(is)
		c.ITLP99ms = 1000 * stats.Quantile(is, 0.99)
		res.ByPriority[p] = c
	}
	for _, p := range schemas.Priorities {
		if _, ok := res.ByPriority[p]; !ok {
			delete(res.ByPriority, p)
		}
	}
	return res
}

func ratio(a, b int) float64 {
	if b == 0 {
		return 0
	}
	return float64(a) / float64(b)
}

func mean(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := 0.0
	for _, x := range xs {
		s += x
	}
	return s / float64(len(xs))
}

// Reliability is what the router core's reliability machinery did in a
// run: the same breakers, retry budget and reaper as live, counted from the
// events it emitted.
type Reliability struct {
	// Faults is how many scheduled faults struck (FaultsMissed named no
	// worker that existed then).
	Faults       int `json:"faults,omitempty"`
	FaultsMissed int `json:"faults_missed,omitempty"`
	// BreakerOpened counts transitions to open, by any cause.
	BreakerOpened int `json:"breaker_opened"`
	// Retried counts requests re-placed after their worker was lost;
	// RetryRefused those the retry budget or their deadline refused.
	Retried      int `json:"retried"`
	RetryRefused int `json:"retry_refused"`
}

func (rl *Reliability) count(ev *schemas.Event) {
	if ev == nil {
		return
	}
	switch ev.Kind {
	case "breaker_open":
		rl.BreakerOpened++
	case "retry":
		if ok, _ := ev.Fields["retry"].(bool); ok {
			rl.Retried++
		} else {
			rl.RetryRefused++
		}
	}
}
