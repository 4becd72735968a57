package replay

import (
	"github.com/switchyard-ai/switchyard/internal/core/stats"
	"math"
	"sort"
	"time"

	"github.com/switchyard-ai/switchyard/internal/core/fleet"
	"github.com/switchyard-ai/switchyard/internal/core/placement"
	"github.com/switchyard-ai/switchyard/internal/core/routing"
	"github.com/switchyard-ai/switchyard/internal/core/slo"
	"github.com/switchyard-ai/switchyard/schemas"
)

// Predicted is the routing core's breakdown of one placement, in seconds
// and dollars, from placement.Terms: what the policy expected the request
// to cost on the worker it chose. Slack is left out when the request had
// no deadline (JSON has no infinity).
type Predicted struct {
	QueueS      float64  `json:"queue_s"`
	LoadS       float64  `json:"load_s"`
	PrefillS    float64  `json:"prefill_s"`
	SavedS      float64  `json:"saved_s"`
	DecodeS     float64  `json:"decode_s"`
	CompletionS float64  `json:"completion_s"`
	SlackS      *float64 `json:"slack_s,omitempty"`
	GPUUSD      float64  `json:"gpu_usd"`
	TotalUSD    float64  `json:"total_usd"`
	Cached      int      `json:"cached_tokens"`
}

// MeetsDeadline is the prediction's verdict: completion inside the
// deadline, or no deadline at all.
func (p *Predicted) MeetsDeadline() bool { return p.SlackS == nil || *p.SlackS >= 0 }

func predictedOf(t placement.Terms) *Predicted {
	p := &Predicted{QueueS: t.QueueSeconds, LoadS: t.LoadSeconds, PrefillS: t.PrefillSeconds, SavedS: t.SavedSeconds,
		DecodeS: t.DecodeSeconds, CompletionS: t.CompletionSeconds, GPUUSD: t.GPUUSD, TotalUSD: t.TotalUSD, Cached: t.CachedTokens}
	if s := t.SlackSeconds; !math.IsInf(s, 0) && !math.IsNaN(s) {
		p.SlackS = &s
	}
	for _, f := range []*float64{&p.QueueS, &p.LoadS, &p.PrefillS, &p.SavedS, &p.DecodeS, &p.CompletionS, &p.GPUUSD, &p.TotalUSD} {
		if math.IsInf(*f, 0) || math.IsNaN(*f) {
			*f = 0
		}
	}
	return p
}

// RunEvaluated is Run with every placement's outcome predicted by one cost
// model, eval (the Switchyard placer with its latency axis off, so that a
// placement that would miss its deadline is priced rather than refused;
// the slack is then computed against the request's deadline here), for
// the worker the core's own policy chose: baselines such as round-robin predict nothing themselves,
// and a what-if must judge both policies by the same yardstick. eval sees
// the core's fleet view right after the input was applied, less the
// request's own booking (released for the evaluation and restored exactly,
// so the replay decides as Run would). A placement eval would refuse —
// the worker cannot hold the model or the sequence — gets no Predicted and
// the refusal in Infeasible.
func RunEvaluated(core *routing.Core, journal []routing.Input, eval placement.Policy) []Decision {
	var out []Decision
	for _, in := range journal {
		for _, a := range core.Apply(in, nil) {
			if a.Held == nil {
				continue // actions about no one request (a pool's held demand, a snapshot ask)
			}
			adm := &a.Held.Adm
			switch a.Kind {
			case routing.ActDispatch:
				d := Decision{ID: a.ID, Tenant: adm.Tenant, Kind: "placed", Worker: a.Worker, GPU: a.GPU, At: in.At,
					QueueMs: ms(in.At.Sub(adm.SubmittedAt)), Class: adm.Priority}
				d.Predicted, d.Infeasible = evaluate(core.Fleet(), eval, a, in.At)
				out = append(out, d)
			case routing.ActFail:
				out = append(out, Decision{ID: a.ID, Tenant: adm.Tenant, Kind: "failed", Code: a.Err.Code, At: in.At,
					QueueMs: ms(in.At.Sub(adm.SubmittedAt)), Class: adm.Priority})
			}
		}
	}
	return out
}

func evaluate(f *fleet.Fleet, eval placement.Policy, a routing.Action, now time.Time) (*Predicted, string) {
	adm := &a.Held.Adm
	req := placement.FromAdmitted(adm, "", adm.WorkflowStartedAt)
	for _, w := range f.Workers() {
		if w != nil && w.ID != a.Worker {
			req.Exclude = append(req.Exclude, w.ID)
		}
	}
	booked := f.Unreserve(a.ID)
	dec := eval.Place(f, &req, now)
	if booked {
		// The core booked exactly this (core.place): restore it.
		prefill, output, blocks := (&placement.Decision{Terms: a.Terms}).Booking(adm.PromptTokens, adm.Request.MaxTokens)
		if err := f.Reserve(a.Worker, a.ID, adm.Priority, prefill, output, blocks, now); err != nil {
			return nil, "booking not restored: " + err.Error()
		}
	}
	if !dec.OK() {
		return nil, routing.Summarize(dec)
	}
	p := predictedOf(dec.Terms)
	if !adm.Deadline.IsZero() {
		// eval runs without its deadline filter (so that a late placement
		// is priced, not refused), which leaves slack to compute here.
		slack := adm.Deadline.Sub(now).Seconds() - dec.Terms.CompletionSeconds
		p.SlackS = &slack
	} else {
		p.SlackS = nil
	}
	return p, ""
}

// SeriesPoint is one tenant and class's outcomes in one time bucket, by
// the time each final result was published.
type SeriesPoint struct {
	Start    time.Time `json:"start"`
	Requests int       `json:"requests"`
	OK       int       `json:"ok"`
	SLOMet   int       `json:"slo_met"`
	Shed     int       `json:"shed"`
	Rejected int       `json:"rejected"`
	Failed   int       `json:"failed"`
	// P95Ms is the 95th percentile end-to-end latency of the ok results.
	P95Ms float64 `json:"p95_ms"`
}

// Series is one tenant and class over the window.
type Series struct {
	Tenant        string        `json:"tenant"`
	Class         string        `json:"class"`
	Requests      int           `json:"requests"`
	SLOMet        int           `json:"slo_met"`
	SLOAttainment float64       `json:"slo_attainment"`
	Points        []SeriesPoint `json:"points"`
}

// SlowRequest is one of the slowest requests of the window with where its
// time went: measured (queue to placement, queue to first token, decode)
// and, beside it, what the router predicted when it placed it.
type SlowRequest struct {
	ID               string     `json:"id"`
	Tenant           string     `json:"tenant"`
	Class            string     `json:"class"`
	Status           string     `json:"status"`
	Worker           string     `json:"worker"`
	GPU              string     `json:"gpu"`
	QueueMs          float64    `json:"queue_ms"`
	PrefillMs        float64    `json:"prefill_ms"` // placement to first token: load, worker queue, prefill
	DecodeMs         float64    `json:"decode_ms"`
	TotalMs          float64    `json:"total_ms"`
	PromptTokens     int        `json:"prompt_tokens"`
	CachedTokens     int        `json:"cached_tokens"`
	CompletionTokens int        `json:"completion_tokens"`
	SLOMet           bool       `json:"slo_met"`
	Predicted        *Predicted `json:"predicted,omitempty"`
}

// Calibration compares the recorded policy's predicted completion (from
// placement to the last token) with the measured one (total minus queue)
// for the requests that finished ok: how far the what-if figures, which
// are predictions of the same model, can be trusted.
type Calibration struct {
	Compared       int     `json:"compared"`
	MeanPredictedS float64 `json:"mean_predicted_s"`
	MeanMeasuredS  float64 `json:"mean_measured_s"`
	MeanAbsErrorS  float64 `json:"mean_abs_error_s"`
}

// PolicyOutcome is one policy's predicted outcome over the requests both
// policies decided.
type PolicyOutcome struct {
	Policy string `json:"policy"`
	Placed int    `json:"placed"`
	Failed int    `json:"failed"`
	// PredictedSLOMet counts placements predicted to finish inside their
	// deadline; MeanCompletionS and GPUUSD are the predicted completion
	// time and GPU cost summed over placements.
	PredictedSLOMet int            `json:"predicted_slo_met"`
	MeanCompletionS float64        `json:"mean_completion_s"`
	GPUUSD          float64        `json:"gpu_usd"`
	ByWorker        map[string]int `json:"by_worker"`
	// Infeasible counts placements the cost model would refuse (the
	// worker cannot serve the model or hold the sequence): predicted to
	// fail, not to meet the deadline.
	Infeasible int `json:"infeasible"`
}

// RequestChange is one request whose predicted outcome the what-if policy
// changed.
type RequestChange struct {
	ID       string   `json:"id"`
	Tenant   string   `json:"tenant"`
	Class    string   `json:"class"`
	Recorded Decision `json:"recorded"`
	Replayed Decision `json:"replayed"`
	// DeltaCompletionS is the what-if's predicted completion minus the
	// recorded policy's (negative: faster).
	DeltaCompletionS float64 `json:"delta_completion_s"`
	// SLOChange names a changed predicted outcome: "met→missed",
	// "missed→met", "placed→failed", "failed→placed", "met→infeasible",
	// "missed→infeasible", "infeasible→placed".
	SLOChange string `json:"slo_change,omitempty"`
}

// WhatIf is what another policy changed in outcomes, not only in worker
// ids. Both sides are the routing core run over the same journaled inputs
// — the recorded policy reproduces the live decisions — and each side's
// outcome is one cost model's prediction for the request on the worker
// that side chose (RunEvaluated). The fleet's later heartbeats are the
// recorded ones, so the effect of a different placement on what the
// workers later reported is not simulated; Basis says so in the report.
type WhatIf struct {
	Basis       string          `json:"basis"`
	Compared    int             `json:"compared"`
	Moved       int             `json:"moved"`
	Recorded    PolicyOutcome   `json:"recorded"`
	Replayed    PolicyOutcome   `json:"replayed"`
	MetToMissed int             `json:"met_to_missed"`
	MissedToMet int             `json:"missed_to_met"`
	Changes     []RequestChange `json:"changes,omitempty"`
}

// WhatIfBasis states what a WhatIf compares.
const WhatIfBasis = "Both columns replay the same journaled inputs through the routing core; the recorded policy reproduces the live decisions. " +
	"Outcomes are one cost model's predictions — the Switchyard placer's terms (its deadline filter off): completion time, slack against the deadline, GPU cost — for each request on the worker each policy chose, " +
	"on the replayed fleet view at that moment (its heartbeats as recorded, plus each policy's own bookings); a placement the model would refuse counts as infeasible. " +
	"How a different placement would have changed what the workers later reported is not simulated. " +
	"The calibration line says how far those predictions were from the measured results under the recorded policy."

// BucketFor picks a timeline bucket that cuts span into at most about 40
// slices of a round length.
func BucketFor(span time.Duration) time.Duration {
	for _, b := range []time.Duration{time.Second, 2 * time.Second, 5 * time.Second, 10 * time.Second, 15 * time.Second, 30 * time.Second,
		time.Minute, 2 * time.Minute, 5 * time.Minute, 10 * time.Minute, 15 * time.Minute, 30 * time.Minute, time.Hour} {
		if span <= 40*b {
			return b
		}
	}
	return 2 * time.Hour
}

// Enrich adds to rep what an incident review needs beyond the decision
// comparison: outcomes per tenant and class over time, the slowest
// requests with their measured and predicted breakdowns, the recorded
// policy's calibration and, when replayed differs from baseline's policy,
// the what-if's change in outcomes. baseline is the replay under the
// recorded policy (equal to replayed when no what-if was asked).
func Enrich(rep *Report, w Window, baseline, replayed []Decision, results []schemas.Result) {
	var in []schemas.Result
	for _, r := range results {
		if w.has(r.FinishedAt) {
			in = append(in, r)
		}
	}
	placed := map[string]Decision{}
	for _, d := range baseline {
		if d.Kind == "placed" {
			placed[d.ID] = d
		}
	}
	rep.Series, rep.Bucket = series(in)
	rep.Slowest = slowest(in, placed, 10)
	rep.Calibration = calibrate(in, placed)
	if rep.Policy != rep.RecordedPolicy {
		rep.WhatIf = compareOutcomes(w, rep.RecordedPolicy, rep.Policy, baseline, replayed)
	}
}

func series(results []schemas.Result) ([]Series, time.Duration) {
	if len(results) == 0 {
		return nil, 0
	}
	lo, hi := results[0].FinishedAt, results[0].FinishedAt
	for _, r := range results {
		if r.FinishedAt.Before(lo) {
			lo = r.FinishedAt
		}
		if r.FinishedAt.After(hi) {
			hi = r.FinishedAt
		}
	}
	bucket := BucketFor(hi.Sub(lo))
	start := lo.Truncate(bucket)
	n := int(hi.Sub(start)/bucket) + 1
	type key struct{ tenant, class string }
	by := map[key]*Series{}
	lat := map[key][][]float64{}
	for _, r := range results {
		class := r.Priority
		if class == "" {
			class = "(none)"
		}
		k := key{r.Tenant, class}
		s := by[k]
		if s == nil {
			s = &Series{Tenant: r.Tenant, Class: class, Points: make([]SeriesPoint, n)}
			for i := range s.Points {
				s.Points[i].Start = start.Add(time.Duration(i) * bucket)
			}
			by[k] = s
			lat[k] = make([][]float64, n)
		}
		i := int(r.FinishedAt.Sub(start) / bucket)
		p := &s.Points[i]
		p.Requests++
		s.Requests++
		switch r.Status {
		case schemas.StatusOK:
			p.OK++
			lat[k][i] = append(lat[k][i], r.Timing.TotalMs)
			if r.SLOMet {
				p.SLOMet++
				s.SLOMet++
			}
		case schemas.StatusShed:
			p.Shed++
		case schemas.StatusRejected:
			p.Rejected++
		default:
			p.Failed++
		}
	}
	out := make([]Series, 0, len(by))
	for k, s := range by {
		for i, xs := range lat[k] {
			if len(xs) > 0 {
				sort.Float64s(xs)
				s.Points[i].P95Ms = stats.Quantile(xs, 0.95)
			}
		}
		s.SLOAttainment = slo.Attainment(s.SLOMet, s.Requests)
		out = append(out, *s)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Tenant != out[j].Tenant {
			return out[i].Tenant < out[j].Tenant
		}
		return schemas.PriorityRank(out[i].Class) < schemas.PriorityRank(out[j].Class)
	})
	return out, bucket
}

func slowest(results []schemas.Result, placed map[string]Decision, n int) []SlowRequest {
	var out []SlowRequest
	for _, r := range results {
		if r.WorkerID == "" || r.Timing.TotalMs <= 0 {
			continue // never placed: no placement to break down
		}
		t := r.Timing
		s := SlowRequest{ID: r.ID, Tenant: r.Tenant, Class: r.Priority, Status: r.Status, Worker: r.WorkerID, GPU: r.GPU,
			QueueMs: t.QueueMs, PrefillMs: max(0, t.TTFTMs-t.QueueMs), DecodeMs: max(0, t.TotalMs-max(t.TTFTMs, t.QueueMs)), TotalMs: t.TotalMs,
			PromptTokens: r.Usage.PromptTokens, CachedTokens: r.Usage.CachedTokens, CompletionTokens: r.Usage.CompletionTokens, SLOMet: r.SLOMet}
		if d, ok := placed[r.ID]; ok {
			s.Predicted = d.Predicted
		}
		out = append(out, s)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].TotalMs > out[j].TotalMs })
	if len(out) > n {
		out = out[:n]
	}
	return out
}

func calibrate(results []schemas.Result, placed map[string]Decision) *Calibration {
	c := &Calibration{}
	for _, r := range results {
		d, ok := placed[r.ID]
		if !ok || d.Predicted == nil || r.Status != schemas.StatusOK || d.Worker != r.WorkerID {
			continue
		}
		measured := (r.Timing.TotalMs - r.Timing.QueueMs) / 1000
		c.Compared++
		c.MeanPredictedS += d.Predicted.CompletionS
		c.MeanMeasuredS += measured
		c.MeanAbsErrorS += math.Abs(d.Predicted.CompletionS - measured)
	}
	if c.Compared == 0 {
		return nil
	}
	n := float64(c.Compared)
	c.MeanPredictedS /= n
	c.MeanMeasuredS /= n
	c.MeanAbsErrorS /= n
	return c
}

func compareOutcomes(w Window, recordedPolicy, policy string, baseline, replayed []Decision) *WhatIf {
	wi := &WhatIf{Basis: WhatIfBasis,
		Recorded: PolicyOutcome{Policy: recordedPolicy, ByWorker: map[string]int{}},
		Replayed: PolicyOutcome{Policy: policy, ByWorker: map[string]int{}}}
	base, alt := finalDecisions(w, baseline), finalDecisions(w, replayed)
	var changes []RequestChange
	for id, b := range base {
		a, ok := alt[id]
		if !ok {
			continue
		}
		wi.Compared++
		wi.Recorded.tally(b)
		wi.Replayed.tally(a)
		if b.Kind == "placed" && a.Kind == "placed" && b.Worker != a.Worker {
			wi.Moved++
		}
		ch := changeOf(id, b, a)
		switch ch.SLOChange {
		case "met→missed":
			wi.MetToMissed++
		case "missed→met":
			wi.MissedToMet++
		}
		if ch.SLOChange != "" || b.Worker != a.Worker {
			changes = append(changes, ch)
		}
	}
	for _, o := range []*PolicyOutcome{&wi.Recorded, &wi.Replayed} {
		if o.Placed > 0 {
			o.MeanCompletionS /= float64(o.Placed)
		}
	}
	wi.Changes = largestChanges(changes, 20)
	return wi
}

// finalDecisions is each request's last decision inside the window: a
// retried request's last decision counts.
func finalDecisions(w Window, ds []Decision) map[string]Decision {
	m := map[string]Decision{}
	for _, d := range ds {
		if w.has(d.At) {
			m[d.ID] = d
		}
	}
	return m
}

// tally adds one request's decision to the policy's outcome; the mean
// completion is summed here and divided once every request is in.
func (o *PolicyOutcome) tally(d Decision) {
	if d.Kind != "placed" {
		o.Failed++
		return
	}
	if d.Infeasible != "" {
		o.Infeasible++
	}
	o.Placed++
	o.ByWorker[d.Worker]++
	if d.Predicted != nil {
		o.MeanCompletionS += d.Predicted.CompletionS
		o.GPUUSD += d.Predicted.GPUUSD
		if d.Predicted.MeetsDeadline() {
			o.PredictedSLOMet++
		}
	}
}

// changeOf says how one request's outcome changed between the recorded
// decision b and the replayed one a: the SLO transition, if any, and the
// change in predicted completion when both were placed with a prediction.
func changeOf(id string, b, a Decision) RequestChange {
	ch := RequestChange{ID: id, Tenant: b.Tenant, Class: b.Class, Recorded: b, Replayed: a}
	switch {
	case b.Kind == "placed" && a.Kind != "placed":
		ch.SLOChange = "placed→failed"
	case b.Kind != "placed" && a.Kind == "placed":
		ch.SLOChange = "failed→placed"
	case b.Kind == "placed" && b.Predicted != nil && a.Infeasible != "":
		ch.SLOChange = "met→infeasible"
		if !b.Predicted.MeetsDeadline() {
			ch.SLOChange = "missed→infeasible"
		}
	case b.Kind == "placed" && b.Infeasible != "" && a.Predicted != nil:
		ch.SLOChange = "infeasible→placed"
	case b.Kind == "placed" && b.Predicted != nil && a.Predicted != nil:
		ch.DeltaCompletionS = a.Predicted.CompletionS - b.Predicted.CompletionS
		switch bm, am := b.Predicted.MeetsDeadline(), a.Predicted.MeetsDeadline(); {
		case bm && !am:
			ch.SLOChange = "met→missed"
		case !bm && am:
			ch.SLOChange = "missed→met"
		}
	}
	return ch
}

// largestChanges orders changes with outcome changes first, then the
// largest predicted time changes, and keeps the first n.
func largestChanges(changes []RequestChange, n int) []RequestChange {
	sort.Slice(changes, func(i, j int) bool {
		ci, cj := changes[i].SLOChange != "", changes[j].SLOChange != ""
		if ci != cj {
			return ci
		}
		di, dj := math.Abs(changes[i].DeltaCompletionS), math.Abs(changes[j].DeltaCompletionS)
		if di != dj {
			return di > dj
		}
		return changes[i].ID < changes[j].ID
	})
	if len(changes) > n {
		changes = changes[:n]
	}
	return changes
}
