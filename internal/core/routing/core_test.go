package routing

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/switchyard-ai/switchyard/internal/core/catalog"
	"github.com/switchyard-ai/switchyard/internal/core/perf"
	"github.com/switchyard-ai/switchyard/internal/core/retry"
	"github.com/switchyard-ai/switchyard/schemas"
)

// The core's reliability behaviour in virtual time: every input carries its
// own timestamp, nothing sleeps, the cost model is the real roofline
// predictor over the default catalog.

const model = "llama-3.1-8b"

var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

// sim drives a Core through virtual time and keeps every action.
type sim struct {
	t    *testing.T
	core *Core
	now  time.Time
	log  []Action
}

func newSim(t *testing.T, cfg Config) *sim {
	cfg.Cost = perf.NewPredictor(catalog.Default())
	return &sim{t: t, core: New(cfg), now: t0}
}

func (s *sim) apply(in Input) []Action {
	in.At = s.now
	acts := s.core.Apply(in, nil)
	out := make([]Action, len(acts))
	copy(out, acts)
	s.log = append(s.log, out...)
	return out
}

func heartbeat(worker string, seq uint64) *schemas.Heartbeat {
	return &schemas.Heartbeat{
		V: schemas.Version, WorkerID: worker, Pool: "h100", GPU: "h100", Arch: "hopper", Simulated: true, Backend: "sim", TP: 1,
		HBMTotalBytes: 80 << 30, HBMFreeBytes: 40 << 30, KVBlocksTotal: 20000, KVBlocksFree: 20000, BlockSize: 16,
		Models:   []schemas.ModelState{{Name: model, Dtype: "bf16", State: schemas.WeightHot}},
		MaxBatch: 256, Seq: seq, PricePerHour: 3,
	}
}

// advance moves virtual time forward in 100 ms steps to d later, with the
// live workers heartbeating every 500 ms and the router ticking each step.
func (s *sim) advance(d time.Duration, live ...string) []Action {
	var out []Action
	end := s.now.Add(d)
	for s.now.Before(end) {
		s.now = s.now.Add(100 * time.Millisecond)
		if s.now.Sub(t0)%(500*time.Millisecond) == 0 {
			for _, w := range live {
				out = append(out, s.apply(Input{Kind: InHeartbeat, Heartbeat: heartbeat(w, uint64(s.now.Sub(t0)/time.Millisecond))})...)
			}
		}
		out = append(out, s.apply(Input{Kind: InTick})...)
	}
	return out
}

func admitted(id, tenant string, deadline time.Duration, prompt, maxTokens int, at time.Time) *schemas.Admitted {
	return &schemas.Admitted{
		Request: schemas.Request{ID: id, Model: model, MaxTokens: maxTokens, Priority: schemas.PriorityStandard},
		Tenant:  tenant, Model: model, Priority: schemas.PriorityStandard, PromptTokens: prompt,
		SubmittedAt: at, Deadline: at.Add(deadline),
	}
}

func (s *sim) admit(a *schemas.Admitted) []Action {
	return s.apply(Input{Kind: InAdmitted, Admitted: a})
}

func (s *sim) result(id, worker, status, code string, workMs float64) []Action {
	return s.apply(Input{Kind: InReleased, ID: id, Result: &ResultSummary{Status: status, Code: code, WorkerID: worker, WorkMs: workMs}})
}

func only(acts []Action, kind string) []Action {
	var out []Action
	for _, a := range acts {
		if a.Kind == kind {
			out = append(out, a)
		}
	}
	return out
}

func events(acts []Action, kind string) []*schemas.Event {
	var out []*schemas.Event
	for _, a := range acts {
		if a.Kind == ActEvent && a.Event.Kind == kind {
			out = append(out, a.Event)
		}
	}
	return out
}

func dispatchOf(t *testing.T, acts []Action, id string) Action {
	t.Helper()
	for _, a := range only(acts, ActDispatch) {
		if a.ID == id {
			return a
		}
	}
	t.Fatalf("%s was not dispatched; actions: %s", id, kinds(acts))
	return Action{}
}

func kinds(acts []Action) string {
	var b []string
	for _, a := range acts {
		k := a.Kind
		if a.Event != nil {
			k += ":" + a.Event.Kind
		}
		if a.ID != "" {
			k += "(" + a.ID + ")"
		}
		b = append(b, k)
	}
	return strings.Join(b, " ")
}

// TestCoreBreakerExcludesErroringWorker: results with backend_error open a
// worker's breaker (an event says so), after which placement leaves it out
// while the other worker is healthy.
func TestCoreBreakerExcludesErroringWorker(t *testing.T) {
	s := newSim(t, Config{})
	s.advance(time.Second, "a", "b")
	opened := false
	for i := 0; i < 40 && !opened; i++ {
		id := fmt.Sprintf("r%02d", i)
		d := dispatchOf(t, s.admit(admitted(id, "acme", 30*time.Second, 500, 64, s.now)), id)
		var acts []Action
		if d.Worker == "a" {
			acts = s.result(id, "a", schemas.StatusFailed, schemas.CodeBackendError, 5)
		} else {
			acts = s.result(id, "b", schemas.StatusOK, "", 1000*d.Terms.CompletionSeconds)
		}
		if ev := events(acts, "breaker_open"); len(ev) > 0 {
			if ev[0].WorkerID != "a" || ev[0].Fields["cause"] != "errors" {
				t.Fatalf("breaker_open %+v; want worker a, cause errors", ev[0])
			}
			opened = true
		}
		s.advance(100*time.Millisecond, "a", "b")
	}
	if !opened {
		t.Fatal("a's breaker never opened on backend errors")
	}
	for i := 0; i < 20; i++ {
		id := fmt.Sprintf("after%02d", i)
		if d := dispatchOf(t, s.admit(admitted(id, "acme", 30*time.Second, 500, 64, s.now)), id); d.Worker != "b" {
			t.Fatalf("%s placed on %s while its breaker is open", id, d.Worker)
		}
		s.result(id, "b", schemas.StatusOK, "", 100)
	}
	// A cancel says nothing about the GPU: it must not count against a.
	s2 := newSim(t, Config{})
	s2.advance(time.Second, "a")
	for i := 0; i < 10; i++ {
		id := fmt.Sprintf("bad%02d", i)
		dispatchOf(t, s2.admit(admitted(id, "acme", 30*time.Second, 500, 64, s2.now)), id)
		if ev := events(s2.result(id, "a", schemas.StatusFailed, schemas.CodeCancelled, 0), "breaker_open"); len(ev) > 0 {
			t.Fatalf("cancelled results opened the breaker: %+v", ev[0])
		}
	}
}

// TestCoreStaleWorkerReplacedOnce: a worker stops heartbeating with a
// request in flight; once its heartbeat is StaleAfter old its breaker opens
// for staleness and the request is dispatched again exactly once, as
// Attempt 1 with the dead worker excluded, to the other worker. Its late
// result and its return change nothing.
func TestCoreStaleWorkerReplacedOnce(t *testing.T) {
	// The documented default budget, spelled out: its per-tenant floor is
	// what lets a tenant's first request be retried at all (and see
	// TestCoreDefaultRetryFloor for the zero Config).
	s := newSim(t, Config{Retry: retry.Defaults()})
	s.advance(time.Second, "a") // only a is known: the request goes there
	first := dispatchOf(t, s.admit(admitted("r1", "acme", 60*time.Second, 1000, 128, s.now)), "r1")
	if first.Worker != "a" || first.Held.Adm.Attempt != 0 {
		t.Fatalf("first dispatch %s attempt %d; want a, 0", first.Worker, first.Held.Adm.Attempt)
	}
	s.advance(time.Second, "a", "b")
	silent := s.now
	acts := s.advance(10*time.Second, "b") // a is dead
	ds := only(acts, ActDispatch)
	if len(ds) != 1 {
		t.Fatalf("%d dispatches after a went silent, want exactly 1: %s", len(ds), kinds(acts))
	}
	d := ds[0]
	if d.ID != "r1" || d.Worker != "b" || d.Held.Adm.Attempt != 1 || !contains(d.Held.Adm.ExcludeWorkers, "a") {
		t.Fatalf("re-placement %s on %s attempt %d excluding %v; want r1 on b, attempt 1, excluding a",
			d.ID, d.Worker, d.Held.Adm.Attempt, d.Held.Adm.ExcludeWorkers)
	}
	var stale *schemas.Event
	for _, ev := range events(acts, "breaker_open") {
		if ev.WorkerID == "a" && ev.Fields["cause"] == "stale" {
			stale = ev
		}
	}
	if stale == nil {
		t.Fatalf("no breaker_open (stale) event for a: %s", kinds(acts))
	}
	if after := stale.At.Sub(silent); after < 3*time.Second || after > 4500*time.Millisecond {
		// last heartbeat ≤ 500 ms before silence, StaleAfter 3 s, sweep 500 ms
		t.Fatalf("a declared stale %s after its last heartbeat window; want 3–4.5 s", after)
	}
	rs := events(acts, "retry")
	if len(rs) != 1 || rs[0].RequestID != "r1" || rs[0].Fields["retry"] != true || rs[0].Fields["attempt"] != 1 {
		t.Fatalf("retry events %+v; want one granted retry of r1 as attempt 1", rs)
	}
	if !d.Held.Adm.Deadline.Equal(first.Held.Adm.Deadline) {
		t.Fatal("a retry must keep the request's original deadline")
	}
	// a comes back and delivers its late result; b's result is final.
	late := s.result("r1", "a", schemas.StatusOK, "", 2000)
	late = append(late, s.advance(5*time.Second, "a", "b")...)
	if n := len(only(late, ActDispatch)) + len(only(late, ActFail)); n != 0 {
		t.Fatalf("a's late result and return caused %d dispatch/fail actions: %s", n, kinds(late))
	}
	if n := len(only(s.result("r1", "b", schemas.StatusOK, "", 2000), ActDispatch)); n != 0 {
		t.Fatal("b's result caused a dispatch")
	}
}

// TestCoreRetryRefusedWhenDeadlineTooShort: the request's deadline covers
// its prediction when first placed, but not a full re-prefill plus decode
// once the worker is declared dead: it fails fast with deadline_exceeded
// and a reason naming the arithmetic, and is not dispatched again.
func TestCoreRetryRefusedWhenDeadlineTooShort(t *testing.T) {
	s := newSim(t, Config{})
	s.advance(time.Second, "a")
	cost := perf.NewPredictor(catalog.Default())
	const prompt, out = 6000, 512
	need := cost.PrefillSeconds("h100", model, "bf16", 1, prompt, 0) + cost.DecodeSeconds("h100", model, "bf16", 1, out, 1, prompt)
	// Enough now; 3–4.5 s from now (when a is declared dead) it is not.
	deadline := time.Duration((need + 2) * float64(time.Second))
	dispatchOf(t, s.admit(admitted("tight", "acme", deadline, prompt, out, s.now)), "tight")
	acts := s.advance(8*time.Second, "b")
	if n := len(only(acts, ActDispatch)); n != 0 {
		t.Fatalf("a retry that cannot meet its deadline was dispatched: %s", kinds(acts))
	}
	fails := only(acts, ActFail)
	if len(fails) != 1 || fails[0].ID != "tight" || fails[0].Err.Code != schemas.CodeDeadlineExceeded {
		t.Fatalf("fail actions %s; want tight failed with %s", kinds(fails), schemas.CodeDeadlineExceeded)
	}
	if msg := fails[0].Err.Message; !strings.Contains(msg, "re-prefill") {
		t.Fatalf("reason %q does not explain the re-prefill arithmetic", msg)
	}
	rs := events(acts, "retry")
	if len(rs) != 1 || rs[0].Fields["retry"] != false {
		t.Fatalf("retry events %+v; want one refusal", rs)
	}
	if got := rs[0].Fields["needed_s"].(float64); got < need*0.99 || got > need*1.01 {
		t.Fatalf("needed %.3fs, want the predicted %.3fs", got, need)
	}
}

// TestCoreRetryBudgetRefusal: with a budget of 10 % and no floor, losing a
// worker that holds many of a tenant's requests retries only its share and
// fails the rest fast with retry_budget_exhausted.
func TestCoreRetryBudgetRefusal(t *testing.T) {
	// A negative floor is no floor (the retry package clamps it to 0).
	s := newSim(t, Config{Retry: retry.Config{Tenant: retry.Limits{Ratio: 0.1, MinPerSecond: -1}, Fleet: retry.Limits{Ratio: 0.1, MinPerSecond: -1}}})
	s.advance(time.Second, "a")
	for i := 0; i < 30; i++ {
		id := fmt.Sprintf("r%02d", i)
		dispatchOf(t, s.admit(admitted(id, "acme", 120*time.Second, 200, 64, s.now)), id)
	}
	acts := s.advance(8*time.Second, "b")
	granted, refused := 0, 0
	for _, ev := range events(acts, "retry") {
		if ev.Fields["retry"] == true {
			granted++
		} else {
			refused++
			if ev.Fields["scope"] != "tenant" && ev.Fields["scope"] != "fleet" {
				t.Errorf("refusal %q scope %v; want the tenant or fleet budget", ev.Reason, ev.Fields["scope"])
			}
		}
	}
	if granted != 3 || refused != 27 {
		t.Fatalf("granted %d, refused %d of 30; want 3 (10 %%) and 27", granted, refused)
	}
	if n := len(only(acts, ActDispatch)); n != granted {
		t.Fatalf("%d re-dispatches for %d granted retries", n, granted)
	}
	for _, f := range only(acts, ActFail) {
		if f.Err.Code != schemas.CodeRetryBudget {
			t.Fatalf("%s failed with %s, want %s", f.ID, f.Err.Code, schemas.CodeRetryBudget)
		}
	}
}

// TestCoreDefaultRetryFloor: with the zero Config the core takes the retry
// package's documented defaults, which include a per-tenant floor of 0.2
// retries/s (12 per minute): a quiet tenant that loses one request on a
// dead worker gets it retried.
func TestCoreDefaultRetryFloor(t *testing.T) {
	s := newSim(t, Config{})
	s.advance(time.Second, "a")
	for i := 0; i < 3; i++ {
		id := fmt.Sprintf("q%d", i)
		dispatchOf(t, s.admit(admitted(id, "quiet", 120*time.Second, 200, 64, s.now)), id)
	}
	acts := s.advance(8*time.Second, "b")
	for _, ev := range events(acts, "retry") {
		if ev.Fields["retry"] != true {
			t.Errorf("retry of %s refused: %s (defaults: %+v)", ev.RequestID, ev.Reason, retry.Defaults().Tenant)
		}
	}
	if n := len(only(acts, ActDispatch)); n != 3 {
		t.Fatalf("%d of 3 lost requests re-placed under the default budget", n)
	}
}

// TestCoreReapsOverdue: a worker that keeps heartbeating but never answers
// a request is not declared dead; the request is answered with
// deadline_exceeded once it is OverdueGrace past its deadline — not before.
func TestCoreReapsOverdue(t *testing.T) {
	s := newSim(t, Config{})
	s.advance(time.Second, "a")
	a := admitted("wedged", "acme", 4*time.Second, 200, 64, s.now)
	dispatchOf(t, s.admit(a), "wedged")
	var failedAt time.Time
	for s.now.Before(a.Deadline.Add(OverdueGrace + 2*time.Second)) {
		for _, f := range only(s.advance(100*time.Millisecond, "a"), ActFail) {
			if f.ID != "wedged" || f.Err.Code != schemas.CodeDeadlineExceeded {
				t.Fatalf("fail %s %s; want wedged deadline_exceeded", f.ID, f.Err.Code)
			}
			if !failedAt.IsZero() {
				t.Fatal("reaped twice")
			}
			failedAt = s.now
		}
	}
	if failedAt.IsZero() {
		t.Fatal("an overdue request was never answered")
	}
	if late := failedAt.Sub(a.Deadline); late <= OverdueGrace || late > OverdueGrace+time.Second {
		t.Fatalf("reaped %s after its deadline; want within (%s, %s]", late, OverdueGrace, OverdueGrace+time.Second)
	}
}

// TestCoreDeterministic: the same inputs in the same order give the same
// actions — dispatches, failures and every event's fields — across fresh
// cores, through breaker trips, a worker loss, retries and reaping.
func TestCoreDeterministic(t *testing.T) {
	run := func() string {
		s := newSim(t, Config{})
		s.advance(time.Second, "a", "b", "c")
		for i := 0; i < 60; i++ {
			id := fmt.Sprintf("r%02d", i)
			tenant := []string{"acme", "globex", "initech"}[i%3]
			acts := s.admit(admitted(id, tenant, time.Duration(4+i%7)*time.Second, 200+50*(i%11), 32+16*(i%5), s.now))
			for _, d := range only(acts, ActDispatch) {
				switch {
				case d.Worker == "c" && i%2 == 0:
					s.result(d.ID, "c", schemas.StatusFailed, schemas.CodeBackendError, 3)
				case i%4 == 0:
					s.result(d.ID, d.Worker, schemas.StatusOK, "", 1000*d.Terms.CompletionSeconds)
				}
			}
			live := []string{"a", "b", "c"}
			if i > 30 {
				live = []string{"b", "c"} // a dies with whatever it holds
			}
			s.advance(300*time.Millisecond, live...)
		}
		s.advance(15*time.Second, "b", "c")
		b, err := json.Marshal(project(s.log))
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	first, second := run(), run()
	if first != second {
		t.Fatalf("two runs of the same inputs diverged:\n%s\n%s", first, second)
	}
	for _, want := range []string{`"retry"`, `"breaker_open"`, `"fail"`} {
		if !strings.Contains(first, want) {
			t.Fatalf("the run never produced %s: it does not exercise the reliability paths", want)
		}
	}
}

// project keeps what an action means, dropping shell handles.
func project(acts []Action) []map[string]any {
	out := make([]map[string]any, 0, len(acts))
	for _, a := range acts {
		m := map[string]any{"kind": a.Kind, "id": a.ID, "worker": a.Worker, "reason": a.Reason}
		if a.Err != nil {
			m["code"] = a.Err.Code
		}
		if a.Held != nil {
			m["attempt"] = a.Held.Adm.Attempt
			m["exclude"] = a.Held.Adm.ExcludeWorkers
		}
		if a.Event != nil {
			m["event"] = a.Event.Kind
			m["fields"] = a.Event.Fields
			m["at"] = a.Event.At
		}
		if a.Kind == ActDispatch {
			m["terms"] = a.Terms
		}
		out = append(out, m)
	}
	return out
}

func contains(xs []string, x string) bool {
	for _, v := range xs {
		if v == x {
			return true
		}
	}
	return false
}

// TestCoreAdoptedWorkIsReplacedWhenItsWorkerDies: a new leader that never
// dispatched r1 itself adopts it from the dead worker's consumer and still
// re-places it exactly once — whether the worker dies after the takeover,
// was already declared silent before it (a router and a worker killed
// together: the standby saw the heartbeats stop while it held nothing), or
// was never heard from by this router at all.
func TestCoreAdoptedWorkIsReplacedWhenItsWorkerDies(t *testing.T) {
	cases := []struct {
		name string
		// before runs ahead of the adoption; after, once adopted.
		before, after func(s *sim) []Action
	}{
		{
			name:   "dies after the takeover",
			before: func(s *sim) []Action { return s.advance(time.Second, "a", "b") },
			after:  func(s *sim) []Action { return s.advance(10*time.Second, "b") },
		},
		{
			name: "silent before the takeover",
			before: func(s *sim) []Action {
				s.advance(time.Second, "a", "b")
				return s.advance(10*time.Second, "b")
			},
			after: func(s *sim) []Action { return s.advance(time.Second, "b") },
		},
		{
			name:   "never heard from",
			before: func(s *sim) []Action { return s.advance(time.Second, "b") },
			after:  func(s *sim) []Action { return s.advance(10*time.Second, "b") },
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := newSim(t, Config{})
			if ds := only(tc.before(s), ActDispatch); len(ds) != 0 {
				t.Fatalf("dispatches before any work: %s", kinds(ds))
			}
			adm := admitted("r1", "acme", 60*time.Second, 1000, 128, s.now.Add(-2*time.Second))
			old := schemas.Dispatch{Admitted: *adm, WorkerID: "a", PlacedAt: s.now.Add(-2 * time.Second), PredictedSeconds: 2}
			older := old
			older.Admitted.Attempt = -1 // a stale copy must not win over the newer attempt
			acts := s.apply(Input{Kind: InAdopt, Adopted: []schemas.Dispatch{old, older}})
			acts = append(acts, s.advance(100*time.Millisecond, "b")...)
			acts = append(acts, tc.after(s)...)
			ds := only(acts, ActDispatch)
			if len(ds) != 1 || ds[0].ID != "r1" || ds[0].Worker != "b" || ds[0].Held.Adm.Attempt != 1 {
				t.Fatalf("want r1 re-placed once on b as attempt 1; got %s", kinds(acts))
			}
			if rs := events(acts, "retry"); len(rs) != 1 || rs[0].Fields["retry"] != true {
				t.Fatalf("want one granted retry event; got %+v", rs)
			}
		})
	}
}

// TestCoreForgetsDepartedWorkers: a worker silent for ForgetAfter leaves
// the fleet view and its breaker; one still heartbeating stays.
func TestCoreForgetsDepartedWorkers(t *testing.T) {
	s := newSim(t, Config{})
	s.advance(time.Second, "a", "b")
	s.advance(ForgetAfter+2*time.Second, "b")
	if w := s.core.fleet.Get("a"); w != nil {
		t.Fatalf("a still in the fleet after %s of silence", ForgetAfter)
	}
	if s.core.fleet.Get("b") == nil {
		t.Fatal("b was dropped while heartbeating")
	}
	for _, st := range s.core.breakers.States() {
		if st.Worker == "a" {
			t.Fatal("a's breaker was kept")
		}
	}
	if len(s.core.suspect) != 0 {
		t.Fatalf("suspects %v after forgetting", s.core.suspect)
	}
}
