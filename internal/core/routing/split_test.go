package routing

import (
	"testing"
	"time"

	"github.com/switchyard-ai/switchyard/internal/core/fleet"
	"github.com/switchyard-ai/switchyard/internal/core/placement"
	"github.com/switchyard-ai/switchyard/internal/core/retry"
	"github.com/switchyard-ai/switchyard/schemas"
)

// splitPolicy splits every whole request onto the first fresh prefill-role
// and decode-role workers (by id), and places a lone decode leg on the
// first fresh decode-role worker not excluded: the core's two-leg handling
// is under test here, not the placer's choice (internal/core/placement).
type splitPolicy struct{ dec placement.Decision }

func (p *splitPolicy) Name() string { return "split-test" }

func (p *splitPolicy) Place(f *fleet.Fleet, req *placement.Request, now time.Time) *placement.Decision {
	p.dec = placement.Decision{Policy: p.Name(), RequestID: req.ID}
	first := func(role string) *fleet.Worker {
		for _, w := range f.Workers() {
			if w == nil || w.Role != role || !w.Fresh(now, f.Staleness()) || contains(req.Exclude, w.ID) {
				continue
			}
			if p.dec.Worker == nil || w.ID < p.dec.Worker.ID {
				return w
			}
		}
		return nil
	}
	switch req.Phase {
	case schemas.PhaseDecode:
		p.dec.Worker = first(schemas.RoleDecode)
		p.dec.TransferSeconds = 0.02
	default:
		p.dec.Prefill, p.dec.Worker = first(schemas.RolePrefill), first(schemas.RoleDecode)
		if p.dec.Prefill == nil {
			p.dec.Worker = nil
		}
		p.dec.TransferSeconds = 0.01
		p.dec.PrefillTerms = placement.Terms{CompletionSeconds: 0.3, Blocks: 63}
	}
	p.dec.Terms = placement.Terms{CompletionSeconds: 2, Blocks: 70}
	return &p.dec
}

func roleBeat(worker, role string, seq uint64) *schemas.Heartbeat {
	hb := heartbeat(worker, seq)
	hb.Role, hb.Link = role, "ib-ndr"
	return hb
}

// splitSim is a sim whose workers p1, p2 prefill and d1, d2 decode.
func splitSim(t *testing.T) *sim {
	s := newSim(t, Config{Policy: &splitPolicy{}, Retry: retry.Defaults()})
	for i, w := range []struct{ id, role string }{{"p1", schemas.RolePrefill}, {"p2", schemas.RolePrefill}, {"d1", schemas.RoleDecode}, {"d2", schemas.RoleDecode}} {
		s.apply(Input{Kind: InHeartbeat, Heartbeat: roleBeat(w.id, w.role, uint64(i+1))})
	}
	return s
}

func (s *sim) beat(seq uint64, live ...string) {
	for _, w := range live {
		role := schemas.RoleDecode
		if w[0] == 'p' {
			role = schemas.RolePrefill
		}
		s.apply(Input{Kind: InHeartbeat, Heartbeat: roleBeat(w, role, seq)})
	}
}

func TestSplitTwoLegsOneRequest(t *testing.T) {
	s := splitSim(t)
	pre := dispatchOf(t, s.admit(admitted("r1", "acme", time.Minute, 8000, 200, s.now)), "r1")
	if pre.Phase != schemas.PhasePrefill || pre.Worker != "p1" || pre.DecodeWorker != "d1" || pre.Held == nil {
		t.Fatalf("first leg %q on %s decoding on %s; want the prefill leg on p1, planned for d1", pre.Phase, pre.Worker, pre.DecodeWorker)
	}
	if w := s.core.Fleet().Get("d1"); w.BookedRequests != 1 || w.BookedPromptTokens != 0 {
		t.Fatalf("d1 booked %d requests, %d prompt tokens; want the decode leg booked with no prefill", w.BookedRequests, w.BookedPromptTokens)
	}
	s.now = s.now.Add(300 * time.Millisecond)
	kv := &schemas.KVHandle{RequestID: "r1", Tenant: "acme", Worker: "p1", PromptTokens: 8000, Blocks: 500, FirstTokenAt: s.now, ExpiresAt: s.now.Add(30 * time.Second)}
	acts := s.apply(Input{Kind: InHandoff, Handoff: kv})
	dec := dispatchOf(t, acts, "r1")
	if dec.Phase != schemas.PhaseDecode || dec.Worker != "d1" || dec.Handoff != kv || dec.TransferSeconds != 0.01 {
		t.Fatalf("second leg %q on %s handoff %v transfer %v; want the decode leg on d1 with the handle and the planned transfer", dec.Phase, dec.Worker, dec.Handoff, dec.TransferSeconds)
	}
	if w := s.core.Fleet().Get("p1"); w.BookedRequests != 0 {
		t.Fatal("the prefill leg's booking outlived its handoff")
	}
	// A second copy of the handle (a redelivery) dispatches nothing.
	if n := len(only(s.apply(Input{Kind: InHandoff, Handoff: kv}), ActDispatch)); n != 0 {
		t.Fatalf("a repeated handle dispatched %d more legs", n)
	}
	s.result("r1", "d1", schemas.StatusOK, "", 2000)
	if s.core.InFlight() != 0 || s.core.Fleet().Bookings() != 0 {
		t.Fatalf("after the result: %d in flight, %d bookings; want none", s.core.InFlight(), s.core.Fleet().Bookings())
	}
}

func TestSplitStaleHandleIgnored(t *testing.T) {
	s := splitSim(t)
	dispatchOf(t, s.admit(admitted("r1", "acme", time.Minute, 8000, 200, s.now)), "r1")
	for _, kv := range []*schemas.KVHandle{
		{RequestID: "r1", Tenant: "acme", Worker: "p1", Attempt: 3},                                              // another attempt
		{RequestID: "r1", Tenant: "other", Worker: "p1"},                                                         // another tenant's id
		{RequestID: "r1", Tenant: "acme", Worker: "p2"},                                                          // not the leg's worker
		{RequestID: "nope", Tenant: "acme", Worker: "p1"},                                                        // nothing in flight
		{RequestID: "r1", Tenant: "acme", Worker: "p1", Failed: schemas.Errf(schemas.CodeWorkerFailed, "", "x")}, // a failure for a leg not yet decoding
	} {
		if acts := s.apply(Input{Kind: InHandoff, Handoff: kv}); len(acts) != 0 {
			t.Fatalf("stale handle %+v answered with %s", kv, kinds(acts))
		}
	}
}

func TestSplitPlannedDecoderGoneDecodesElsewhere(t *testing.T) {
	s := splitSim(t)
	dispatchOf(t, s.admit(admitted("r1", "acme", time.Minute, 8000, 200, s.now)), "r1")
	// d1 falls silent past the staleness bound while p1 prefills.
	for i := uint64(10); i < 20; i++ {
		s.now = s.now.Add(500 * time.Millisecond)
		s.beat(i, "p1", "p2", "d2")
		s.apply(Input{Kind: InTick})
	}
	kv := &schemas.KVHandle{RequestID: "r1", Tenant: "acme", Worker: "p1", PromptTokens: 8000, FirstTokenAt: s.now}
	dec := dispatchOf(t, s.apply(Input{Kind: InHandoff, Handoff: kv}), "r1")
	if dec.Phase != schemas.PhaseDecode || dec.Worker != "d2" || dec.TransferSeconds != 0.02 {
		t.Fatalf("decode leg on %s (%q, transfer %v); want d2, placed alone with its own transfer", dec.Worker, dec.Phase, dec.TransferSeconds)
	}
}

func TestSplitFailedPullReplacesUnderTheBudget(t *testing.T) {
	s := splitSim(t)
	dispatchOf(t, s.admit(admitted("r1", "acme", time.Minute, 8000, 200, s.now)), "r1")
	kv := &schemas.KVHandle{RequestID: "r1", Tenant: "acme", Worker: "p1", PromptTokens: 8000, FirstTokenAt: s.now}
	dispatchOf(t, s.apply(Input{Kind: InHandoff, Handoff: kv}), "r1")
	failed := &schemas.KVHandle{RequestID: "r1", Tenant: "acme", Worker: "p1", Failed: schemas.Errf(schemas.CodeWorkerFailed, "", "no responder at p1")}
	acts := s.apply(Input{Kind: InHandoff, Handoff: failed})
	rs := events(acts, "retry")
	if len(rs) != 1 || rs[0].Fields["retry"] != true {
		t.Fatalf("retry events %+v; want one granted retry", rs)
	}
	again := dispatchOf(t, acts, "r1")
	if again.Attempt != 1 || again.Phase != schemas.PhasePrefill || again.Worker != "p2" || !contains(again.Held.Adm.ExcludeWorkers, "p1") {
		t.Fatalf("re-placement attempt %d %q on %s excluding %v; want attempt 1's prefill on p2, p1 excluded", again.Attempt, again.Phase, again.Worker, again.Held.Adm.ExcludeWorkers)
	}
}

func TestSplitLostPrefillWorkerReplaces(t *testing.T) {
	s := splitSim(t)
	dispatchOf(t, s.admit(admitted("r1", "acme", time.Minute, 8000, 200, s.now)), "r1")
	var acts []Action
	for i := uint64(10); i < 30; i++ {
		s.now = s.now.Add(500 * time.Millisecond)
		s.beat(i, "p2", "d1", "d2")
		acts = append(acts, s.apply(Input{Kind: InTick})...)
	}
	again := dispatchOf(t, acts, "r1")
	if again.Attempt != 1 || again.Worker != "p2" || again.Phase != schemas.PhasePrefill {
		t.Fatalf("after p1 died: attempt %d %q on %s; want attempt 1's prefill on p2", again.Attempt, again.Phase, again.Worker)
	}
}

// TestSplitDecodeDispatchNotStoredIsNextAttempt: a decode leg whose
// dispatch never reached the stream is re-placed as the next attempt (the
// prefill dispatch of this attempt is stored and would dedupe a second
// split of it), carried by the handle's message.
func TestSplitDecodeDispatchNotStoredIsNextAttempt(t *testing.T) {
	s := splitSim(t)
	dispatchOf(t, s.admit(admitted("r1", "acme", time.Minute, 8000, 200, s.now)), "r1")
	kv := &schemas.KVHandle{RequestID: "r1", Tenant: "acme", Worker: "p1", PromptTokens: 8000, FirstTokenAt: s.now}
	dec := dispatchOf(t, s.apply(Input{Kind: InHandoff, Handoff: kv}), "r1")
	in := Input{Kind: InDispatchFailed, ID: "r1", Admitted: &dec.Held.Adm, At: s.now}
	acts := s.core.Apply(in, "handoff-msg")
	again := dispatchOf(t, acts, "r1")
	if again.Attempt != 1 || again.Phase != schemas.PhasePrefill || again.Held.Handle != "handoff-msg" {
		t.Fatalf("after the decode dispatch failed: attempt %d %q carried by %v; want attempt 1's prefill leg carried by the handle's message", again.Attempt, again.Phase, again.Held.Handle)
	}
}
