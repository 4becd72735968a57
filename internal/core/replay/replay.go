// Package replay owns incident replay: it feeds a router's journaled
// inputs through a fresh routing.Core — the same code the live router runs
// — and compares the decisions with the ones recorded in EVENTS. With the
// recorded policy every decision must come out the same (any divergence is
// reported, with both sides); with another policy the same inputs answer
// "what if". It also summarises the window: a timeline, sheds, breaker
// trips, slow placements and per-tenant SLO attainment.
//
// Replay always starts from the beginning of a router's journal, because
// the router's state at a window's start (its fleet view, prefix index and
// held requests) is the product of everything before it; only decisions
// inside the window are reported.
package replay

import (
	"sort"
	"time"

	"github.com/switchyard-ai/switchyard/internal/core/routing"
	"github.com/switchyard-ai/switchyard/internal/core/slo"
	"github.com/switchyard-ai/switchyard/schemas"
)

// Decision is one routing outcome for one request.
type Decision struct {
	ID     string    `json:"id"`
	Tenant string    `json:"tenant,omitempty"`
	Kind   string    `json:"kind"` // "placed" or "failed"
	Worker string    `json:"worker,omitempty"`
	Code   string    `json:"code,omitempty"`
	At     time.Time `json:"at"`
	// QueueMs is submission to decision.
	QueueMs float64 `json:"queue_ms"`
	Class   string  `json:"class,omitempty"`
	GPU     string  `json:"gpu,omitempty"`
	// Predicted is the core's breakdown of a placement (report.go);
	// Infeasible says why the cost model would refuse it (RunEvaluated).
	Predicted  *Predicted `json:"predicted,omitempty"`
	Infeasible string     `json:"infeasible,omitempty"`
}

// Same reports whether two decisions agree.
func (d Decision) Same(o Decision) bool {
	return d.Kind == o.Kind && d.Worker == o.Worker && d.Code == o.Code
}

// Refs lists the ADMITTED stream sequences a journal refers to instead of
// carrying the admitted request, in journal order.
func Refs(journal []routing.JournalEntry) []uint64 {
	var out []uint64
	for i := range journal {
		if journal[i].AdmittedSeq != 0 {
			out = append(out, journal[i].AdmittedSeq)
		}
	}
	return out
}

// Resolve turns journal entries back into the Inputs the router applied,
// taking each referenced admitted request from admitted (ADMITTED stream
// sequence → request as stored). An entry whose request the stream no
// longer holds (aged or sized out before the journal was) cannot be
// applied: it is left out and counted, and the decisions that depended on
// it show up as divergences rather than as a silently different run.
func Resolve(journal []routing.JournalEntry, admitted map[uint64]*schemas.Admitted) (inputs []routing.Input, unresolved int) {
	inputs = make([]routing.Input, 0, len(journal))
	for i := range journal {
		in := journal[i].Input
		if seq := journal[i].AdmittedSeq; seq != 0 {
			adm, ok := admitted[seq]
			if !ok {
				unresolved++
				continue
			}
			in.Admitted = adm
		}
		inputs = append(inputs, in)
	}
	return inputs, unresolved
}

// Run replays one router instance's journal through core and returns every
// decision it makes, in order.
func Run(core *routing.Core, journal []routing.Input) []Decision {
	var out []Decision
	for _, in := range journal {
		for _, a := range core.Apply(in, nil) {
			// The same event the live router published for the action
			// (routing.EventFor), read into a decision.
			ev, ok := routing.EventFor(in, a)
			if !ok {
				continue
			}
			d := Decision{ID: ev.RequestID, Tenant: ev.Tenant, At: ev.At}
			switch a.Kind {
			case routing.ActDispatch:
				d.Kind, d.Worker, d.GPU, d.Predicted = ev.Kind, ev.WorkerID, a.GPU, predictedOf(a.Terms)
			case routing.ActFail:
				d.Kind, d.Code = "failed", ev.Kind
			default:
				continue
			}
			d.QueueMs, d.Class = ms(in.At.Sub(a.Held.Adm.SubmittedAt)), a.Held.Adm.Priority
			out = append(out, d)
		}
	}
	return out
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// FromEvent turns a recorded router event into a Decision; ok is false for
// events that are not routing outcomes.
func FromEvent(ev schemas.Event) (Decision, bool) {
	if ev.Service != "router" || ev.RequestID == "" {
		return Decision{}, false
	}
	switch ev.Kind {
	case "placed":
		return Decision{ID: ev.RequestID, Tenant: ev.Tenant, Kind: "placed", Worker: ev.WorkerID, At: ev.At}, true
	case "delayed", "leadership", "duplicate_suppressed":
		return Decision{}, false
	}
	return Decision{ID: ev.RequestID, Tenant: ev.Tenant, Kind: "failed", Code: ev.Kind, At: ev.At}, true
}

// Divergence is a request decided differently in replay.
type Divergence struct {
	ID       string    `json:"id"`
	Recorded *Decision `json:"recorded,omitempty"`
	Replayed *Decision `json:"replayed,omitempty"`
}

// Bucket is one slice of the timeline.
type Bucket struct {
	Start    time.Time `json:"start"`
	Placed   int       `json:"placed"`
	Failed   int       `json:"failed"`
	Shed     int       `json:"shed"`
	Rejected int       `json:"rejected"`
}

// TenantSLO is one tenant's outcome in the window.
type TenantSLO struct {
	Requests      int     `json:"requests"`
	OK            int     `json:"ok"`
	SLOMet        int     `json:"slo_met"`
	SLOAttainment float64 `json:"slo_attainment"`
}

// Report is what `switchyard replay` prints; its JSON is the last line of
// --json output.
type Report struct {
	Policy         string    `json:"policy"`
	RecordedPolicy string    `json:"recorded_policy"`
	Since          time.Time `json:"since"`
	Until          time.Time `json:"until"`
	JournalStart   time.Time `json:"journal_start"`
	// Unresolved counts journaled admissions whose request the ADMITTED
	// stream no longer held, so they could not be replayed.
	Unresolved     int                  `json:"unresolved_inputs,omitempty"`
	Requests       int                  `json:"requests"`
	Decisions      int                  `json:"decisions"`
	Divergent      int                  `json:"divergent"`
	Divergences    []Divergence         `json:"divergences,omitempty"`
	Sheds          int                  `json:"sheds"`
	BreakerTrips   int                  `json:"breaker_trips"`
	SlowPlacements []Decision           `json:"slow_placements,omitempty"`
	Timeline       []Bucket             `json:"timeline,omitempty"`
	Tenants        map[string]TenantSLO `json:"tenants"`
	// PlacementsByWorker compares where work went: recorded vs replayed.
	RecordedByWorker map[string]int `json:"recorded_by_worker"`
	ReplayedByWorker map[string]int `json:"replayed_by_worker"`
	// Filled by Enrich (report.go): outcomes per tenant and class in
	// Bucket-long slices, the slowest requests with their breakdowns, the
	// recorded policy's calibration, and a what-if's change in outcomes.
	Bucket      time.Duration `json:"bucket_ns,omitempty"`
	Series      []Series      `json:"series,omitempty"`
	Slowest     []SlowRequest `json:"slowest,omitempty"`
	Calibration *Calibration  `json:"calibration,omitempty"`
	WhatIf      *WhatIf       `json:"what_if,omitempty"`
}

// Window bounds the report.
type Window struct{ Since, Until time.Time }

func (w Window) has(t time.Time) bool {
	return !t.Before(w.Since) && (w.Until.IsZero() || !t.After(w.Until))
}

// Compare builds the report from replayed decisions, recorded router and
// admitter events, and results, for decisions inside w.
func Compare(w Window, policy, recordedPolicy string, replayed []Decision, events []schemas.Event, results []schemas.Result, bucket time.Duration) Report {
	rep := Report{Policy: policy, RecordedPolicy: recordedPolicy, Since: w.Since, Until: w.Until,
		Tenants: map[string]TenantSLO{}, RecordedByWorker: map[string]int{}, ReplayedByWorker: map[string]int{}}
	tl := newTimeline(bucket)
	recorded := rep.readRecorded(w, events, tl)
	rep.compareDecisions(w, replayed, recorded, tl)
	rep.tallyResults(w, results)
	rep.Timeline = tl.buckets()
	return rep
}

// timeline counts decisions and admitter outcomes in bucket-long slots.
type timeline struct {
	bucket time.Duration
	slots  map[int64]*Bucket
}

// newTimeline makes a timeline of bucket-long slots, one second when
// bucket is not positive.
func newTimeline(bucket time.Duration) *timeline {
	if bucket <= 0 {
		bucket = time.Second
	}
	return &timeline{bucket: bucket, slots: map[int64]*Bucket{}}
}

// slot is the bucket holding t, made on first use.
func (tl *timeline) slot(t time.Time) *Bucket {
	k := t.Truncate(tl.bucket).UnixNano()
	b := tl.slots[k]
	if b == nil {
		b = &Bucket{Start: t.Truncate(tl.bucket)}
		tl.slots[k] = b
	}
	return b
}

// buckets is the timeline in time order.
func (tl *timeline) buckets() []Bucket {
	var out []Bucket
	for _, b := range tl.slots {
		out = append(out, *b)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Start.Before(out[j].Start) })
	return out
}

// readRecorded reads the recorded events inside w: it returns each
// request's last recorded decision, and counts recorded placements per
// worker, sheds, rejections and breaker trips.
func (rep *Report) readRecorded(w Window, events []schemas.Event, tl *timeline) map[string]Decision {
	recorded := map[string]Decision{}
	for _, ev := range events {
		if !w.has(ev.At) {
			continue
		}
		if d, ok := FromEvent(ev); ok {
			recorded[d.ID] = d
			if d.Kind == "placed" {
				rep.RecordedByWorker[d.Worker]++
			}
			continue
		}
		switch {
		case ev.Service == "admitter" && ev.Kind == "shed":
			rep.Sheds++
			tl.slot(ev.At).Shed++
		case ev.Service == "admitter" && ev.Kind == "rejected":
			tl.slot(ev.At).Rejected++
		case ev.Kind == "breaker_open":
			rep.BreakerTrips++
		}
	}
	return recorded
}

// compareDecisions counts the replayed decisions inside w against the
// recorded ones: placements per worker, divergences either way (the first
// 20 kept) and the ten slowest placements.
func (rep *Report) compareDecisions(w Window, replayed []Decision, recorded map[string]Decision, tl *timeline) {
	seen := map[string]bool{}
	for i := range replayed {
		d := replayed[i]
		if !w.has(d.At) {
			continue
		}
		seen[d.ID] = true
		rep.Decisions++
		if d.Kind == "placed" {
			rep.ReplayedByWorker[d.Worker]++
			tl.slot(d.At).Placed++
		} else {
			tl.slot(d.At).Failed++
		}
		rec, ok := recorded[d.ID]
		if !ok || !rec.Same(d) {
			rep.Divergent++
			if len(rep.Divergences) < 20 {
				dv := Divergence{ID: d.ID, Replayed: &replayed[i]}
				if ok {
					r := rec
					dv.Recorded = &r
				}
				rep.Divergences = append(rep.Divergences, dv)
			}
		}
		if d.QueueMs > 1000 {
			rep.SlowPlacements = append(rep.SlowPlacements, d)
		}
	}
	// A recorded decision that replay never made is a divergence too.
	for id, rec := range recorded {
		if !seen[id] {
			rep.Divergent++
			if len(rep.Divergences) < 20 {
				r := rec
				rep.Divergences = append(rep.Divergences, Divergence{ID: id, Recorded: &r})
			}
		}
	}
	sort.Slice(rep.SlowPlacements, func(i, j int) bool { return rep.SlowPlacements[i].QueueMs > rep.SlowPlacements[j].QueueMs })
	if len(rep.SlowPlacements) > 10 {
		rep.SlowPlacements = rep.SlowPlacements[:10]
	}
}

// tallyResults counts the results finished inside w: distinct requests,
// and per tenant requests, successes and SLO attainment.
func (rep *Report) tallyResults(w Window, results []schemas.Result) {
	ids := map[string]bool{}
	for _, r := range results {
		if !w.has(r.FinishedAt) {
			continue
		}
		ids[r.ID] = true
		t := rep.Tenants[r.Tenant]
		t.Requests++
		if r.Status == schemas.StatusOK {
			t.OK++
			if r.SLOMet {
				t.SLOMet++
			}
		}
		rep.Tenants[r.Tenant] = t
	}
	for k, t := range rep.Tenants {
		t.SLOAttainment = slo.Attainment(t.SLOMet, t.Requests)
		rep.Tenants[k] = t
	}
	rep.Requests = len(ids)
}
