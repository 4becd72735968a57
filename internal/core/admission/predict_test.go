package admission

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/switchyard-ai/switchyard/schemas"
)

// fleetOf feeds a FleetView with ten seconds of once-a-second heartbeats
// from workers that each run `running` requests of one class out of
// maxBatch slots and complete `perSec` requests per second, and returns
// the view and the time of the last heartbeat.
func fleetOf(t *testing.T, workers, maxBatch, running int, perSec float64, class string, util float64) (*FleetView, time.Time) {
	t.Helper()
	return fleetOfKV(t, workers, maxBatch, running, 500, perSec, class, util)
}

// fleetOfKV is fleetOf with each running request holding blocksPer of the
// 10,000 KV blocks.
func fleetOfKV(t *testing.T, workers, maxBatch, running, blocksPer int, perSec float64, class string, util float64) (*FleetView, time.Time) {
	t.Helper()
	f := &FleetView{}
	var at time.Time
	for s := 0; s <= 10; s++ {
		at = t0.Add(time.Duration(s) * time.Second)
		for w := range workers {
			f.Observe(schemas.Heartbeat{WorkerID: fmt.Sprintf("w%d", w), Pool: "h100", GPU: "h100",
				MaxBatch: maxBatch, Running: running, Utilization: util,
				KVBlocksTotal: 10000, KVBlocksFree: max(0, 10000-blocksPer*running), KVBlocksByClass: map[string]int{class: blocksPer * running},
				CompletedTotal: uint64(perSec * float64(s)), SentAt: at, PricePerHour: 3}, at)
		}
	}
	return f, at
}

func permissiveTenants(t *testing.T) *Tenants {
	t.Helper()
	ts, err := NewTenants(Config{UnknownTenants: UnknownDefault,
		Default: Profile{Priority: schemas.PriorityCritical, DefaultPriority: schemas.PriorityStandard, AllowAuto: true}})
	if err != nil {
		t.Fatal(err)
	}
	return ts
}

// TestIdleFleetNeitherShedsNorDefers replays the two reports of issue 20:
// after three 140k-token prompts, 16 concurrent short requests were shed
// with "predicted wait 50.8s" while the real queue time was about zero;
// a 500-line batch ran 13 requests and deferred the other 487 for ten
// minutes on a fleet that then finished them in under a second. In both
// the fleet had idle batch slots and nothing of a higher class queued.
func TestIdleFleetNeitherShedsNorDefers(t *testing.T) {
	ts := permissiveTenants(t)
	cases := []struct {
		name     string
		fleet    func() (*FleetView, time.Time)
		pending  map[string]int
		priority string
		deadline time.Duration
	}{
		{"16 concurrent requests after three long prompts",
			func() (*FleetView, time.Time) {
				// Three 140k-token prompts run; one finished a while ago.
				return fleetOf(t, 1, 64, 3, 0.1, schemas.PriorityStandard, 0.9)
			},
			map[string]int{schemas.PriorityStandard: 16}, schemas.PriorityStandard, 0},
		{"the rest of a 500-line batch",
			func() (*FleetView, time.Time) {
				return fleetOf(t, 1, 64, 13, 2.6, schemas.PriorityBatch, 0.73)
			},
			map[string]int{schemas.PriorityBatch: 487}, schemas.PriorityBatch, 24 * time.Hour},
		{"a fleet that has done nothing yet",
			func() (*FleetView, time.Time) { return fleetOf(t, 2, 64, 0, 0, schemas.PriorityBatch, 0) },
			map[string]int{schemas.PriorityBatch: 20, schemas.PriorityStandard: 20}, schemas.PriorityBatch, 24 * time.Hour},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			f, now := c.fleet()
			load := f.Load(c.pending, now)
			r := schemas.Request{ID: "r1", Model: "llama-3.1-8b", Prompt: "Summarise the incident in one line.", MaxTokens: 64,
				Priority: c.priority, DeadlineMs: c.deadline.Milliseconds()}
			d := Decide(Input{Now: now, Tenant: "t", Request: &r, Tenants: ts, Load: load})
			if d.Action != ActionAdmit {
				t.Fatalf("action %s (%v; %v), want admit; load %+v", d.Action, d.Error, d.Reasons, load)
			}
		})
	}
}

// TestBusyHigherClassesStillDefer: deferral keeps its purpose — batch work
// waits when the higher classes hold the fleet — and shedding still sheds
// doomed work when no slot is free.
func TestBusyHigherClassesStillDefer(t *testing.T) {
	ts := permissiveTenants(t)
	f, now := fleetOf(t, 2, 16, 16, 4, schemas.PriorityInteractive, 0.95)
	load := f.Load(map[string]int{schemas.PriorityInteractive: 40}, now)
	if load.FreeSlots != 0 || load.Slots != 32 {
		t.Fatalf("slots %d free %d, want 32 and 0", load.Slots, load.FreeSlots)
	}
	batch := schemas.Request{ID: "b1", Model: "llama-3.1-8b", Prompt: "classify", MaxTokens: 16,
		Priority: schemas.PriorityBatch, DeadlineMs: (24 * time.Hour).Milliseconds()}
	if d := Decide(Input{Now: now, Tenant: "t", Request: &batch, Tenants: ts, Load: load}); d.Action != ActionDefer {
		t.Fatalf("batch behind a full interactive fleet: %s (%v), want defer", d.Action, d.Reasons)
	}
	std := schemas.Request{ID: "s1", Model: "llama-3.1-8b", Prompt: "hello", MaxTokens: 16, DeadlineMs: 2000}
	if d := Decide(Input{Now: now, Tenant: "t", Request: &std, Tenants: ts, Load: load}); d.Action != ActionShed {
		t.Fatalf("standard with 2 s behind 40 queued interactive on a full fleet: %s (%v), want shed", d.Action, d.Reasons)
	}
}

// TestFleetCapacityByLittlesLaw: a worker running 4 requests of ~2 s each
// completes 2 per second but could complete 32 per second with its 64
// slots full; the Load reports the capacity, and the measured rate once
// the slots are full.
func TestFleetCapacityByLittlesLaw(t *testing.T) {
	cases := []struct {
		name           string
		running        int
		perSec         float64
		wantLo, wantHi float64
	}{
		{"light load: capacity from service time", 4, 2, 31, 33},
		{"full batch: the measured rate", 64, 10, 9.9, 10.1},
		{"requests shorter than a heartbeat: a lower bound", 0, 50, 50 * 64 * 0.99, 50 * 64 * 1.01},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			f, now := fleetOfKV(t, 1, 64, c.running, 100, c.perSec, schemas.PriorityStandard, 0.5)
			l := f.Load(nil, now)
			if l.RequestsPerSec < c.wantLo || l.RequestsPerSec > c.wantHi {
				t.Fatalf("capacity %.2f req/s, want %.1f-%.1f", l.RequestsPerSec, c.wantLo, c.wantHi)
			}
			if l.FreeSlots != max(0, 64-c.running) {
				t.Fatalf("free slots %d", l.FreeSlots)
			}
		})
	}
}

// TestFreeSlotsNeedKV: idle batch slots are free only while the KV cache
// has room for requests like the ones running. A worker running 4 long
// requests of 2,000 blocks each in a 10,000-block cache has 60 idle slots
// but room for 1 more; the router's queue, not the worker's, then holds
// the rest, and a prediction of no wait would admit what must be shed.
func TestFreeSlotsNeedKV(t *testing.T) {
	f, now := fleetOfKV(t, 1, 64, 4, 2000, 2, schemas.PriorityStandard, 0.9)
	l := f.Load(nil, now)
	if l.FreeSlots != 1 || l.Slots != 5 {
		t.Fatalf("slots %d free %d, want 5 and 1", l.Slots, l.FreeSlots)
	}
	if l.RequestsPerSec > 2*5.0/4+0.01 {
		t.Fatalf("capacity %.2f req/s: the KV cache bounds the batch at 5, so at most %.2f", l.RequestsPerSec, 2*5.0/4)
	}
}

func TestWaitCountsOnlyTheExcessOverIdleSlots(t *testing.T) {
	var s Shedder
	cases := []struct {
		name string
		load Load
		want time.Duration
	}{
		{"fits the idle slots", Load{Slots: 64, FreeSlots: 60, RequestsPerSec: 1, Pending: map[string]int{"standard": 59}}, 0},
		{"one over", Load{Slots: 64, FreeSlots: 60, RequestsPerSec: 10, Pending: map[string]int{"standard": 60}}, 100 * time.Millisecond},
		{"requests waiting on a busy engine do not take another's idle slots", Load{Slots: 64, FreeSlots: 10, WorkerWaiting: 400, RequestsPerSec: 10,
			Pending: map[string]int{"standard": 1}}, 0},
		{"with no slot left, requests waiting on workers are ahead too", Load{Slots: 64, FreeSlots: 0, WorkerWaiting: 9, RequestsPerSec: 10,
			Pending: map[string]int{"standard": 1}}, 1100 * time.Millisecond},
		{"the router's queue over the idle slots waits behind the engines' too", Load{Slots: 64, FreeSlots: 2, WorkerWaiting: 9, RequestsPerSec: 10,
			Pending: map[string]int{"standard": 2}}, time.Second},
		{"no slot figures: throughput alone", Load{RequestsPerSec: 10, Pending: map[string]int{"standard": 10}}, time.Second},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			w, known := s.Wait(schemas.PriorityStandard, c.load)
			if !known || w != c.want {
				t.Fatalf("wait %v known %v, want %v", w, known, c.want)
			}
		})
	}
}

// TestEngineWaitingOfLowerClassesIsNotAhead: engines admit in class
// order, so with no idle slot a request waits behind the engines' waiting
// requests of its own class and higher only; waiting that no heartbeat
// attributes to a class stays ahead of everyone.
func TestEngineWaitingOfLowerClassesIsNotAhead(t *testing.T) {
	var s Shedder
	full := func(byClass map[string]int) Load {
		return Load{Slots: 64, FreeSlots: 0, WorkerWaiting: 409, WorkerWaitingByClass: byClass, RequestsPerSec: 10}
	}
	split := map[string]int{schemas.PriorityBatch: 400, schemas.PriorityStandard: 9}
	cases := []struct {
		name  string
		class string
		load  Load
		want  time.Duration
	}{
		{"critical behind a batch backlog in the engines", schemas.PriorityCritical, full(split), 100 * time.Millisecond},
		{"standard behind its own class's waiting", schemas.PriorityStandard, full(split), time.Second},
		{"batch behind all of it", schemas.PriorityBatch, full(split), 41 * time.Second},
		{"waiting no heartbeat attributes is ahead of critical", schemas.PriorityCritical, full(map[string]int{schemas.PriorityBatch: 400}), time.Second},
		{"no split at all: everything ahead", schemas.PriorityCritical, full(nil), 41 * time.Second},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			w, known := s.Wait(c.class, c.load)
			if !known || w != c.want {
				t.Fatalf("wait %v known %v, want %v", w, known, c.want)
			}
		})
	}
}

func TestContextWindow(t *testing.T) {
	ts := permissiveTenants(t)
	window := func(m string) int {
		if m == "llama-3.1-8b" {
			return 131072
		}
		return 0
	}
	long := strings.Repeat("context ", 70000) // ~140k tokens: the tokenizer counts the spaces
	fits := strings.Repeat("context ", 1000)
	cases := []struct {
		name      string
		req       schemas.Request
		code      string
		field     string
		mentioned []string
	}{
		{"a 140k-token prompt over a 131,072-token window", schemas.Request{ID: "r", Model: "llama-3.1-8b", Prompt: long, MaxTokens: 64},
			schemas.CodeContextTooLong, "prompt", []string{"131072", "64 in max_tokens"}},
		{"the prompt fits, prompt + max_tokens does not", schemas.Request{ID: "r", Model: "llama-3.1-8b",
			Messages: []schemas.Message{{Role: "user", Content: strings.Repeat("context ", 60000)}}, MaxTokens: 16000},
			schemas.CodeContextTooLong, "max_tokens", []string{"131072", "16000 in max_tokens"}},
		{"a prompt that fits", schemas.Request{ID: "r", Model: "llama-3.1-8b", Prompt: fits, MaxTokens: 64}, "", "", nil},
		{"a model with no known window is not checked", schemas.Request{ID: "r", Model: "tiny", Prompt: long, MaxTokens: 64}, "", "", nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := c.req
			d := Decide(Input{Now: t0, Tenant: "t", Request: &r, Tenants: ts, ContextWindow: window, Load: Load{Slots: 64, FreeSlots: 64}})
			if c.code == "" {
				if d.Error != nil {
					t.Fatalf("refused: %v", d.Error)
				}
				return
			}
			if d.Action != ActionReject || d.Error == nil || d.Error.Code != c.code || d.Error.Field != c.field {
				t.Fatalf("decision %s %v, want reject %s on %s", d.Action, d.Error, c.code, c.field)
			}
			msg := d.Error.Message
			if !strings.Contains(msg, fmt.Sprint(tokensOf(&r)+r.MaxTokens)) {
				t.Errorf("message %q does not name the requested total %d", msg, tokensOf(&r)+r.MaxTokens)
			}
			for _, m := range c.mentioned {
				if !strings.Contains(msg, m) {
					t.Errorf("message %q does not name %q", msg, m)
				}
			}
		})
	}
}

// TestAutoMovesOnlyToModelsThatFit: "auto" picks the smallest adequate
// model whose window holds the request, and refuses with context_too_long
// (not "no model allowed") when none does.
func TestAutoMovesOnlyToModelsThatFit(t *testing.T) {
	// Windows need not grow along the ladder (llama-2-7b has 4k, the 1B
	// Llama 3.2 128k): the tier a 20k-token prompt needs lands on an 8k model.
	ts, err := NewTenants(Config{UnknownTenants: UnknownDefault, ModelLadder: []string{"s-128k", "m-8k", "l-8k", "xl-128k"},
		Default: Profile{Priority: schemas.PriorityCritical, DefaultPriority: schemas.PriorityStandard, AllowAuto: true}})
	if err != nil {
		t.Fatal(err)
	}
	window := func(m string) int {
		return map[string]int{"s-128k": 131072, "m-8k": 8192, "l-8k": 8192, "xl-128k": 131072}[m]
	}
	cases := []struct {
		name, prompt string
		model, code  string
	}{
		{"short prompt: the smallest model", "hello", "s-128k", ""},
		{"20k tokens: past the 8k models to one that holds it", strings.Repeat("context ", 10000), "xl-128k", ""},
		{"over every window", strings.Repeat("context ", 70000), "", schemas.CodeContextTooLong},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := schemas.Request{ID: "r", Model: "auto", Prompt: c.prompt, MaxTokens: 64, Metadata: map[string]string{"task": TaskClassify}}
			d := Decide(Input{Now: t0, Tenant: "t", Request: &r, Tenants: ts, ContextWindow: window, Load: Load{Slots: 8, FreeSlots: 8}})
			if c.code != "" {
				if d.Error == nil || d.Error.Code != c.code {
					t.Fatalf("decision %s %v, want %s", d.Action, d.Error, c.code)
				}
				return
			}
			if d.Error != nil || d.Model != c.model {
				t.Fatalf("model %q (%v; %v), want %q", d.Model, d.Error, d.Reasons, c.model)
			}
		})
	}
}

func TestCheckWait(t *testing.T) {
	placed := schemas.Result{WorkerID: "w1", Timing: schemas.Timing{QueueMs: 250}}
	cases := []struct {
		name      string
		res       schemas.Result
		predicted time.Duration
		deferred  time.Duration
		ok        bool
		measured  time.Duration
		err       time.Duration
	}{
		{"placed", placed, 50 * time.Millisecond, 0, true, 250 * time.Millisecond, -200 * time.Millisecond},
		{"deferral is not queue wait", schemas.Result{WorkerID: "w1", Timing: schemas.Timing{QueueMs: 60250}}, 0, time.Minute, true, 250 * time.Millisecond, -250 * time.Millisecond},
		{"never placed", schemas.Result{Status: schemas.StatusFailed, Timing: schemas.Timing{QueueMs: 5000}}, 0, 0, false, 0, 0},
		{"served from cache", schemas.Result{WorkerID: "w1", FromCache: "exact"}, 0, 0, false, 0, 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			w, ok := CheckWait(schemas.PriorityStandard, c.predicted, c.deferred, c.res)
			if ok != c.ok || (ok && (w.Measured != c.measured || w.Error() != c.err)) {
				t.Fatalf("check %+v ok %v, want measured %v error %v ok %v", w, ok, c.measured, c.err, c.ok)
			}
		})
	}
}
