package breaker

import (
	"container/heap"
	"fmt"
	"testing"
	"time"
)

var t0 = time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)

func at(d time.Duration) time.Time { return t0.Add(d) }

func TestStateMachine(t *testing.T) {
	type step struct {
		at      time.Duration
		op      string // "ok", "err", "slow", "hb", "tick", "allow", "deny"
		want    State
		changed bool
	}
	cfg := Config{Window: 10, MinSamples: 4, FailureRate: 0.5, ConsecutiveFailures: 3, OutlierFactor: 2,
		StaleAfter: 3 * time.Second, OpenFor: 5 * time.Second, MaxOpenFor: 20 * time.Second, ProbeInterval: time.Second, Probes: 2}
	cases := []struct {
		name  string
		steps []step
	}{
		{"consecutive errors trip, cooldown, probes close", []step{
			{0, "ok", Closed, false},
			{time.Second, "err", Closed, false},
			{time.Second, "err", Closed, false},
			{time.Second, "err", Open, true},
			{2 * time.Second, "deny", Open, false},
			{5 * time.Second, "tick", Open, false}, // 4 s into a 5 s cool-down
			{6 * time.Second, "tick", HalfOpen, true},
			{6 * time.Second, "allow", HalfOpen, false},
			{6500 * time.Millisecond, "deny", HalfOpen, false}, // one probe per interval
			{6600 * time.Millisecond, "ok", HalfOpen, false},
			{7 * time.Second, "allow", HalfOpen, false},
			{7100 * time.Millisecond, "ok", Closed, true},
			{7200 * time.Millisecond, "allow", Closed, false},
		}},
		{"latency outliers trip by rate", []step{
			{0, "ok", Closed, false},
			{0, "slow", Closed, false},
			{0, "ok", Closed, false},
			{0, "slow", Open, true}, // 2 of 4 = 50 %
		}},
		{"failed probe reopens with a doubled cool-down", []step{
			{0, "err", Closed, false},
			{0, "err", Closed, false},
			{0, "err", Open, true},
			{5 * time.Second, "tick", HalfOpen, true},
			{5 * time.Second, "allow", HalfOpen, false},
			{5 * time.Second, "slow", Open, true},
			{14 * time.Second, "tick", Open, false}, // 10 s now, not 5
			{15 * time.Second, "tick", HalfOpen, true},
		}},
		{"stale heartbeat opens, resumed heartbeat probes", []step{
			{0, "hb", Closed, false},
			{2 * time.Second, "tick", Closed, false},
			{4 * time.Second, "tick", Open, true},
			{20 * time.Second, "tick", Open, false}, // still silent: no probing
			{21 * time.Second, "hb", HalfOpen, true},
			{21 * time.Second, "allow", HalfOpen, false},
		}},
		{"late results while open change nothing", []step{
			{0, "err", Closed, false},
			{0, "err", Closed, false},
			{0, "err", Open, true},
			{time.Second, "ok", Open, false},
			{time.Second, "err", Open, false},
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := NewSet(cfg)
			for i, st := range tc.steps {
				now := at(st.at)
				var changed bool
				var tr Transition
				switch st.op {
				case "ok":
					tr, changed = s.Observe("w", Outcome{ObservedSeconds: 1, PredictedSeconds: 1}, now)
				case "err":
					tr, changed = s.Observe("w", Outcome{Code: "backend_error"}, now)
				case "slow":
					tr, changed = s.Observe("w", Outcome{ObservedSeconds: 5, PredictedSeconds: 1}, now)
				case "hb":
					tr, changed = s.Heartbeat("w", now, now)
				case "tick":
					trs := s.Tick(now)
					if changed = len(trs) > 0; changed {
						tr = trs[0]
					}
				case "allow", "deny":
					if got := s.Allow("w", now); got != (st.op == "allow") {
						t.Fatalf("step %d: Allow = %v, want %v", i, got, st.op == "allow")
					}
				}
				if changed != st.changed {
					t.Fatalf("step %d (%s): changed = %v, want %v (%+v)", i, st.op, changed, st.changed, tr)
				}
				if changed && (tr.To != st.want || tr.Reason == "" || tr.Worker != "w" || !tr.At.Equal(now)) {
					t.Fatalf("step %d: transition %+v, want to %v with a reason", i, tr, st.want)
				}
				if got := s.State("w"); got != st.want {
					t.Fatalf("step %d (%s): state %v, want %v", i, st.op, got, st.want)
				}
			}
		})
	}
}

func TestTransitionCarriesCauseAndEventKind(t *testing.T) {
	s := NewSet(Config{ConsecutiveFailures: 2, MinSamples: 10, Window: 10})
	s.Observe("w1", Outcome{ObservedSeconds: 9, PredictedSeconds: 1}, t0)
	tr, ok := s.Observe("w1", Outcome{ObservedSeconds: 9, PredictedSeconds: 1}, t0)
	if !ok || tr.Cause != CauseSlow || tr.EventKind() != "breaker_open" || tr.OpenUntil.IsZero() {
		t.Fatalf("transition %+v", tr)
	}
	st := s.States()
	if len(st) != 1 || st[0].State != Open || st[0].Worker != "w1" {
		t.Fatalf("states %+v", st)
	}
	if s.Allowed("unknown", t0) != true || s.State("unknown") != Closed {
		t.Fatal("unknown worker must be closed")
	}
}

// completion is a request finishing on a worker in the fleet simulation.
type completion struct {
	at        time.Time
	worker    string
	out       Outcome
	predicted float64
}

type completions []completion

func (c completions) Len() int           { return len(c) }
func (c completions) Less(i, j int) bool { return c[i].at.Before(c[j].at) }
func (c completions) Swap(i, j int)      { c[i], c[j] = c[j], c[i] }
func (c *completions) Push(x any)        { *c = append(*c, x.(completion)) }
func (c *completions) Pop() any {
	old := *c
	x := old[len(old)-1]
	*c = old[:len(old)-1]
	return x
}

// fleetSim runs a round-robin router over workers with the default breaker
// config in virtual time. Worker "w0" degrades at badAt in the given way.
// It returns w0's share of placements in [from, to) after badAt.
func fleetSim(t *testing.T, workers int, rate float64, badAt time.Duration, mode string, from, to time.Duration) (share float64, placed, total int) {
	t.Helper()
	s := NewSet(Config{})
	names := make([]string, workers)
	for i := range names {
		names[i] = fmt.Sprintf("w%d", i)
	}
	var pending completions
	step := time.Duration(float64(time.Second) / rate)
	end := badAt + to
	rr := 0
	nextTick := time.Duration(0)
	for el := time.Duration(0); el < end; el += step {
		now := at(el)
		for pending.Len() > 0 && !pending[0].at.After(now) {
			c := heap.Pop(&pending).(completion)
			s.Observe(c.worker, c.out, c.at)
		}
		if el >= nextTick {
			for _, w := range names {
				if !(mode == "silent" && w == "w0" && el >= badAt) {
					s.Heartbeat(w, now, now)
				}
			}
			s.Tick(now)
			nextTick += 500 * time.Millisecond
		}
		// Round robin over the workers the breakers allow.
		pick := ""
		for k := 0; k < workers; k++ {
			w := names[(rr+k)%workers]
			if s.Allow(w, now) {
				pick = w
				rr = (rr + k + 1) % workers
				break
			}
		}
		if pick == "" {
			t.Fatalf("at %s no worker allowed", el)
		}
		predicted := 0.8
		c := completion{worker: pick, predicted: predicted, out: Outcome{PredictedSeconds: predicted, ObservedSeconds: predicted * (0.8 + 0.1*float64(rr%5))}}
		if pick == "w0" && el >= badAt {
			switch mode {
			case "errors":
				c.out = Outcome{Code: "backend_error"}
				c.out.ObservedSeconds = 0.2
			case "slow":
				c.out.ObservedSeconds = predicted * 6
			case "flaky":
				// slow and erroring: every other request fails, the rest crawl.
				if total%2 == 0 {
					c.out.Code = "backend_error"
				}
				c.out.ObservedSeconds = predicted * 4
			case "silent":
				c.out.ObservedSeconds = 1e9 // never answers within the run
			}
		}
		c.at = now.Add(time.Duration(c.out.ObservedSeconds * float64(time.Second)))
		heap.Push(&pending, c)
		if el >= badAt+from {
			total++
			if pick == "w0" {
				placed++
			}
		}
	}
	return float64(placed) / float64(total), placed, total
}

// TestDegradedWorkerTrafficShare is the acceptance figure: a
// degraded worker receives under 5 % of traffic within 10 s of going bad.
func TestDegradedWorkerTrafficShare(t *testing.T) {
	for _, mode := range []string{"errors", "slow", "flaky", "silent"} {
		t.Run(mode, func(t *testing.T) {
			// From 10 s after going bad, over the next minute.
			share, placed, total := fleetSim(t, 8, 200, 20*time.Second, mode, 10*time.Second, 70*time.Second)
			t.Logf("%s: degraded worker got %d of %d placements (%.2f%%) in [bad+10s, bad+70s)", mode, placed, total, 100*share)
			if share >= 0.05 {
				t.Fatalf("degraded worker share %.2f%% >= 5%%", 100*share)
			}
			if placed == 0 && mode != "silent" {
				t.Fatalf("no probes at all reached the degraded worker: it could never recover")
			}
		})
	}
}

func TestHealthyFleetNeverTrips(t *testing.T) {
	s := NewSet(Config{})
	// Latency jitter up to 2.5x of prediction stays under the factor 3.
	for i := 0; i < 10000; i++ {
		now := at(time.Duration(i) * 10 * time.Millisecond)
		w := fmt.Sprintf("w%d", i%4)
		s.Heartbeat(w, now, now)
		obs := 1 + 1.5*float64(i%7)/6
		if _, changed := s.Observe(w, Outcome{ObservedSeconds: obs, PredictedSeconds: 1}, now); changed {
			t.Fatalf("healthy worker %s tripped at %d", w, i)
		}
		if trs := s.Tick(now); len(trs) > 0 {
			t.Fatalf("tick tripped %+v", trs)
		}
	}
}

func TestRecoveredWorkerCloses(t *testing.T) {
	s := NewSet(Config{})
	for i := 0; i < 5; i++ {
		s.Observe("w", Outcome{Code: "worker_failed"}, t0)
	}
	if s.State("w") != Open {
		t.Fatal("not open")
	}
	now := t0
	for i := 0; i < 100 && s.State("w") != Closed; i++ {
		now = now.Add(500 * time.Millisecond)
		s.Heartbeat("w", now, now)
		s.Tick(now)
		if s.Allow("w", now) {
			s.Observe("w", Outcome{ObservedSeconds: 1, PredictedSeconds: 1}, now)
		}
	}
	if s.State("w") != Closed {
		t.Fatalf("healthy again but state %v", s.State("w"))
	}
	if d := now.Sub(t0); d > 10*time.Second {
		t.Fatalf("took %s to close", d)
	}
}

// TestOutliersAgainstTheFleet: latency outliers are judged against the
// fleet's median observed/predicted ratio. When every worker runs four
// times its predictions (an overload the cost model underrates), none is
// an outlier and no breaker opens; one worker five times slower than the
// rest still is.
func TestOutliersAgainstTheFleet(t *testing.T) {
	for _, tc := range []struct {
		name     string
		ratios   map[string]float64
		wantOpen []string
	}{
		{"whole fleet behind its predictions", map[string]float64{"w0": 4, "w1": 4, "w2": 4.5, "w3": 4}, nil},
		{"one slow worker among healthy ones", map[string]float64{"w0": 1, "w1": 1.1, "w2": 5, "w3": 1}, []string{"w2"}},
		{"one slow worker in an overloaded fleet", map[string]float64{"w0": 4, "w1": 4, "w2": 20, "w3": 4}, []string{"w2"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := NewSet(Config{})
			now := t0
			opened := map[string]bool{}
			for round := 0; round < 40; round++ {
				now = now.Add(500 * time.Millisecond)
				for _, w := range []string{"w0", "w1", "w2", "w3"} {
					s.Heartbeat(w, now, now)
					if tr, ok := s.Observe(w, Outcome{PredictedSeconds: 2, ObservedSeconds: 2 * tc.ratios[w]}, now); ok && tr.To == Open {
						opened[w] = true
					}
				}
				s.Tick(now)
			}
			for _, w := range []string{"w0", "w1", "w2", "w3"} {
				want := false
				for _, x := range tc.wantOpen {
					want = want || x == w
				}
				if opened[w] != want {
					t.Errorf("%s opened %v, want %v (fleet ratio %.2f)", w, opened[w], want, s.fleetRatio)
				}
			}
		})
	}
}
