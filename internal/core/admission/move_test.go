package admission

import (
	"math"
	"strings"
	"testing"
	"time"

	"github.com/switchyard-ai/switchyard/internal/core/perf"
	"github.com/switchyard-ai/switchyard/schemas"
)

// fleetServing builds a FleetView from one heartbeat per worker, each serving
// its models in the given states (load_s for the non-hot ones).
func fleetServing(now time.Time, workers map[string][]schemas.ModelState) *FleetView {
	f := &FleetView{}
	for id, ms := range workers {
		f.Observe(schemas.Heartbeat{WorkerID: id, Pool: "h100", GPU: "h100", Models: ms, SentAt: now}, now)
	}
	return f
}

func hotModel(m string) schemas.ModelState {
	return schemas.ModelState{Name: m, State: schemas.WeightHot}
}

func coldModel(m string, s float64) schemas.ModelState {
	return schemas.ModelState{Name: m, State: schemas.WeightCold, LoadSeconds: s}
}

func TestOffers(t *testing.T) {
	now := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	f := fleetServing(now, map[string][]schemas.ModelState{
		"gpu-0": {hotModel("llama-3.1-8b")},
		"gpu-1": {hotModel("llama-3.1-8b")},
		"gpu-2": {coldModel("llama-3.2-3b", 12)},
		"gpu-3": {coldModel("llama-3.2-3b", 7)},
	})
	// A draining worker offers nothing: it takes no new work.
	f.Observe(schemas.Heartbeat{WorkerID: "gpu-4", GPU: "h100", Draining: true, Models: []schemas.ModelState{hotModel("llama-3.2-1b")}, SentAt: now}, now)
	o := f.Offers(now, []ScalablePool{{Pool: "l4:llama-3_1-70b", GPU: "l4", Model: "llama-3.1-70b", ColdStartSeconds: 90}}, nil)
	if o.Live != 4 {
		t.Fatalf("live %d, want 4 (the draining worker left out)", o.Live)
	}
	want := map[string]Offer{
		"llama-3.1-8b":  {Hot: 2, WarmSeconds: 0},
		"llama-3.2-3b":  {Hot: 0, WarmSeconds: 7},
		"llama-3.1-70b": {Hot: 0, WarmSeconds: 90},
	}
	if len(o.Models) != len(want) {
		t.Fatalf("offered %v, want %v", o.Names(), want)
	}
	for m, w := range want {
		got, ok := o.Models[m]
		if !ok || got.Hot != w.Hot || got.WarmSeconds != w.WarmSeconds {
			t.Errorf("%s: got %+v (offered %v), want hot %d warm %.0fs", m, got, ok, w.Hot, w.WarmSeconds)
		}
	}
	// Heartbeats older than the staleness bound are not the live fleet.
	if later := f.Offers(now.Add(10*time.Second), nil, nil); later.Informed() {
		t.Fatalf("stale fleet still informs: %+v", later)
	}
}

func TestServes(t *testing.T) {
	o := FleetOffers{Live: 1, Models: map[string]Offer{
		"hot":  {Model: "hot", Hot: 1},
		"cold": {Model: "cold", WarmSeconds: 30},
	}}
	for _, tc := range []struct {
		model           string
		latency, budget time.Duration
		want            bool
		why             string
	}{
		{"hot", 2 * time.Second, time.Second, true, "hot: the shedder, not the move, judges its deadline"},
		{"cold", 2 * time.Second, 10 * time.Second, false, "30 s warm-up in a 10 s budget"},
		{"cold", 2 * time.Second, 31 * time.Second, false, "warm-up fits but not with the request's own 2 s"},
		{"cold", 2 * time.Second, 32 * time.Second, true, "warm-up and request fit"},
		{"cold", 2 * time.Second, 0, true, "no bound"},
		{"absent", 0, 0, false, "not offered at all"},
	} {
		if _, got := o.Serves(tc.model, tc.latency, tc.budget); got != tc.want {
			t.Errorf("%s (%s): got %v, want %v", tc.model, tc.why, got, tc.want)
		}
	}
}

// TestAutoMovesOnlyWhereTheFleetServes runs ChooseModel through the lookup
// the admitter gives Decide: the case (a classify request, tier 0,
// on a fleet of 8B workers) must land on the 8B model, not the 1B one.
func TestAutoMovesOnlyWhereTheFleetServes(t *testing.T) {
	now := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	ladder := DefaultLadder
	p := Profile{Name: "acme", AllowAuto: true, AllowDowngrade: true}
	est := LadderEstimator(ladder, nil)
	classify := &schemas.Request{Model: "auto", MaxTokens: 32, Metadata: map[string]string{"task": "classify"},
		Messages: []schemas.Message{{Role: "user", Content: "Classify this ticket"}}}
	for _, tc := range []struct {
		name   string
		fleet  map[string][]schemas.ModelState
		pools  []ScalablePool
		req    *schemas.Request
		budget time.Duration
		want   string
	}{
		{"only 8B hot: auto goes to 8B", map[string][]schemas.ModelState{"a": {hotModel("llama-3.1-8b")}, "b": {hotModel("llama-3.1-8b")}},
			nil, classify, 8 * time.Second, "llama-3.1-8b"},
		{"1B hot too: auto takes the small one", map[string][]schemas.ModelState{"a": {hotModel("llama-3.1-8b")}, "b": {hotModel("llama-3.2-1b")}},
			nil, classify, 8 * time.Second, "llama-3.2-1b"},
		{"1B only cold, warm-up longer than the budget", map[string][]schemas.ModelState{"a": {hotModel("llama-3.1-8b")}, "b": {coldModel("llama-3.2-1b", 20)}},
			nil, classify, 8 * time.Second, "llama-3.1-8b"},
		{"1B cold, budget allows the warm-up", map[string][]schemas.ModelState{"a": {hotModel("llama-3.1-8b")}, "b": {coldModel("llama-3.2-1b", 20)}},
			nil, classify, time.Minute, "llama-3.2-1b"},
		{"1B in a scalable pool within the budget", map[string][]schemas.ModelState{"a": {hotModel("llama-3.1-8b")}},
			[]ScalablePool{{Pool: "l4", Model: "llama-3.2-1b", ColdStartSeconds: 15}}, classify, time.Minute, "llama-3.2-1b"},
		{"downgrade 70B only to a served model", map[string][]schemas.ModelState{"a": {hotModel("llama-3.1-8b")}, "b": {hotModel("llama-3.1-70b")}},
			nil, &schemas.Request{Model: "llama-3.1-70b", MaxTokens: 32, Metadata: map[string]string{"task": "classify"},
				Messages: []schemas.Message{{Role: "user", Content: "Classify this ticket"}}}, 8 * time.Second, "llama-3.1-8b"},
		{"no fleet seen: the catalog's candidates, as before", nil, nil, classify, 8 * time.Second, "llama-3.2-1b"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := fleetServing(now, tc.fleet).Offers(now, tc.pools, nil)
			pt := 8
			known := o.MoveCandidates(func(string) bool { return true }, tc.req.Model, est, pt, tc.req.MaxTokens, tc.budget)
			mv := ChooseModel(p, ladder, known, tc.req, EstimateComplexity(tc.req, pt))
			if mv.Error != nil || mv.Model != tc.want {
				t.Fatalf("chose %q (err %v, %s), want %q", mv.Model, mv.Error, mv.Reason, tc.want)
			}
		})
	}
}

func TestMoveCandidatesKeepsTheRequestedModelsValidation(t *testing.T) {
	o := FleetOffers{Live: 1, Models: map[string]Offer{"llama-3.1-8b": {Hot: 1}}}
	catalog := func(m string) bool { return strings.HasPrefix(m, "llama-") }
	known := o.MoveCandidates(catalog, "llama-3.1-70b", nil, 8, 32, time.Second)
	if !known("llama-3.1-70b") {
		t.Error("the requested model must pass as the catalog says, served or not")
	}
	if known("llama-3.2-1b") {
		t.Error("an unserved alternative passed")
	}
	if known("gpt-9") {
		t.Error("a model the catalog does not know passed")
	}
}

func TestUnplaceable(t *testing.T) {
	o := FleetOffers{Live: 3, Models: map[string]Offer{"llama-3.1-8b": {Hot: 3}, "llama-3.2-3b": {WarmSeconds: 20}}}
	for _, tc := range []struct {
		name, model string
		cands       []string
		offers      FleetOffers
		want        string // substring of the message; "" for none
	}{
		{"served", "llama-3.1-8b", nil, o, ""},
		{"warmable counts as servable", "llama-3.2-3b", nil, o, ""},
		{"named and served nowhere", "llama-3.1-70b", nil, o, `no live worker serves model "llama-3.1-70b"`},
		{"auto with a served candidate", "auto", []string{"llama-3.2-1b", "llama-3.1-8b"}, o, ""},
		{"auto with none served", "auto", []string{"llama-3.2-1b"}, o, `model "auto": no live worker serves any of llama-3.2-1b`},
		{"uninformed view refuses nothing", "llama-3.1-70b", nil, FleetOffers{}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := tc.offers.Unplaceable(tc.model, tc.cands)
			if tc.want == "" {
				if e != nil {
					t.Fatalf("refused: %v", e)
				}
				return
			}
			if e == nil || e.Code != schemas.CodeUnplaceable || !strings.Contains(e.Message, tc.want) {
				t.Fatalf("got %v, want unplaceable containing %q", e, tc.want)
			}
			if !strings.Contains(e.Message, "llama-3.1-8b") {
				t.Errorf("reason %q does not name what the fleet serves", e.Message)
			}
		})
	}
}

// TestPoolColdStartFromTheReplicasMessage pins where a scalable pool's cold
// start comes from: the controller's own figure when its message carries
// one, else the cold load of the message's own replica kind — never a TP
// the admitter guesses (it once took the fewest GPUs the weights fit and
// priced that load, whatever the controller said).
func TestPoolColdStartFromTheReplicasMessage(t *testing.T) {
	pred := perf.NewPredictor(nil)
	tp2 := pred.LoadSeconds("h100", "llama-3.1-70b", "bf16", 2, schemas.WeightCold)
	if math.IsInf(tp2, 0) || tp2 <= 0 || tp2 == 42 {
		t.Fatalf("the test needs a finite cold load of a 70B model on two H100s other than 42 s, got %v", tp2)
	}
	for _, tc := range []struct {
		name string
		pool ScalablePool
		load ColdLoader
		want float64
	}{
		{"the controller's figure", ScalablePool{Pool: "p", GPU: "h100", Model: "llama-3.1-70b", TP: 2, ColdStartSeconds: 42}, pred, 42},
		{"priced on the message's TP", ScalablePool{Pool: "p", GPU: "h100", Model: "llama-3.1-70b", TP: 2}, pred, tp2},
		{"no TP named: one GPU, which cannot hold it", ScalablePool{Pool: "p", GPU: "h100", Model: "llama-3.1-70b"}, pred, 0},
		{"a kind the model cannot price offers nothing", ScalablePool{Pool: "p", GPU: "no-such-gpu", Model: "llama-3.1-70b", TP: 2}, pred, 0},
		{"nothing to price with", ScalablePool{Pool: "p", GPU: "h100", Model: "llama-3.1-70b", TP: 2}, nil, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.pool.ColdStart(tc.load); math.Abs(got-tc.want) > 1e-9 {
				t.Fatalf("cold start %v, want %v", got, tc.want)
			}
			o := (&FleetView{}).Offers(time.Now(), []ScalablePool{tc.pool}, tc.load)
			of, ok := o.Models["llama-3.1-70b"]
			if tc.want == 0 {
				if ok {
					t.Fatalf("offered %+v for a pool with no cold start", of)
				}
				return
			}
			if !ok || math.Abs(of.WarmSeconds-tc.want) > 1e-9 {
				t.Fatalf("offer %+v (offered %v), want warm in %v", of, ok, tc.want)
			}
		})
	}
}

// TestDecideOnTheFleet runs the fleet step inside Decide: a model no
// worker serves and no pool can start is refused unplaceable at once,
// naming what the fleet serves; "auto" moves only to a served model; a
// request refused on other grounds keeps its own answer.
func TestDecideOnTheFleet(t *testing.T) {
	now := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	ts, err := NewTenants(Config{Default: Profile{Priority: schemas.PriorityStandard, AllowAuto: true}})
	if err != nil {
		t.Fatal(err)
	}
	offers := fleetServing(now, map[string][]schemas.ModelState{"a": {hotModel("llama-3.1-8b")}}).Offers(now, nil, nil)
	classify := schemas.Request{Model: "auto", MaxTokens: 16, DeadlineMs: 8000, Metadata: map[string]string{"task": "classify"},
		Messages: []schemas.Message{{Role: "user", Content: "Classify this ticket"}}}
	named := schemas.Request{Model: "llama-3.1-70b", MaxTokens: 16, Messages: []schemas.Message{{Role: "user", Content: "hello"}}}
	badClass := named
	badClass.Priority = "urgent"
	for _, tc := range []struct {
		name   string
		req    schemas.Request
		offers *FleetOffers
		action string
		code   string
		model  string
	}{
		{"auto on the served model", classify, &offers, ActionAdmit, "", "llama-3.1-8b"},
		{"no fleet knowledge: the ladder's pick", classify, nil, ActionAdmit, "", "llama-3.2-1b"},
		{"named model served nowhere", named, &offers, ActionReject, schemas.CodeUnplaceable, "llama-3.1-70b"},
		{"invalid class answered as before", badClass, &offers, ActionReject, schemas.CodeInvalidPriority, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := tc.req
			d := Decide(Input{Now: now, Tenant: "acme", Request: &r, Tenants: ts, Load: Load{RequestsPerSec: 10}, Offers: tc.offers})
			code := ""
			if d.Error != nil {
				code = d.Error.Code
			}
			if d.Action != tc.action || code != tc.code || (tc.model != "" && d.Model != tc.model) {
				t.Fatalf("decision %s %q on %q (%v), want %s %q on %q", d.Action, code, d.Model, d.Error, tc.action, tc.code, tc.model)
			}
			if code == schemas.CodeUnplaceable && !strings.Contains(d.Error.Message, "llama-3.1-8b") {
				t.Errorf("reason %q does not name what the fleet serves", d.Error.Message)
			}
		})
	}
}
