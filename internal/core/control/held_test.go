package control

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/switchyard-ai/switchyard/schemas"
)

// TestHeldBurstOrdersOnce: a pool at zero (Min 0) with a burst held for its
// cold start orders replicas in one decision sized for the burst, within
// heldSettle intervals of its first request, and no more while they start
// and none is live — whether the burst is seen whole at once or growing
// over several decisions, and whether the caller counts the starting
// replicas (the local scaler) or not (KEDA). The held demand is the pool's
// own: a second pool of another model, also at zero, orders nothing.
func TestHeldBurstOrdersOnce(t *testing.T) {
	const small = "llama-3.2-1b"
	tests := []struct {
		name string
		// held is the burst seen at each decision.
		held          []int
		countStarting bool
		// atLeast is the replicas the one order must size for the burst.
		atLeast int
	}{
		{name: "burst seen whole", held: []int{20, 20, 20, 20, 20, 20, 20, 20}, countStarting: true, atLeast: 1},
		{name: "burst growing over decisions", held: []int{3, 8, 14, 20, 40, 40, 40, 40}, countStarting: true, atLeast: 1},
		{name: "large burst growing", held: []int{10, 100, 1000, 1000, 1000, 1000}, countStarting: true, atLeast: 3},
		{name: "starting replicas not reported (KEDA)", held: []int{5, 20, 60, 60, 60, 60}, atLeast: 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ctl, err := New(Config{Interval: time.Second, UpCooldown: time.Second, Pools: []Pool{
				{GPU: "h100", Model: small, Min: 0, Max: 8},
				{GPU: "h100", Model: model, Min: 0, Max: 8},
			}})
			if err != nil {
				t.Fatal(err)
			}
			key, other := PoolKey("h100", small), PoolKey("h100", model)
			ups, desired := 0, 0
			now := t0
			for i, n := range tc.held {
				in := Inputs{Now: now, Queued: map[string]int{}, Held: map[string]HeldDemand{key: {Requests: n, Tokens: n * 300,
					ByClass: map[string]int{schemas.PriorityInteractive: n}, Since: t0}}}
				if tc.countStarting {
					in.Starting = map[string]int{key: desired}
				}
				d := ctl.Decide(in)
				for _, ch := range d.Changes {
					if ch.Kind != KindReplicas {
						continue
					}
					if ch.Target == other {
						t.Fatalf("decision %d: the other model's pool changed %s -> %s for demand that is not its own", i, ch.From, ch.To)
					}
					from, _ := strconv.Atoi(ch.From)
					to, _ := strconv.Atoi(ch.To)
					if to > from {
						ups++
						if !strings.Contains(ch.Reason, "held for a cold start") {
							t.Errorf("scale-up reason %q does not name the held demand", ch.Reason)
						}
					}
				}
				desired = d.Desired(key)
				for _, rd := range d.Replicas {
					if rd.Pool == key && (rd.Held != n || rd.ColdStartSeconds <= 0 || rd.Max != 8) {
						t.Fatalf("decision %d: pool described as %+v", i, rd)
					}
				}
				if i == heldSettle && desired < tc.atLeast {
					t.Fatalf("decision %d: %d replicas ordered for %d held requests, want at least %d within %d intervals: %+v", i, desired, n, tc.atLeast, heldSettle, d.Replicas)
				}
				now = now.Add(time.Second)
			}
			if ups != 1 {
				t.Fatalf("%d scale-ups for one held burst, want 1", ups)
			}
		})
	}
}

// TestRefusedDemandWarmsThePool: a pool at zero that sees only requests
// refused for a deadline shorter than its cold start (none can be held)
// still orders a replica — once, however many more are refused while it
// starts — so the next tight requests find it warm.
func TestRefusedDemandWarmsThePool(t *testing.T) {
	ctl, err := New(Config{Interval: time.Second, UpCooldown: time.Second, Pools: []Pool{{GPU: "h100", Model: model, Min: 0, Max: 8}}})
	if err != nil {
		t.Fatal(err)
	}
	key := PoolKey("h100", model)
	ups, now := 0, t0
	for i, refused := range []int{0, 6, 40, 90, 200, 400} {
		d := ctl.Decide(Inputs{Now: now, Queued: map[string]int{}, Held: map[string]HeldDemand{key: {Refused: refused}}})
		for _, ch := range d.Changes {
			from, _ := strconv.Atoi(ch.From)
			to, _ := strconv.Atoi(ch.To)
			if ch.Kind == KindReplicas && to > from {
				ups++
				if !strings.Contains(ch.Reason, "refused since the last decision") {
					t.Errorf("scale-up reason %q does not name the refused requests", ch.Reason)
				}
			}
		}
		if i == 1 && d.Desired(key) < 1 {
			t.Fatalf("6 refused requests at zero ordered no replica: %+v", d.Replicas)
		}
		now = now.Add(time.Second)
	}
	if ups != 1 {
		t.Fatalf("%d scale-ups, want 1", ups)
	}
}
