package control

import (
	"fmt"
	"testing"
	"time"

	"github.com/switchyard-ai/switchyard/internal/core/catalog"
	"github.com/switchyard-ai/switchyard/schemas"
)

// scripted is a planner baseline whose size for its one pool is the next
// of sizes at each decision; seen records how many workers it was shown.
type scripted struct {
	key   string
	sizes []int
	seen  []int
}

func (s *scripted) Name() string { return "scripted" }

func (s *scripted) Decide(in Inputs) Decision {
	n := s.sizes[len(s.seen)]
	s.seen = append(s.seen, len(in.Workers))
	return Decision{At: in.Now, Replicas: []ReplicaDecision{{Pool: s.key, Desired: n, Raw: n}}}
}

// A baseline's sizes carried out through the sleeping tier: its
// scale-down sleeps, its rise wakes a sleeper before any cold start, and a
// sleeper is released once the baseline's decision has stayed below its
// level for the prior hold (32 s for llama-3.1-8b on an H100 from local
// disk at a 2 s interval). Each step gives the workers hot and asleep (as
// their heartbeats say) and the baseline's size; want is the provisioned
// size the shell is told and the warmth commands sent.
func TestSleepTier(t *testing.T) {
	type step struct {
		at           time.Duration
		hot, asleep  int // workers 0..hot-1 hot, then asleep ones
		size         int // the baseline's decision
		desired      int
		sleep, wake  int
		shownWorkers int
	}
	cases := []struct {
		name  string
		steps []step
	}{
		{"a scale-down sleeps instead of releasing", []step{
			{at: 0, hot: 3, size: 3, desired: 3, shownWorkers: 3},
			{at: 2 * time.Second, hot: 3, size: 2, desired: 3, sleep: 1, shownWorkers: 3},
		}},
		{"the next rise wakes the sleeper instead of a cold start", []step{
			{at: 0, hot: 3, size: 3, desired: 3, shownWorkers: 3},
			{at: 2 * time.Second, hot: 3, size: 2, desired: 3, sleep: 1, shownWorkers: 3},
			{at: 4 * time.Second, hot: 2, asleep: 1, size: 2, desired: 3, shownWorkers: 2},
			// desired 3 with 3 live: the shell starts none.
			{at: 20 * time.Second, hot: 2, asleep: 1, size: 3, desired: 3, wake: 1, shownWorkers: 2},
		}},
		{"a sleeper is released after the prior hold below its level", []step{
			{at: 0, hot: 3, size: 3, desired: 3, shownWorkers: 3},
			{at: 2 * time.Second, hot: 3, size: 2, desired: 3, sleep: 1, shownWorkers: 3},
			{at: 32 * time.Second, hot: 2, asleep: 1, size: 2, desired: 3, shownWorkers: 2},
			{at: 34 * time.Second, hot: 2, asleep: 1, size: 2, desired: 2, shownWorkers: 2},
		}},
		{"the level's clock restarts when the baseline reaches it again", []step{
			{at: 0, hot: 3, size: 3, desired: 3, shownWorkers: 3},
			{at: 2 * time.Second, hot: 3, size: 2, desired: 3, sleep: 1, shownWorkers: 3},
			{at: 20 * time.Second, hot: 2, asleep: 1, size: 3, desired: 3, wake: 1, shownWorkers: 2},
			{at: 22 * time.Second, hot: 3, size: 2, desired: 3, sleep: 1, shownWorkers: 3},
			{at: 34 * time.Second, hot: 2, asleep: 1, size: 2, desired: 3, shownWorkers: 2},
			{at: 54 * time.Second, hot: 2, asleep: 1, size: 2, desired: 2, shownWorkers: 2},
		}},
		{"a sleeper work woke is put back to sleep on its level's clock", []step{
			{at: 0, hot: 3, size: 3, desired: 3, shownWorkers: 3},
			{at: 2 * time.Second, hot: 3, size: 2, desired: 3, sleep: 1, shownWorkers: 3},
			{at: 20 * time.Second, hot: 3, size: 2, desired: 3, sleep: 1, shownWorkers: 3},
			{at: 34 * time.Second, hot: 2, asleep: 1, size: 2, desired: 2, shownWorkers: 2},
		}},
		{"levels fall together and are released together", []step{
			{at: 0, hot: 4, size: 4, desired: 4, shownWorkers: 4},
			{at: 2 * time.Second, hot: 4, size: 1, desired: 4, sleep: 3, shownWorkers: 4},
			{at: 10 * time.Second, hot: 1, asleep: 3, size: 2, desired: 4, wake: 1, shownWorkers: 1},
			{at: 34 * time.Second, hot: 2, asleep: 2, size: 2, desired: 2, shownWorkers: 2},
		}},
	}
	gpu, model := "h100", "llama-3.1-8b"
	key := PoolKey(gpu, model)
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c, err := New(Config{Pools: []Pool{{GPU: gpu, Model: model, Dtype: catalog.DtypeBF16, TP: 1, Min: 1, Max: 8}}, SleepOnRelease: true})
			if err != nil {
				t.Fatal(err)
			}
			inner := &scripted{key: key}
			for _, st := range tc.steps {
				inner.sizes = append(inner.sizes, st.size)
			}
			p, err := WithSleepTier(inner, c.Config())
			if err != nil {
				t.Fatal(err)
			}
			t0 := time.Unix(1000, 0)
			for i, st := range tc.steps {
				var ws []schemas.Heartbeat
				for w := 0; w < st.hot+st.asleep; w++ {
					state := schemas.WeightHot
					if w >= st.hot {
						state = schemas.WeightSleeping
					}
					ws = append(ws, schemas.Heartbeat{WorkerID: fmt.Sprintf("h100-%02d", w), GPU: gpu,
						Models: []schemas.ModelState{{Name: model, State: state}}})
				}
				// Heartbeats confirm the state at once here: no intent stands.
				p.(*sleepTier).intents = map[string]tierIntent{}
				d := p.Decide(Inputs{Now: t0.Add(st.at), Workers: ws})
				sleep, wake := 0, 0
				for _, w := range d.Warmth {
					switch w.State {
					case schemas.WeightSleeping:
						sleep++
					case schemas.WeightHot:
						wake++
					}
				}
				if got := d.Desired(key); got != st.desired || sleep != st.sleep || wake != st.wake || inner.seen[i] != st.shownWorkers {
					t.Fatalf("step %d at %v (%d hot, %d asleep, baseline %d): desired %d, %d sleeps, %d wakes, baseline shown %d workers; want %d, %d, %d, %d (%s)",
						i, st.at, st.hot, st.asleep, st.size, got, sleep, wake, inner.seen[i], st.desired, st.sleep, st.wake, st.shownWorkers, d.Replicas[0].Reason)
				}
			}
		})
	}
}

// Without SleepOnRelease a baseline is returned as it is: its figures are
// untouched to the last digit.
func TestSleepTierOffIsTheBaseline(t *testing.T) {
	inner := &scripted{key: "k", sizes: []int{1}}
	p, err := WithSleepTier(inner, Config{})
	if err != nil || p != Planner(inner) {
		t.Fatalf("WithSleepTier without SleepOnRelease: %v, %v; want the planner itself", p, err)
	}
}
