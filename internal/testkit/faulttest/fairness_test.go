package faulttest

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/switchyard-ai/switchyard/internal/core/routing"
	"github.com/switchyard-ai/switchyard/schemas"
	"github.com/switchyard-ai/switchyard/subjects"
)

// fairFlow is one tenant's part of the fairness workload.
type fairFlow struct {
	tenant, class string
	prompt, out   int // prompt words (about one token each) and max_tokens
	n             int
}

// TestFleetWideFairness is issue 16's done-when test for fairness: three
// active-active router processes, class weights 4:1 (premium in the
// interactive class, regular in the standard class), two regular tenants
// of equal weight whose prompts differ two-fold in size, and ingress
// skewed in the Dynamo #15187 shape. Switchyard's routers have no ingress
// of their own (every router pulls from the same per-class consumers), so
// "ingress through a router" is what it pulls: r1 pulls both classes 64
// messages at a time, r2 only the regular class four at a time, and r3
// both under --pull-rate 2, so r1 pulls at least 90 % of the admitted work
// and the routers hold different class mixes — which is what breaks a
// per-router scheduler: r2 serves regular work as fast as the fleet frees
// capacity, whatever premium's weight at r1. Everything is submitted at
// once, so every class and tenant is backlogged; r2 is killed with SIGKILL
// once 60 % of the work is placed (r1 and r3 take over what it held).
// Checked: every request has exactly one final result and each request
// attempt exactly one stored dispatch, none lost or failed; r1 pulled at
// least 90 % of what was pulled before the kill, and every router placed
// some of the work; over the dispatches while every tenant was backlogged
// and r2 alive, premium's share of requests is 0.800 ± 0.040 (4:1 within
// 5 %) and the large tenant's share of the regular class's tokens (VTC's
// weighted tokens: prompt + 2 × output) 0.500 ± 0.025 (5 %). The tenant
// bar holds because the routers' tenant counters keep VTC's own bound —
// backlogged tenants within one request of each other — however their
// reports lag (internal/core/queue, keepWithinBound): before that the
// tenants entered their backlog up to ~6,700 tokens apart, VTC repaid it
// inside the window, and the large tenant's share ran 0.460–0.509, so the
// test asserted only ± 0.050. SY_FAIRNESS_TRACE=1 logs the counters each
// router reported beside the tokens dispatched (fairtrace_test.go).
//
// SY_FAIRNESS=per-router runs the same with --fair-share=false and checks
// the opposite — that without the shared counters premium's share drifts
// toward ingress, below 0.8 by at least 0.4 × r2's share of the
// placements (a per-router scheduler gives about 0.8 × (1 - that share):
// routers place only what they pull, so at 90 % through r1 the drift is a
// few points, not Dynamo's collapse to 1:1) — so the shape is shown to
// exercise what it tests.
func TestFleetWideFairness(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the system as separate processes")
	}
	perRouter := envOr("SY_FAIRNESS", "fleet") == "per-router"
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	scale := envInt("SY_FAIRNESS_SCALE", 20)
	flows := []fairFlow{
		{"prem", schemas.PriorityInteractive, 400, 32, 64 * scale},
		{"big", schemas.PriorityStandard, 800, 32, 6 * scale},
		{"small", schemas.PriorityStandard, 400, 32, 10 * scale},
	}
	// r1 pulls both classes as fast as it can; r2 only the regular class,
	// four at a time, and r3 both at two a second: r1 takes nine tenths of
	// the admitted work, r2 most of the rest, all of it regular.
	routers := []peerRouter{
		{"r1", []string{"--classes", "interactive,standard", "--pull-batch", "64"}},
		{"r2", []string{"--classes", "standard", "--pull-batch", envOr("SY_FAIRNESS_R2_BATCH", "4")}},
		{"r3", []string{"--classes", "interactive,standard", "--pull-rate", envOr("SY_FAIRNESS_R3_RATE", "2")}},
	}
	for i := range routers {
		routers[i].flags = append(routers[i].flags, "--queue-weights", "interactive=4,standard=1", fmt.Sprintf("--fair-share=%t", !perRouter))
	}
	s := startPeers(ctx, t, routers, 2, "--gpu", envOr("SY_FAIRNESS_GPU", "h100"), "--speedup", envOr("SY_FAIRNESS_SPEEDUP", "1"))

	// Submit every flow interleaved, at once: a backlog of each. A prompt
	// starts with its id, so no two share a cached prefix and each costs
	// its full prefill.
	nc, js := s.observer()
	var trace *fairTrace
	if envOr("SY_FAIRNESS_TRACE", "") != "" {
		trace = traceFairness(t, nc)
	}
	tenantOf := map[string]string{}
	total := 0
	for _, f := range flows {
		total += f.n
	}
	start := time.Now()
	for i := 0; len(tenantOf) < total; i++ {
		for _, f := range flows {
			if i >= f.n {
				continue
			}
			id := fmt.Sprintf("%s-%05d", f.tenant, i)
			body, _ := json.Marshal(map[string]any{"id": id, "model": "llama-3.1-8b", "max_tokens": f.out, "priority": f.class,
				"prompt": id + " " + strings.Repeat("tok ", f.prompt)})
			m := nats.NewMsg(subjects.Submit(f.tenant))
			m.Data = body
			m.Header.Set(schemas.HeaderMsgID, id)
			if _, err := js.PublishMsgAsync(m); err != nil {
				t.Fatal(err)
			}
			tenantOf[id] = f.tenant
		}
	}
	select {
	case <-js.PublishAsyncComplete():
	case <-ctx.Done():
		t.Fatal("submissions not acked")
	}
	for streamMsgs(ctx, js, subjects.StreamDispatch) < total*6/10 && ctx.Err() == nil {
		time.Sleep(20 * time.Millisecond)
	}
	// r2, the regular-only router, dies: r1 and r3 must take over what it
	// held (r1 is the one that can: the others pull at a capped rate).
	s.routers[1].Kill()
	killed := time.Now()
	t.Logf("SIGKILL r2 at +%s, %d of %d dispatched", killed.Sub(start).Round(time.Millisecond), streamMsgs(ctx, js, subjects.StreamDispatch), total)
	for streamMsgs(ctx, js, subjects.StreamResults) < total && time.Since(killed) < 60*time.Second {
		time.Sleep(100 * time.Millisecond)
	}
	t.Logf("%d results after +%s", streamMsgs(ctx, js, subjects.StreamResults), time.Since(start).Round(time.Millisecond))

	// Nothing lost, nothing twice.
	rec := s.recorded(ctx, js)
	results := map[string]int{}
	codes := map[string]int{}
	for _, r := range rec.results {
		results[r.V.ID]++
		if r.V.Status != schemas.StatusOK && r.V.Error != nil {
			codes[r.V.Error.Code]++
		}
	}
	var lost, dup []string
	for id := range tenantOf {
		switch n := results[id]; {
		case n == 0:
			lost = append(lost, id)
		case n > 1:
			dup = append(dup, id)
		}
	}
	if len(lost) > 0 || len(dup) > 0 {
		t.Fatalf("%d lost (e.g. %v), %d with more than one result (e.g. %v)", len(lost), first(lost), len(dup), first(dup))
	}
	if len(codes) > 0 {
		t.Errorf("failed results %v; every request should be served", codes)
	}
	perAttempt := map[string]int{}
	for _, d := range rec.dispatches {
		perAttempt[fmt.Sprintf("%s#%d", d.V.Admitted.Request.ID, d.V.Admitted.Attempt)]++
	}
	for k, n := range perAttempt {
		if n != 1 {
			t.Errorf("request attempt %s dispatched %d times", k, n)
		}
	}

	// Shares over the dispatches, in stream order, while every class and
	// tenant was backlogged at the routers: from a second after the first
	// request had to wait for capacity (the fleet saturated, and every
	// router has heard its peers five times) until r1's death or until any
	// tenant had 90 % of its requests dispatched. Before the fleet is
	// saturated every request is placed on arrival and there is nothing to
	// share; a tenant arriving then is lifted to the others' counter, so
	// fairness (VTC's and WFQ's) is over backlogged intervals.
	var saturated time.Time
	for _, e := range rec.eventsOf("delayed") {
		if saturated.IsZero() || e.At.Before(saturated) {
			saturated = e.At
		}
	}
	if saturated.IsZero() {
		t.Fatal("no request ever waited for capacity: the fleet was never saturated, so there was nothing to share")
	}
	from := saturated.Add(time.Second)
	need := map[string]int{}
	for _, f := range flows {
		need[f.tenant] = f.n * 9 / 10
	}
	seen := map[string]int{}
	req := map[string]int{}
	tok := map[string]int64{}
	byRouter := map[string]int{}
	window := 0
	for _, d := range rec.dispatches {
		a := d.V.Admitted
		if !d.At.Before(killed) || seen[a.Tenant] >= need[a.Tenant] {
			break
		}
		seen[a.Tenant]++
		if d.At.Before(from) {
			continue
		}
		window++
		req[a.Tenant]++
		tok[a.Tenant] += routing.FairCost(&a)
		byRouter[d.V.RouterID]++
	}
	t.Logf("fleet saturated at +%s; window from +%s to the kill at +%s", saturated.Sub(start).Round(time.Millisecond),
		from.Sub(start).Round(time.Millisecond), killed.Sub(start).Round(time.Millisecond))

	if trace != nil {
		trace.log(t, rec.dispatches, schemas.PriorityStandard, "big", "small", start, killed, 250*time.Millisecond,
			namedTime{"saturated", saturated}, namedTime{"from", from}, namedTime{"kill", killed})
		trace.logReports(t, schemas.PriorityStandard, start, from)
	}

	// Ingress: what each router pulled (its journaled admissions), in the
	// window and before the kill.
	inWindow, beforeKill := map[string]int{}, map[string]int{}
	allIn, allBefore := 0, 0
	for _, r := range routers {
		for _, e := range admissions(ctx, t, js, r.id) {
			if !e.At.Before(killed) {
				continue
			}
			beforeKill[r.id]++
			allBefore++
			if !e.At.Before(from) {
				inWindow[r.id]++
				allIn++
			}
		}
	}
	t.Logf("pulled in the window %v, before the kill %v: r1 %.3f and %.3f", inWindow, beforeKill,
		float64(inWindow["r1"])/float64(max(allIn, 1)), float64(beforeKill["r1"])/float64(max(allBefore, 1)))
	if allBefore == 0 || 10*beforeKill["r1"] < 9*allBefore {
		t.Errorf("r1 pulled %d of the %d admitted messages pulled before the kill; the skewed shape wants at least 90 %%", beforeKill["r1"], allBefore)
	}
	adopted, redelivered, _ := takeover(ctx, t, js, "r2", []*Proc{s.routers[0], s.routers[2]}, killed)
	t.Logf("live peers read as dead before the kill: %d", falseDeaths(s.routers, len(s.routers), killed))
	t.Logf("r2's work taken over after its SIGKILL: in-flight dispatches adopted after %s, held admitted work redelivered after %s (0: none)",
		adopted.Round(10*time.Millisecond), redelivered.Round(10*time.Millisecond))
	premium := float64(req["prem"]) / float64(req["prem"]+req["big"]+req["small"])
	bigTokens := float64(tok["big"]) / float64(tok["big"]+tok["small"])
	mode := "fleet-wide"
	if perRouter {
		mode = "per-router (--fair-share=false)"
	}
	t.Logf("%s: over %d dispatches (%v by router): premium share of requests %.3f (4:1 is 0.800); large tenant's share of regular tokens %.3f (equal is 0.500); requests %v",
		mode, window, byRouter, premium, bigTokens, req)
	fair := math.Abs(premium-0.8) <= 0.04 && math.Abs(bigTokens-0.5) <= 0.025
	if byRouter["r2"] == 0 || byRouter["r3"] == 0 {
		t.Errorf("placed in the window %v: every router should place some of the work", byRouter)
	}
	// A per-router scheduler serves 4:1 at r1 and r3 and only regular work
	// at r2, so premium's share falls to about 0.8 × (1 - r2's share of the
	// placements): the drift is bounded by what the minority router
	// places, which its ingress bounds (routers place only what they pull).
	r2share := float64(byRouter["r2"]) / float64(max(window, 1))
	drifted := premium < 0.8-0.4*r2share
	t.Logf("r2 placed %.3f of the window: a per-router scheduler would give premium about %.3f", r2share, 0.8*(1-r2share))
	switch {
	case window < total/5:
		t.Errorf("the window held %d dispatches of %d; too few to measure shares", window, total)
	case perRouter && !drifted:
		t.Errorf("without shared counters premium's share %.3f did not drift below %.3f: the shape does not exercise fleet-wide fairness", premium, 0.8-0.4*r2share)
	case !perRouter && !fair:
		t.Errorf("shares premium %.3f (want 0.800 ± 0.040), large tenant's tokens %.3f (want 0.500 ± 0.025)", premium, bigTokens)
	}
}
