package faulttest

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/switchyard-ai/switchyard/schemas"
	"github.com/switchyard-ai/switchyard/subjects"
)

// TestActiveActiveRouters is issue 16's done-when test, in the Dynamo
// #15187 shape: two tenants, "premium" in the interactive class and
// "regular" in the standard class, class weights 4:1, three router
// processes placing at once. Ingress is skewed: r1 pulls 64 admitted
// messages at a time and r2, r3 one each, so r1 takes most of a backlog
// (Switchyard's routers have no ingress of their own — any client reaches
// ADMITTED through any admitter — so "ingress through a router" is the
// share of the admitted work a router pulls and places). Half the
// requests are submitted at once; r1 is killed with SIGKILL once a third
// of them are placed; the other half follows at a steady rate. Checked:
// every request has exactly one final result, each request attempt
// exactly one stored dispatch, none failed or was lost, r1 placed at
// least 40 % of the work before it died (an even split gives 33 %), the
// survivors placed after it, and they adopted its in-flight dispatches and
// received the admitted work it held within 5 s of its kill
// (checkTakeover). The tenants' token shares are measured and logged, not
// asserted: with every request dispatched at once (the workers accept the
// whole backlog) the workers' engines, not the routers, decide the order;
// TestFleetWideFairness asserts them where the routers hold the backlog.
func TestActiveActiveRouters(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the system as separate processes")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	perTenant := envInt("SY_AA_PER_TENANT", 300)
	var routers []peerRouter
	for _, r := range []struct{ id, pull string }{{"r1", "64"}, {"r2", "1"}, {"r3", "1"}} {
		routers = append(routers, peerRouter{r.id, []string{"--pull-batch", r.pull, "--queue-weights", "interactive=4,standard=1"}})
	}
	s := startPeers(ctx, t, routers, 2, "--gpu", "l4", "--speedup", envOr("SY_AA_SPEEDUP", "1"))

	_, js := s.observer()
	// Submit the two tenants interleaved: the first half at once (a
	// backlog in ADMITTED, which r1's larger pulls take most of), then
	// SIGKILL r1 while it holds admitted work unacked and dispatches
	// without results, and submit the second half at a steady rate.
	prompt := strings.Repeat("tok ", 1500)
	type sent struct{ tenant, class string }
	ids := map[string]sent{}
	total := 2 * perTenant
	const submitFor = 4 * time.Second // the second half
	gap := submitFor / time.Duration(total/2)
	start := time.Now()
	var killed time.Time
	for i := range perTenant {
		for _, tn := range []sent{{"premium", schemas.PriorityInteractive}, {"regular", schemas.PriorityStandard}} {
			id := fmt.Sprintf("%s-%04d", tn.tenant, i)
			body, _ := json.Marshal(map[string]any{"id": id, "model": "llama-3.1-8b", "prompt": prompt, "max_tokens": 64, "priority": tn.class})
			m := nats.NewMsg(subjects.Submit(tn.tenant))
			m.Data = body
			m.Header.Set(schemas.HeaderMsgID, id)
			if _, err := js.PublishMsgAsync(m); err != nil {
				t.Fatal(err)
			}
			ids[id] = tn
			if killed.IsZero() && len(ids) == total/2 {
				select {
				case <-js.PublishAsyncComplete():
				case <-ctx.Done():
					t.Fatal("submissions not acked")
				}
				// The routers pull the backlog; kill once two thirds of it
				// is placed, with the rest held or still being admitted.
				for streamMsgs(ctx, js, subjects.StreamDispatch) < total/3 && ctx.Err() == nil {
					time.Sleep(20 * time.Millisecond)
				}
				s.routers[0].Kill()
				killed = time.Now()
				t.Logf("SIGKILL r1 at +%s, %d of %d submitted", killed.Sub(start).Round(time.Millisecond), len(ids), total)
			}
			if !killed.IsZero() {
				time.Sleep(time.Until(killed.Add(gap * time.Duration(len(ids)-total/2))))
			}
		}
	}
	select {
	case <-js.PublishAsyncComplete():
	case <-ctx.Done():
		t.Fatal("submissions not acked")
	}
	countResults := func() int { return streamMsgs(ctx, js, subjects.StreamResults) }
	for countResults() < total && time.Since(killed) < 90*time.Second {
		time.Sleep(100 * time.Millisecond)
	}
	t.Logf("%d results after +%s", countResults(), time.Since(start).Round(time.Millisecond))

	results := map[string]int{}
	rec := s.recorded(ctx, js)
	for _, r := range rec.results {
		results[r.V.ID]++
	}
	var lost, dup, failed []string
	for id := range ids {
		switch n := results[id]; {
		case n == 0:
			lost = append(lost, id)
		case n > 1:
			dup = append(dup, id)
		}
	}
	codes := map[string]int{}
	for _, r := range rec.results {
		if r.V.Status != schemas.StatusOK {
			failed = append(failed, r.V.ID)
			if r.V.Error != nil {
				codes[r.V.Error.Code]++
			}
		}
	}
	if len(lost) > 0 || len(dup) > 0 {
		t.Fatalf("%d lost (e.g. %v), %d with more than one result (e.g. %v)", len(lost), first(lost), len(dup), first(dup))
	}
	if len(failed) > 0 {
		t.Errorf("%d requests failed (%v); every request should be served", len(failed), codes)
	}

	// Exactly one stored dispatch per request and attempt; who placed it.
	perAttempt := map[string]int{}
	byRouter := map[string]int{}
	beforeKill := map[string]int{}
	for _, d := range rec.dispatches {
		k := d.V.Admitted.Request.ID + "#" + strconv.Itoa(d.V.Admitted.Attempt)
		perAttempt[k]++
		byRouter[d.V.RouterID]++
		if d.At.Before(killed) {
			beforeKill[d.V.RouterID]++
		}
	}
	for k, n := range perAttempt {
		if n != 1 {
			t.Errorf("request attempt %s dispatched %d times", k, n)
		}
	}
	all := 0
	for _, n := range beforeKill {
		all += n
	}
	t.Logf("dispatches by router: %v (before the kill: %v)", byRouter, beforeKill)
	// r1 pulls 64 at a time, r2 and r3 one: it must take clearly more
	// than its even third. Measured 0.50-0.67: pulls skew only what waits
	// in ADMITTED, and the routers keep up with the admitter much of the
	// time.
	if all == 0 || 5*beforeKill["r1"] < 2*all {
		t.Errorf("r1 placed %d of the %d dispatches before the kill; the skewed pulls want at least 40 %%", beforeKill["r1"], all)
	}
	if after := byRouter["r2"] + byRouter["r3"] - beforeKill["r2"] - beforeKill["r3"]; after == 0 {
		t.Errorf("the survivors placed nothing after r1 died")
	}
	// r1 died with dispatches on the workers and no results yet, and
	// admitted work it held unacked: a survivor must have adopted the one
	// (re-placed if its worker dies too) and received the other, each
	// within the 5 s.
	checkTakeover(ctx, t, js, "r1", s.routers[1:], killed, byRouter["r1"])
	// Logged rather than asserted: a peer whose refreshes stall past the
	// membership TTL costs doubled tracking, not correctness.
	t.Logf("live peers read as dead before the kill: %d", falseDeaths(s.routers, len(s.routers), killed))

	// Fairness, measured and reported, not yet asserted (issue 16 step 3
	// is open): the premium tenant's share of placed and of served tokens
	// while both tenants were backlogged, up to the point either had 90 %
	// of its requests placed (served), in stream order.
	share := func(tenantOf func(i int) (string, int, bool)) float64 {
		n := map[string]int{}
		tok := map[string]float64{}
		for i := 0; ; i++ {
			tn, tokens, ok := tenantOf(i)
			if !ok {
				break
			}
			n[tn]++
			tok[tn] += float64(tokens)
			if n[tn] >= perTenant*9/10 {
				break
			}
		}
		return tok["premium"] / (tok["premium"] + tok["regular"])
	}
	placedShare := share(func(i int) (string, int, bool) {
		if i >= len(rec.dispatches) {
			return "", 0, false
		}
		a := rec.dispatches[i].V.Admitted
		return a.Tenant, a.PromptTokens + a.Request.MaxTokens, true
	})
	servedShare := share(func(i int) (string, int, bool) {
		if i >= len(rec.results) {
			return "", 0, false
		}
		r := rec.results[i].V
		return r.Tenant, r.Usage.PromptTokens + r.Usage.CompletionTokens, true
	})
	t.Logf("premium (weight 4) vs regular (weight 1) token share while both were backlogged: placed %.3f, served %.3f (4:1 is 0.800)", placedShare, servedShare)
}

// firstLogAfter finds the time of the first line of p's log that holds s
// and was logged after t (slog's time=RFC3339 field).
func firstLogAfter(p *Proc, s string, t time.Time) (time.Time, bool) {
	b, err := os.ReadFile(p.Log)
	if err != nil {
		return time.Time{}, false
	}
	for _, line := range strings.Split(string(b), "\n") {
		if !strings.Contains(line, s) {
			continue
		}
		f, _, _ := strings.Cut(strings.TrimPrefix(line, "time="), " ")
		if at, err := time.Parse(time.RFC3339Nano, f); err == nil && at.After(t) {
			return at, true
		}
	}
	return time.Time{}, false
}

// streamMsgs is the number of messages stream holds (0 when unreadable).
func streamMsgs(ctx context.Context, js jetstream.JetStream, stream string) int {
	st, err := js.Stream(ctx, stream)
	if err != nil {
		return 0
	}
	info, err := st.Info(ctx)
	if err != nil {
		return 0
	}
	return int(info.State.Msgs)
}

func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

func first(xs []string) []string { return xs[:min(len(xs), 5)] }
