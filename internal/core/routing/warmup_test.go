package routing

import (
	"strings"
	"testing"
	"time"

	"github.com/switchyard-ai/switchyard/schemas"
)

const smallModel = "llama-3.2-1b"

// smallPool is a pool of H100s serving the 1B model, at zero replicas.
func smallPool(max int) *PoolSpec {
	return &PoolSpec{Key: "h100:llama-3_2-1b", GPU: "h100", Model: smallModel, Dtype: "bf16", TP: 1, Max: max}
}

func admittedFor(id, m string, deadline time.Duration, at time.Time) *schemas.Admitted {
	a := admitted(id, "acme", deadline, 200, 32, at)
	a.Model, a.Request.Model = m, m
	return a
}

func failOf(acts []Action, id string) *schemas.Error {
	for _, a := range only(acts, ActFail) {
		if a.ID == id {
			return a.Err
		}
	}
	return nil
}

// TestWarmupHoldOrRefuse is the decision for a request no live worker
// serves: held for a scalable pool's cold start when its deadline allows
// it, answered at once as unplaceable when no pool serves the model or
// its deadline is shorter than the cold start, and left waiting when the
// router knows neither a fleet nor a pool yet.
func TestWarmupHoldOrRefuse(t *testing.T) {
	tests := []struct {
		name string
		// fleet: whether an 8B worker heartbeats; pool: the pool described.
		fleet    bool
		pool     *PoolSpec
		model    string
		deadline time.Duration
		// want: "held", "unplaceable" or "waiting"; reason words it names.
		want   string
		reason []string
	}{
		{name: "scalable pool, deadline allows the cold start", fleet: true, pool: smallPool(2), model: smallModel, deadline: 2 * time.Minute, want: "held"},
		{name: "pool at zero with an empty fleet", pool: smallPool(2), model: smallModel, deadline: 2 * time.Minute, want: "held"},
		{name: "no pool serves the model", fleet: true, pool: smallPool(2), model: "llama-3.2-3b", deadline: 2 * time.Minute,
			want: "unplaceable", reason: []string{"llama-3.2-3b", "no scalable pool"}},
		{name: "no pools at all, fleet serves another model", fleet: true, model: smallModel, deadline: 2 * time.Minute,
			want: "unplaceable", reason: []string{smallModel, "no scalable pool"}},
		{name: "deadline shorter than the cold start", fleet: true, pool: smallPool(2), model: smallModel, deadline: 3 * time.Second,
			want: "unplaceable", reason: []string{"cold start", "deadline", "h100:llama-3_2-1b"}},
		{name: "pool with no replicas allowed", fleet: true, pool: smallPool(0), model: smallModel, deadline: 2 * time.Minute,
			want: "unplaceable", reason: []string{"no scalable pool"}},
		{name: "nothing known yet", model: smallModel, deadline: 2 * time.Minute, want: "waiting"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := newSim(t, Config{})
			if tc.fleet {
				s.apply(Input{Kind: InHeartbeat, Heartbeat: heartbeat("big", 1)})
			}
			if tc.pool != nil {
				s.apply(Input{Kind: InPool, Pool: tc.pool})
			}
			acts := s.admit(admittedFor("r1", tc.model, tc.deadline, s.now))
			acts = append(acts, s.advance(time.Second)...)
			e := failOf(acts, "r1")
			held := events(acts, EventHeldForWarmup)
			switch tc.want {
			case "held":
				if e != nil || len(held) != 1 || len(only(acts, ActDispatch)) != 0 {
					t.Fatalf("want held once; fail %v, held events %d, actions %s", e, len(held), kinds(acts))
				}
				if s.core.HeldForWarmupCount() != 1 || s.core.Queued() != 0 {
					t.Fatalf("held for warm-up %d, queued %d: want 1 held apart from the queue", s.core.HeldForWarmupCount(), s.core.Queued())
				}
				if cold := held[0].Fields["cold_start_left_s"].(float64); cold <= 3 {
					t.Fatalf("cold start left %.1fs: want the pool's cold load priced by the cost model", cold)
				}
			case "unplaceable":
				if e == nil || e.Code != schemas.CodeUnplaceable {
					t.Fatalf("want unplaceable at once, got %v; actions %s", e, kinds(acts))
				}
				for _, w := range tc.reason {
					if !strings.Contains(e.Message, w) {
						t.Errorf("reason %q does not name %q", e.Message, w)
					}
				}
				if s.core.HeldCount() != 0 {
					t.Fatalf("%d still held after the answer", s.core.HeldCount())
				}
				// Refused for the cold start: still demand the pool's controller hears of.
				wantRefused := 0
				if strings.Contains(e.Message, "cold start") {
					wantRefused = 1
				}
				if got := s.core.HeldForWarmup()[smallPool(2).Key].Refused; got != wantRefused {
					t.Fatalf("refused count %d, want %d", got, wantRefused)
				}
				if wantRefused > 0 && len(events(acts, EventHeldDemand)) == 0 {
					t.Fatalf("no held_demand event carried the refusal: %s", kinds(acts))
				}
			case "waiting":
				if e != nil || len(held) != 0 || s.core.Queued() != 1 {
					t.Fatalf("want queued and waiting; fail %v, held events %d, queued %d", e, len(held), s.core.Queued())
				}
			}
		})
	}
}

// TestWarmupBurstServedOnHeartbeat holds a burst for a pool at zero: its
// demand goes out as one held_demand event for the burst, the requests
// are dispatched on the heartbeat of the replica that warmed, and the
// demand then drops to zero.
func TestWarmupBurstServedOnHeartbeat(t *testing.T) {
	s := newSim(t, Config{})
	s.apply(Input{Kind: InPool, Pool: smallPool(2)})
	var acts []Action
	for i := 0; i < 20; i++ {
		acts = append(acts, s.admit(admittedFor(string(rune('a'+i)), smallModel, 2*time.Minute, s.now))...)
	}
	acts = append(acts, s.advance(5*time.Second)...)
	if n := len(only(acts, ActFail)); n != 0 {
		t.Fatalf("%d failed while a pool could warm: %s", n, kinds(acts))
	}
	demand := events(acts, EventHeldDemand)
	if len(demand) == 0 || demand[0].Fields["requests"] != 20 {
		t.Fatalf("held demand events %v: want the first to carry the whole burst of 20", demand)
	}
	for _, ev := range demand {
		if ev.Fields["requests"] != 20 {
			t.Fatalf("held demand changed to %v with nothing admitted or served", ev.Fields["requests"])
		}
	}
	// Refreshed every HeldDemandRefresh while held, not once per request.
	if n, most := len(demand), int(5*time.Second/HeldDemandRefresh)+1; n > most {
		t.Fatalf("%d held demand events in 5s: want at most %d", n, most)
	}
	hb := heartbeat("small-1", 1)
	hb.Models[0].Name = smallModel
	acts = s.apply(Input{Kind: InHeartbeat, Heartbeat: hb})
	if n := len(only(acts, ActDispatch)); n != 20 {
		t.Fatalf("%d dispatched on the warmed replica's heartbeat, want 20: %s", n, kinds(acts))
	}
	last := events(acts, EventHeldDemand)
	if len(last) != 1 || last[0].Fields["requests"] != 0 || s.core.HeldForWarmupCount() != 0 {
		t.Fatalf("after the burst was placed: held demand events %v, held %d; want one zero", last, s.core.HeldForWarmupCount())
	}
}

// TestWarmupDeadlineWithoutReplica: a held request whose replica never
// joins is answered deadline_exceeded once its deadline no longer covers
// its service, not before.
func TestWarmupDeadlineWithoutReplica(t *testing.T) {
	s := newSim(t, Config{})
	s.apply(Input{Kind: InPool, Pool: smallPool(2)})
	cold := s.core.pools[smallPool(2).Key].spec.ColdStartSeconds
	deadline := time.Duration((cold + 5) * float64(time.Second))
	s.admit(admittedFor("late", smallModel, deadline, s.now))
	start := s.now
	var failedAt time.Time
	for s.now.Sub(start) < deadline+time.Second && failedAt.IsZero() {
		s.apply(Input{Kind: InPool, Pool: smallPool(2)})
		if e := failOf(s.advance(100*time.Millisecond), "late"); e != nil {
			if e.Code != schemas.CodeDeadlineExceeded || !strings.Contains(e.Message, "cold start") {
				t.Fatalf("got %v, want deadline_exceeded naming the cold start", e)
			}
			failedAt = s.now
		}
	}
	if failedAt.IsZero() {
		t.Fatal("never answered")
	}
	if early := start.Add(deadline).Sub(failedAt); early > 2*time.Second || early < 0 {
		t.Fatalf("answered %s before its deadline: want within its service time of it", early)
	}
}

// TestWarmupReplays: the warm-up path's inputs (pools, admissions, ticks,
// the warmed replica's heartbeat), journaled and decoded, drive a fresh
// core to the same actions — held, held demand, dispatch — as the live one.
func TestWarmupReplays(t *testing.T) {
	live := newSim(t, Config{})
	var ins []Input
	var want []string
	step := func(in Input) {
		in.At = live.now
		ins = append(ins, in)
		for _, a := range live.core.Apply(in, nil) {
			want = append(want, kinds([]Action{a})+"@"+a.Worker)
		}
	}
	step(Input{Kind: InPool, Pool: smallPool(2)})
	for i := 0; i < 5; i++ {
		step(Input{Kind: InAdmitted, Admitted: admittedFor(string(rune('a'+i)), smallModel, time.Minute, live.now)})
		step(Input{Kind: InTick})
		live.now = live.now.Add(700 * time.Millisecond)
	}
	hb := heartbeat("small-1", 1)
	hb.Models[0].Name = smallModel
	step(Input{Kind: InHeartbeat, Heartbeat: hb})
	if !strings.Contains(strings.Join(want, " "), "dispatch(e)") {
		t.Fatalf("the held requests were not dispatched live: %v", want)
	}
	j := NewJournal()
	for _, in := range ins {
		if err := j.Add(in, 0); err != nil {
			t.Fatal(err)
		}
	}
	entries, err := DecodeJournal(j.Take())
	if err != nil {
		t.Fatal(err)
	}
	replay := newSim(t, Config{})
	var got []string
	for _, e := range entries {
		for _, a := range replay.core.Apply(e.Input, nil) {
			got = append(got, kinds([]Action{a})+"@"+a.Worker)
		}
	}
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Fatalf("replay diverged:\nlive   %v\nreplay %v", want, got)
	}
}
