// Package tally owns the accounting of a run: which submitted requests got
// which final result, and the counters the demo, loadgen and the fault
// tests report — submitted, completed, rejected, shed, failed, lost,
// duplicates, SLO attainment and cost per successful task. It is the one
// place these numbers are computed, so every report means the same thing.
//
// The invariant submitted == completed + rejected + shed + failed + lost
// always holds: each submitted id is counted once, by its first result; a
// second result for an id is a duplicate, never a second outcome.
package tally

import (
	"slices"
	"sync"
	"time"

	"github.com/switchyard-ai/switchyard/schemas"
)

// Event kinds the tally counts (published by the admitter, router and
// workflow tracker).
const (
	EventMoved             = "moved"
	EventWorkflowCancelled = "workflow_cancelled"
	// EventWorkflowStepRefused is a refused step of a workflow already
	// doomed; it carries gpu_seconds_saved.
	EventWorkflowStepRefused = "workflow_step_refused"
)

// Summary is a run's counters. The JSON names are the demo's and loadgen's
// --json contract.
type Summary struct {
	Submitted  int `json:"submitted"`
	Completed  int `json:"completed"`
	Rejected   int `json:"rejected"`
	Shed       int `json:"shed"`
	Failed     int `json:"failed"`
	Lost       int `json:"lost"`
	Duplicates int `json:"duplicates"`
	// LostIDs names the lost requests (at most MaxLostIDs, sorted), so
	// that `switchyard trail` can say where each one stopped.
	LostIDs []string `json:"lost_ids,omitempty"`
	// SLOAttainment is the share of submitted requests that completed
	// within their deadline. Shed, failed and lost requests count as
	// misses; rejected ones (invalid or not allowed) are left out, as no
	// schedule could have served them.
	SLOAttainment float64 `json:"slo_attainment"`
	// SLOAttainmentByPriority is the same per priority class.
	SLOAttainmentByPriority map[string]float64 `json:"slo_attainment_by_priority"`
	// CostPerSuccessUSD is the cost of every result (failed work costs GPU
	// time too) divided by the successes (ok within the SLO); 0 when there
	// were none.
	CostPerSuccessUSD float64 `json:"cost_per_success_usd"`
	CostUSD           float64 `json:"cost_usd"`
	GPUSeconds        float64 `json:"gpu_seconds"`
	Simulated         bool    `json:"simulated"`
	CacheHits         int     `json:"cache_hits"`
	Moved             int     `json:"moved"`
	Retried           int     `json:"retried"`
	// WorkflowsCancelled counts workflow_cancelled events; GPUSecondsSaved
	// sums their gpu_seconds_saved field.
	WorkflowsCancelled int     `json:"workflows_cancelled"`
	GPUSecondsSaved    float64 `json:"gpu_seconds_saved"`
	// ErrorsByCode counts first results by error code.
	ErrorsByCode map[string]int `json:"errors_by_code,omitempty"`
	// GPUHours is the GPU time the fleet was provisioned for during the
	// run, set by callers that know it (the demo); 0 when unknown.
	GPUHours float64 `json:"gpu_hours,omitempty"`
	// CompletedByGPU counts successes computed on each GPU generation
	// (cache hits excluded): where placement sent the work.
	CompletedByGPU map[string]int `json:"completed_by_gpu,omitempty"`
}

type entry struct {
	class   string
	at      time.Time
	results int
	first   schemas.Result
}

// MaxLostIDs bounds Summary.LostIDs: enough to trail every loss of a
// drill, short enough for one JSON line when a run loses thousands.
const MaxLostIDs = 100

// Tally accumulates submissions, results and events. Safe for concurrent
// use: results and events arrive on NATS callback goroutines.
type Tally struct {
	mu      sync.Mutex
	entries map[string]*entry
	// early holds results that arrived before their Submitted call (an
	// async publish can be answered from the cache before the submitter
	// records it); they are applied when the submission is recorded.
	early map[string][]schemas.Result
	seen  map[string]bool // event dedupe: kind + request id

	submitted, withResult, duplicates int
	moved, cancelled                  int
	saved                             float64
	simulated                         bool
}

// New returns an empty tally.
func New() *Tally {
	return &Tally{entries: map[string]*entry{}, early: map[string][]schemas.Result{}, seen: map[string]bool{}}
}

// Submitted records a request sent with the given priority class.
// Recording the same id twice counts it once.
func (t *Tally) Submitted(id, class string, at time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if _, ok := t.entries[id]; ok {
		return
	}
	e := &entry{class: class, at: at}
	t.entries[id] = e
	t.submitted++
	for _, r := range t.early[id] {
		t.apply(e, r)
	}
	delete(t.early, id)
}

// Observe records a result message. Results for ids this tally did not
// submit are held until their submission is recorded, and otherwise
// ignored, so a tally can watch sy.result.> on a shared system.
func (t *Tally) Observe(r schemas.Result) {
	t.mu.Lock()
	defer t.mu.Unlock()
	e, ok := t.entries[r.ID]
	if !ok {
		if len(t.early) < 100000 {
			t.early[r.ID] = append(t.early[r.ID], r)
		}
		return
	}
	t.apply(e, r)
}

func (t *Tally) apply(e *entry, r schemas.Result) {
	e.results++
	switch e.results {
	case 1:
		e.first = r
		t.withResult++
	case 2:
		t.duplicates++
	}
	if r.Simulated {
		t.simulated = true
	}
}

// Event records a decision event; only the kinds the summary reports
// count, each at most once per (kind, request id) when it names a request.
func (t *Tally) Event(ev schemas.Event) {
	if ev.Kind != EventMoved && ev.Kind != EventWorkflowCancelled && ev.Kind != EventWorkflowStepRefused {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if ev.RequestID != "" {
		k := ev.Kind + "\x00" + ev.RequestID
		if t.seen[k] {
			return
		}
		t.seen[k] = true
	}
	switch ev.Kind {
	case EventMoved:
		t.moved++
	case EventWorkflowCancelled:
		t.cancelled++
		t.saved += number(ev.Fields["gpu_seconds_saved"])
	case EventWorkflowStepRefused:
		// A later step of an already-doomed workflow: not a new
		// cancellation, but its predicted GPU time was saved too.
		t.saved += number(ev.Fields["gpu_seconds_saved"])
	}
}

// number reads a numeric event field whichever codec decoded it.
func number(v any) float64 {
	switch x := v.(type) {
	case float64:
		return x
	case float32:
		return float64(x)
	case int:
		return float64(x)
	case int8:
		return float64(x)
	case int16:
		return float64(x)
	case int32:
		return float64(x)
	case int64:
		return float64(x)
	case uint:
		return float64(x)
	case uint8:
		return float64(x)
	case uint16:
		return float64(x)
	case uint32:
		return float64(x)
	case uint64:
		return float64(x)
	}
	return 0
}

// OutstandingIDs are the submitted requests with no result yet.
func (t *Tally) OutstandingIDs() []string {
	t.mu.Lock()
	defer t.mu.Unlock()
	var out []string
	for id, e := range t.entries {
		if e.results == 0 {
			out = append(out, id)
		}
	}
	return out
}

// Outstanding is how many submitted requests have no result yet.
func (t *Tally) Outstanding() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.submitted - t.withResult
}

// Summary computes the counters now; requests without a result count as
// lost, so call it after the drain.
func (t *Tally) Summary() Summary {
	t.mu.Lock()
	defer t.mu.Unlock()
	s := Summary{
		Submitted:               t.submitted,
		Duplicates:              t.duplicates,
		Simulated:               t.simulated,
		Moved:                   t.moved,
		WorkflowsCancelled:      t.cancelled,
		GPUSecondsSaved:         t.saved,
		SLOAttainmentByPriority: map[string]float64{},
	}
	type frac struct{ met, of int }
	byClass := map[string]*frac{}
	var all frac
	successes := 0
	for id, e := range t.entries {
		r := e.first
		class := e.class
		if class == "" {
			class = r.Priority
		}
		if class == "" {
			class = "unknown"
		}
		f := byClass[class]
		if f == nil {
			f = &frac{}
			byClass[class] = f
		}
		if e.results == 0 {
			s.Lost++
			s.LostIDs = append(s.LostIDs, id)
			f.of++
			all.of++
			continue
		}
		s.CostUSD += r.CostUSD
		s.GPUSeconds += r.GPUSeconds
		if r.FromCache != "" {
			s.CacheHits++
		}
		if r.Attempt > 0 {
			s.Retried++
		}
		if r.Error != nil {
			if s.ErrorsByCode == nil {
				s.ErrorsByCode = map[string]int{}
			}
			s.ErrorsByCode[r.Error.Code]++
		}
		switch r.Status {
		case schemas.StatusOK:
			s.Completed++
			if r.GPU != "" && r.FromCache == "" {
				if s.CompletedByGPU == nil {
					s.CompletedByGPU = map[string]int{}
				}
				s.CompletedByGPU[r.GPU]++
			}
			f.of++
			all.of++
			if r.SLOMet {
				f.met++
				all.met++
				successes++
			}
		case schemas.StatusRejected:
			s.Rejected++
		case schemas.StatusShed:
			s.Shed++
			f.of++
			all.of++
		default:
			// failed, or a status this build does not know: not a success.
			s.Failed++
			f.of++
			all.of++
		}
	}
	if all.of > 0 {
		s.SLOAttainment = float64(all.met) / float64(all.of)
	}
	for c, f := range byClass {
		if f.of > 0 {
			s.SLOAttainmentByPriority[c] = float64(f.met) / float64(f.of)
		}
	}
	if successes > 0 {
		s.CostPerSuccessUSD = s.CostUSD / float64(successes)
	}
	slices.Sort(s.LostIDs)
	if len(s.LostIDs) > MaxLostIDs {
		s.LostIDs = s.LostIDs[:MaxLostIDs]
	}
	return s
}

// Check reports whether the summary's accounting is consistent:
// submitted == completed + rejected + shed + failed + lost.
func (s Summary) Check() bool {
	return s.Submitted == s.Completed+s.Rejected+s.Shed+s.Failed+s.Lost
}
