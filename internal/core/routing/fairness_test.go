package routing

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/switchyard-ai/switchyard/internal/core/queue"
	"github.com/switchyard-ai/switchyard/schemas"
)

// premiumReport is a peer's report: it placed placed premium requests and
// holds 50 more queued.
func premiumReport(placed int64) *queue.Report {
	return &queue.Report{Classes: []queue.ClassShare{{Class: schemas.PriorityInteractive, Placed: placed, Queued: 50,
		Tenants: []queue.TenantShare{{Tenant: "prem", Tokens: placed * 300, Queued: 50}}}}}
}

// TestFairShareHoldsBackAndReplays: a router holding only regular work
// (weights 4:1) places a slack's worth and then leaves the fleet's
// capacity to a peer that reports premium work queued and behind; each
// report of premium placed lets one regular request go per four. The
// inputs, journaled and decoded, replay to the same dispatches.
func TestFairShareHoldsBackAndReplays(t *testing.T) {
	cfg := Config{QueueWeights: map[string]int{schemas.PriorityInteractive: 4, schemas.PriorityStandard: 1}}
	s := newSim(t, cfg)
	var inputs []Input
	apply := func(in Input) []Action {
		in.At = s.now
		inputs = append(inputs, in)
		return s.apply(in)
	}
	apply(Input{Kind: InHeartbeat, Heartbeat: heartbeat("w1", 1)})
	apply(Input{Kind: InFairShare, ID: "r0", Fair: premiumReport(0)})
	var placed []string
	for i := range 20 {
		acts := apply(Input{Kind: InAdmitted, Admitted: admitted(fmt.Sprint("reg-", i), "reg", time.Hour, 200, 50, s.now)})
		for _, a := range only(acts, ActDispatch) {
			placed = append(placed, a.ID)
		}
	}
	if len(placed) == 0 || len(placed) > 3 {
		t.Fatalf("placed %d regular with premium queued and unserved at a peer; want the class slack's 1-2", len(placed))
	}
	if s.core.HeldBack() == 0 {
		t.Fatal("no pass counted as held back")
	}
	before := len(placed)
	for i := 1; i <= 5; i++ {
		s.now = s.now.Add(200 * time.Millisecond)
		for _, a := range only(apply(Input{Kind: InFairShare, ID: "r0", Fair: premiumReport(int64(8 * i))}), ActDispatch) {
			placed = append(placed, a.ID)
		}
	}
	// 10 is 4:1; the bar allows for one report's worth of lag (8 premium,
	// 2 regular) on top: an offset that does not grow.
	if got := len(placed) - before; got < 9 || got > 13 {
		t.Fatalf("the peer placed 40 premium; %d regular went, want 10 to 12 (4:1, plus a report's lag)", got)
	}
	// The shell's report says what this router placed: regular requests and tokens.
	rep := s.core.FairReport()
	if len(rep.Classes) != 1 || rep.Classes[0].Class != schemas.PriorityStandard || rep.Classes[0].Placed != int64(len(placed)) ||
		rep.Classes[0].Tenants[0].Tokens != int64(len(placed))*(200+OutputTokenWeight*50) {
		t.Fatalf("report %+v, want %d standard placed at %d tokens each", rep, len(placed), 200+OutputTokenWeight*50)
	}

	j := NewJournal()
	for _, in := range inputs {
		if err := j.Add(in, 0); err != nil {
			t.Fatal(err)
		}
	}
	entries, err := DecodeJournal(j.Take())
	if err != nil {
		t.Fatal(err)
	}
	replay := newSim(t, cfg)
	var again []string
	for _, e := range entries {
		replay.now = e.At
		for _, a := range only(replay.apply(e.Input), ActDispatch) {
			again = append(again, a.ID)
		}
	}
	if !slices.Equal(placed, again) {
		t.Fatalf("replay dispatched %v, recorded %v", again, placed)
	}
}

// TestFairCost: prompt tokens plus weighted output tokens.
func TestFairCost(t *testing.T) {
	for _, tc := range []struct {
		prompt, out int
		want        int64
	}{{1000, 64, 1128}, {0, 0, 0}, {-5, 10, 20}} {
		a := admitted("x", "t", time.Second, tc.prompt, tc.out, t0)
		if got := FairCost(a); got != tc.want {
			t.Errorf("FairCost(prompt %d, output %d) = %d, want %d", tc.prompt, tc.out, got, tc.want)
		}
	}
}
