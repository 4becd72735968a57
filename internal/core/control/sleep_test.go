package control

import (
	"math"
	"testing"
	"time"

	"github.com/switchyard-ai/switchyard/internal/core/catalog"
	"github.com/switchyard-ai/switchyard/schemas"
)

// A sleeping replica is woken before a cold one is started: sleepers count
// as provisioned, so the scaler orders cold replicas only for the need
// beyond them, and every sleeper the need covers is woken in the same
// decision.
func TestWakesSleepersBeforeColdStarts(t *testing.T) {
	for _, tc := range []struct {
		name              string
		hot, asleep, raw  int
		wakes, coldStarts int
	}{
		{"no need: sleepers stay asleep", 1, 2, 1, 0, 0},
		{"one more needed: one sleeper woken, nothing cold", 1, 2, 2, 1, 0},
		{"the sleepers cover the need: all woken, nothing cold", 1, 2, 3, 2, 0},
		{"more than the sleepers: all woken, the rest cold", 1, 2, 5, 2, 2},
		{"no sleepers: cold starts", 1, 0, 3, 0, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newCtl(t, Pool{GPU: "h100", Model: model, Min: 1, Max: 16}, nil)
			n := tc.hot + tc.asleep
			hbs := (&fleet{n: n}).heartbeats(0, 0)
			for i := tc.hot; i < n; i++ {
				hbs[i].Models[0].State = schemas.WeightSleeping
				hbs[i].Models[0].Tier = schemas.TierHost
			}
			// The first decision has no arrivals yet: the queue alone sets
			// the need, backlog / DrainTarget over the capacity per replica.
			capU := Capacity(c.pools[0].rep, Mix{PromptTokens: 1024, OutputTokens: 256}, c.cfg.ITLTarget)
			queued := int(math.Floor((float64(tc.raw) - 0.5) * capU * c.cfg.DrainTarget.Seconds()))
			d := c.Decide(Inputs{Now: t0, Workers: hbs, Queued: map[string]int{schemas.PriorityInteractive: queued}})
			rd := d.Replicas[0]
			if rd.Raw != tc.raw {
				t.Fatalf("setup: raw %d, want %d (queue %d, capacity %.2f/s)", rd.Raw, tc.raw, queued, capU)
			}
			wakes := 0
			for _, w := range d.Warmth {
				if w.State != schemas.WeightHot {
					t.Fatalf("unexpected warmth %+v", w)
				}
				wakes++
			}
			if wakes != tc.wakes {
				t.Errorf("woke %d sleepers, want %d: %+v", wakes, tc.wakes, d.Warmth)
			}
			if got := rd.Desired - n; got != tc.coldStarts {
				t.Errorf("ordered %d cold replicas (desired %d over %d provisioned), want %d: %s", got, rd.Desired, n, tc.coldStarts, rd.Reason)
			}
		})
	}
}

// A replica past its release hold goes to sleep instead of being released
// when its evidence — its level's recent gaps, or before its first return
// the quiet before its first demand — says the returns still to come
// are worth more than the sleep until them costs, and an asleep one is
// kept until no return still to come is; with no evidence, or returns
// worth less than the sleep, it is released as before.
func TestSleepInsteadOfRelease(t *testing.T) {
	const hold = 40 * time.Second
	sudden := func(s, misses float64) gap { return gap{seconds: s, sudden: true, misses: misses} }
	for _, tc := range []struct {
		name      string
		gaps      []gap
		arrival   gap
		price     float64
		idle      time.Duration
		sleepWant int
		sleep     bool
		wantAfter int // sleepWant after the decision
	}{
		{"no returns seen: release", nil, gap{}, 1, hold, 0, false, 0},
		{"sudden returns soon after the hold: sleep", []gap{sudden(60, 20), sudden(70, 30), {seconds: 600}}, gap{}, 1, hold, 0, true, 1},
		{"gradual returns long after another hold: release", []gap{{seconds: 300}, {seconds: 400}}, gap{}, 1, hold, 0, false, 0},
		{"gradual returns just after the hold, GPU held: a wake saves a cold start, sleep", []gap{{seconds: 45}, {seconds: 46}}, gap{}, 1, hold, 0, true, 1},
		{"gradual returns half a hold later, GPU held: the sleep costs what it saves, release", []gap{{seconds: 60}, {seconds: 65}}, gap{}, 1, hold, 0, false, 0},
		{"the same, the freed HBM lent out (price 0.1): sleep", []gap{{seconds: 60}, {seconds: 65}}, gap{}, 0.1, hold, 0, true, 1},
		{"gradual returns near the end of another hold, GPU held: release", []gap{{seconds: 78}, {seconds: 79}, {seconds: 900}}, gap{}, 1, hold, 0, false, 0},
		{"returns seen just before the hold ended may come later: sleep", []gap{sudden(38, 0.5), sudden(39, 0.5)}, gap{}, 1, hold, 0, true, 1},
		// The sleep lasts as long as the returns it is bought for: a
		// sudden return three holds away is slept through to, not left one
		// hold short of it (the rule before slept one further hold only).
		{"sudden returns three holds later: sleep through to them", []gap{sudden(120, 5), sudden(130, 5)}, gap{}, 1, hold, 0, true, 1},
		// Before the level's first return, the quiet before its first
		// demand is the evidence: a sudden first demand with misses is
		// what its return would cost (the rule before released: no gaps).
		{"no return yet, its first demand sudden after a quiet: sleep", nil, sudden(110, 20), 1, hold, 0, true, 1},
		{"no return yet, its first demand gradual after a long quiet: release", nil, gap{seconds: 600}, 1, hold, 0, false, 0},
		{"a return seen: the quiet before the first demand no longer counts", []gap{{seconds: 600}}, sudden(110, 20), 1, hold, 0, false, 0},
		{"already asleep, its return still to come: held", []gap{sudden(120, 5)}, gap{}, 1, 3 * hold, 1, true, 1},
		{"already asleep past the latest return expected: release", []gap{sudden(120, 5)}, gap{}, 1, 4 * hold, 1, false, 0},
		{"already asleep, no evidence: release", nil, gap{}, 1, hold + hold/2, 1, false, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newCtl(t, Pool{GPU: "h100", Model: model, Min: 1, Max: 8}, func(c *Config) { c.SleepOnRelease, c.SleepPrice = true, tc.price })
			ps := c.pools[0]
			ps.levels = make([]level, 3)
			ps.levels[2].gaps, ps.levels[2].arrival = tc.gaps, tc.arrival
			ps.desired, ps.sleepWant = 3, tc.sleepWant
			why, sleep := c.sleepInstead(ps, 3, tc.idle, hold)
			if sleep != tc.sleep || ps.sleepWant != tc.wantAfter {
				t.Fatalf("sleep %v (%q), sleepWant %d; want %v, %d", sleep, why, ps.sleepWant, tc.sleep, tc.wantAfter)
			}
		})
	}
}

// End to end through Decide: a pool whose top replica's level returned
// suddenly twice about a minute after dropping (and twice a quarter of an
// hour later) holds it for the minute the ski rental fits, and past that
// — a return may come later than those seen — puts the replica to sleep
// instead of releasing it (desired unchanged, one idle worker asleep — a
// busy one is not), and wakes it when the level is needed again.
func TestDecideSleepsInsteadOfReleasing(t *testing.T) {
	c := newCtl(t, Pool{GPU: "h100", Model: model, Min: 1, Max: 8}, func(c *Config) { c.SleepOnRelease = true })
	ps := c.pools[0]
	ps.started, ps.desired, ps.firstAt = true, 3, t0
	ps.levels = make([]level, 8)
	for k := 1; k <= 3; k++ {
		ps.levels[k-1].needed = true
	}
	ps.levels[2].gaps = []gap{{seconds: 60, sudden: true, misses: 0.2}, {seconds: 62, sudden: true, misses: 0.2}}
	ps.levels[2].gaps = append(ps.levels[2].gaps, gap{seconds: 900}, gap{seconds: 900})
	if hold, _ := c.holdFor(ps, 3); hold < 60*time.Second || hold > 70*time.Second {
		t.Fatalf("setup: level 3's fitted hold %s, want the minute its returns took", hold)
	}
	hbs := (&fleet{n: 3}).heartbeats(0, 0)
	hbs[2].Running = 4 // w02 is busy: the idle w01 is the one put to sleep
	now := t0
	var slept []string
	for i := 0; i < 40 && len(slept) == 0; i++ {
		now = now.Add(c.cfg.Interval)
		d := c.Decide(Inputs{Now: now, Workers: hbs})
		if got := d.Desired(ps.Key()); got < 2 {
			t.Fatalf("released to %d at +%s: %s", got, now.Sub(t0), d.Replicas[0].Reason)
		}
		for _, w := range d.Warmth {
			if w.State == schemas.WeightSleeping {
				slept = append(slept, w.Worker)
			}
		}
	}
	if len(slept) != 1 || slept[0] != "w01" {
		t.Fatalf("put %v to sleep, want the idle w01 (desired %d, sleepWant %d)", slept, ps.desired, ps.sleepWant)
	}
	if ps.desired != 3 {
		t.Fatalf("desired %d after the sleep, want 3 kept (the sleeper is provisioned)", ps.desired)
	}
	hbs[1].Models[0].State, hbs[1].Models[0].Tier = schemas.WeightSleeping, schemas.TierHost
	// Demand for three replicas returns: the sleeper is woken, nothing cold.
	capU := Capacity(ps.rep, Mix{PromptTokens: 1024, OutputTokens: 256}, c.cfg.ITLTarget)
	now = now.Add(c.cfg.Interval)
	d := c.Decide(Inputs{Now: now, Workers: hbs, Queued: map[string]int{schemas.PriorityInteractive: int(40 * capU * c.cfg.DrainTarget.Seconds())}})
	woke := 0
	for _, w := range d.Warmth {
		if w.State == schemas.WeightHot && w.Worker == "w01" {
			woke++
		}
	}
	if woke != 1 || ps.sleepWant != 0 {
		t.Fatalf("woke %d (sleepWant %d) under a queue for 3+: %+v", woke, ps.sleepWant, d.Warmth)
	}
}

// The controller's lead time comes from the catalog's weight tiers: the
// cold start it tells routers and plans over is the load from StartTier,
// so a catalog override of a tier (a faster loader) or another start tier
// moves it, and an unknown start tier is refused.
func TestStartTierFromTheCatalog(t *testing.T) {
	fast, err := catalog.Merge([]byte(`{"weight_tiers":{"disk":{"gbps":16.06,"fixed_s":10}}}`))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		cat  *catalog.Catalog
		tier string
		want float64
	}{
		{"default: local disk", nil, "", 29.35},
		{"a faster loader on disk", fast, "", 10 + 1.0},
		{"from the page cache", nil, schemas.TierPageCache, 28.01},
		{"from host memory", nil, schemas.TierHost, 1.10},
		{"from remote", nil, schemas.TierRemote, 40.06},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newCtl(t, Pool{GPU: "h100", Model: model, Min: 1, Max: 4}, func(c *Config) { c.Catalog, c.StartTier = tc.cat, tc.tier })
			d := c.Decide(Inputs{Now: t0, Workers: (&fleet{n: 1}).heartbeats(0, 0)})
			if got := d.Replicas[0].ColdStartSeconds; math.Abs(got-tc.want) > 0.02 {
				t.Fatalf("cold start %.2f s, want %.2f", got, tc.want)
			}
			if got, want := c.downWindow(c.pools[0]), time.Duration((tc.want+c.cfg.Interval.Seconds())*float64(time.Second)).Round(c.cfg.Interval); got != want {
				t.Fatalf("lead-time window %s, want %s", got, want)
			}
		})
	}
	if _, err := New(Config{Pools: []Pool{{GPU: "h100", Model: model, Min: 1, Max: 2}}, StartTier: "tape"}); err == nil {
		t.Fatal("start tier tape accepted")
	}
}
