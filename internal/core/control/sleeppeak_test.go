package control

import (
	"testing"
	"time"

	"github.com/switchyard-ai/switchyard/schemas"
)

// A level reached for the first time keeps the quiet before it as its
// arrival — sudden when the forecast did not ask for it, with the misses
// of a fleet one replica short over the lead time after it — and no gap:
// the hold still reads returns alone, so the defaults do not see it.
func TestObserveLevelsKeepsTheArrival(t *testing.T) {
	c := newCtl(t, Pool{GPU: "h100", Model: model, Min: 1, Max: 4}, nil)
	ps := c.pools[0]
	const lead = 30
	short := func(per float64) func(int) float64 {
		return func(k int) float64 { return per * float64(k) }
	}
	at := func(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }
	ps.observeLevels(at(0), 1, 1, lead, short(0))
	ps.observeLevels(at(100), 3, 1, lead, short(1)) // levels 2 and 3 first reached by a burst
	ps.observeLevels(at(110), 3, 1, lead, short(2)) // its misses grow within the lead time
	ps.observeLevels(at(150), 3, 1, lead, short(9)) // past it: not counted
	ps.observeLevels(at(160), 4, 4, lead, short(0)) // level 4 reached foreseen: gradual
	for k, want := range map[int]gap{2: {seconds: 100, sudden: true, misses: 4}, 3: {seconds: 100, sudden: true, misses: 6}, 4: {seconds: 160}} {
		if got := ps.levels[k-1].arrival; got != want {
			t.Errorf("level %d arrival %+v, want %+v", k, got, want)
		}
		if n := len(ps.levels[k-1].gaps); n != 0 {
			t.Errorf("level %d kept %d gaps for its first demand", k, n)
		}
	}
	if h, n := c.holdFor(ps, 3); n != 0 || h != c.priorHold(ps) {
		t.Fatalf("hold %s from %d gaps after a first climb, want the prior %s", h, n, c.priorHold(ps))
	}
}

// End to end through Decide: a pool that climbed to 4 replicas on a
// sudden burst and fell back to 1 keeps the climb's three replicas asleep
// past their hold — one more each decision, the top first — for the
// return its evidence expects, and releases them once past the latest
// that return was expected (1.25 × the gap after each level dropped).
// The evidence is the level's returns, or before its first return the
// quiet before its first demand. The rule before kept one replica asleep
// at most (the rest held hot below it), and before a first return
// released all three at their hold.
func TestDecideKeepsAPeakAsleepForItsReturn(t *testing.T) {
	sudden := gap{seconds: 100, sudden: true, misses: 20}
	for _, tc := range []struct {
		name    string
		arrival gap
		gaps    []gap
		due     time.Duration // the latest the return is expected, after the drop
	}{
		{"returns seen", gap{}, []gap{sudden, sudden}, 125 * time.Second},
		{"no return yet: the quiet before the first demand", sudden, nil, 125 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newCtl(t, Pool{GPU: "h100", Model: model, Min: 1, Max: 8}, func(c *Config) { c.SleepOnRelease = true })
			ps := c.pools[0]
			ps.started, ps.desired, ps.firstAt = true, 4, t0
			ps.levels = make([]level, 8)
			for k := 1; k <= 4; k++ {
				ps.levels[k-1].needed = true
				if k >= 2 {
					ps.levels[k-1].arrival, ps.levels[k-1].gaps = tc.arrival, tc.gaps
				}
			}
			hbs := (&fleet{n: 4}).heartbeats(0, 0)
			now, maxAsleep, sleeps, lowest := t0, 0, 0, 4
			for i := 0; i < 120 && ps.desired > 1; i++ {
				now = now.Add(c.cfg.Interval)
				d := c.Decide(Inputs{Now: now, Workers: hbs})
				if d.Replicas[0].Raw > 1 {
					t.Fatalf("setup: raw %d at +%s", d.Replicas[0].Raw, now.Sub(t0))
				}
				for _, w := range d.Warmth {
					for j := range hbs {
						if hbs[j].WorkerID == w.Worker {
							hbs[j].Models[0].State = w.State
							if w.State == schemas.WeightSleeping {
								hbs[j].Models[0].Tier = schemas.TierHost
								sleeps++
							}
						}
					}
				}
				if got := d.Desired(ps.Key()); got < lowest {
					lowest = got
					if idle := ps.idle(got+1, now); idle < tc.due {
						t.Fatalf("released to %d after %s unneeded, before the return expected by %s: %s", got, idle, tc.due, d.Replicas[0].Reason)
					}
					// The scaler drains a sleeper first.
					hbs = dropSleeper(hbs)
				}
				maxAsleep = max(maxAsleep, ps.sleepWant)
			}
			if maxAsleep != 3 || sleeps != 3 {
				t.Fatalf("at most %d kept asleep, %d put to sleep; want the climb's 3", maxAsleep, sleeps)
			}
			if ps.desired != 1 || ps.sleepWant != 0 {
				t.Fatalf("after the return was due: desired %d, sleepWant %d; want 1, 0", ps.desired, ps.sleepWant)
			}
		})
	}
}

func dropSleeper(hbs []schemas.Heartbeat) []schemas.Heartbeat {
	for i, hb := range hbs {
		if hb.Models[0].State == schemas.WeightSleeping {
			return append(hbs[:i:i], hbs[i+1:]...)
		}
	}
	return hbs[:len(hbs)-1]
}

// A replica kept asleep that the router wakes by placing work on it (no
// wake commanded) has had its level asked for: it is not put back to
// sleep while it serves, nor until it has idled SleepAfter, and no other
// replica sleeps in its place. The rule before re-slept it at the next
// decision, and the router woke it again (rise-fall-repeat with
// --sleep-on-release: one H100 slept four times in 52 s).
func TestDemandWokenReplicaStaysAwake(t *testing.T) {
	c := newCtl(t, Pool{GPU: "h100", Model: model, Min: 1, Max: 8}, func(c *Config) { c.SleepOnRelease = true })
	ps := c.pools[0]
	ps.started, ps.desired, ps.firstAt = true, 4, t0
	ps.levels = make([]level, 8)
	sudden := gap{seconds: 100, sudden: true, misses: 20}
	for k := 1; k <= 4; k++ {
		ps.levels[k-1].needed = true
		if k >= 2 {
			ps.levels[k-1].gaps = []gap{sudden, sudden}
		}
	}
	hbs := (&fleet{n: 4}).heartbeats(0, 0)
	apply := func(d Decision) (slept []string) {
		for _, w := range d.Warmth {
			for j := range hbs {
				if hbs[j].WorkerID == w.Worker {
					hbs[j].Models[0].State = w.State
					if w.State == schemas.WeightSleeping {
						slept = append(slept, w.Worker)
					}
				}
			}
		}
		return slept
	}
	now := t0
	woken := ""
	for i := 0; i < 120 && woken == ""; i++ {
		now = now.Add(c.cfg.Interval)
		if s := apply(c.Decide(Inputs{Now: now, Workers: hbs})); len(s) > 0 {
			woken = s[0]
		}
	}
	if woken == "" {
		t.Fatal("setup: no replica was put to sleep")
	}
	// Its sleep is confirmed, then the router places work on it.
	now = now.Add(c.cfg.Interval)
	apply(c.Decide(Inputs{Now: now, Workers: hbs}))
	wantBefore := ps.sleepWant
	var w *schemas.Heartbeat
	for j := range hbs {
		if hbs[j].WorkerID == woken {
			w = &hbs[j]
		}
	}
	w.Models[0].State, w.Running = schemas.WeightHot, 2
	wokeAt := now.Add(c.cfg.Interval)
	now = wokeAt
	if s := apply(c.Decide(Inputs{Now: now, Workers: hbs})); len(s) > 0 {
		t.Fatalf("the decision after the demand wake put %v to sleep (sleepWant %d, was %d)", s, ps.sleepWant, wantBefore)
	}
	if ps.sleepWant != wantBefore-1 {
		t.Fatalf("sleepWant %d after a demand wake, want the %d still asleep", ps.sleepWant, wantBefore-1)
	}
	// It serves for a while, then idles: not re-slept within SleepAfter.
	for i := 0; i < 10; i++ {
		now = now.Add(c.cfg.Interval)
		for _, s := range apply(c.Decide(Inputs{Now: now, Workers: hbs})) {
			if s == woken || now.Sub(wokeAt) < c.cfg.SleepAfter {
				t.Fatalf("%s slept %s after %s was woken by demand, while it serves", s, now.Sub(wokeAt), woken)
			}
		}
	}
	w.Running = 0
	idleFrom := now
	for now.Sub(idleFrom) < c.cfg.SleepAfter-c.cfg.Interval {
		now = now.Add(c.cfg.Interval)
		for _, s := range apply(c.Decide(Inputs{Now: now, Workers: hbs})) {
			if s == woken {
				t.Fatalf("%s re-slept %s into its idle, before SleepAfter %s", woken, now.Sub(idleFrom), c.cfg.SleepAfter)
			}
		}
	}
}
