package faulttest

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/switchyard-ai/switchyard/schemas"
	"github.com/switchyard-ai/switchyard/services/client"
	"github.com/switchyard-ai/switchyard/services/svc"
	"github.com/switchyard-ai/switchyard/subjects"
)

// legWatch tracks, live, each worker's legs in flight: prefill legs with
// no KV handle yet, decode legs with no result yet.
type legWatch struct {
	mu      sync.Mutex
	prefill map[string]map[string]bool // worker -> ids mid-prefill
	decode  map[string]map[string]bool // worker -> ids mid-decode
	splits  map[string]bool
}

func watchLegs(t *testing.T, nc *nats.Conn) *legWatch {
	t.Helper()
	lw := &legWatch{prefill: map[string]map[string]bool{}, decode: map[string]map[string]bool{}, splits: map[string]bool{}}
	add := func(m map[string]map[string]bool, w, id string) {
		if m[w] == nil {
			m[w] = map[string]bool{}
		}
		m[w][id] = true
	}
	subs := map[string]func(*nats.Msg){
		subjects.DispatchAll: func(m *nats.Msg) {
			var d schemas.Dispatch
			if svc.Decode(m.Header, m.Data, &d) != nil {
				return
			}
			lw.mu.Lock()
			defer lw.mu.Unlock()
			switch d.Phase {
			case schemas.PhasePrefill:
				lw.splits[d.Admitted.Request.ID] = true
				add(lw.prefill, d.WorkerID, d.Admitted.Request.ID)
			case schemas.PhaseDecode:
				add(lw.decode, d.WorkerID, d.Admitted.Request.ID)
			}
		},
		subjects.HandoffAll(): func(m *nats.Msg) {
			var h schemas.KVHandle
			if svc.Decode(m.Header, m.Data, &h) == nil && h.Failed == nil {
				lw.mu.Lock()
				delete(lw.prefill[h.Worker], h.RequestID)
				lw.mu.Unlock()
			}
		},
		subjects.ResultAll: func(m *nats.Msg) {
			if _, id, err := subjects.ParseResult(m.Subject); err == nil {
				lw.mu.Lock()
				for _, ids := range lw.decode {
					delete(ids, id)
				}
				lw.mu.Unlock()
			}
		},
	}
	for subj, fn := range subs {
		sub, err := nc.Subscribe(subj, fn)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { sub.Unsubscribe() })
	}
	return lw
}

// killMid kills, with SIGKILL, the first of the candidate workers seen
// holding a leg of the kind mid-way (count), waiting up to 10 s for one.
func (lw *legWatch) killMid(t *testing.T, s *system, kind string, candidates []int, count func(string) int) (string, int) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(2 * time.Millisecond) {
		for _, i := range candidates {
			if p := s.workers[i]; count(p.Name) > 0 {
				held := count(p.Name)
				p.Kill()
				return p.Name, held
			}
		}
	}
	t.Fatalf("no %s worker held a leg mid-%s within 10 s", kind, kind)
	return "", 0
}

// midPrefill and midDecode count worker's legs in flight.
func (lw *legWatch) midPrefill(w string) int {
	lw.mu.Lock()
	defer lw.mu.Unlock()
	return len(lw.prefill[w])
}
func (lw *legWatch) midDecode(w string) int {
	lw.mu.Lock()
	defer lw.mu.Unlock()
	return len(lw.decode[w])
}

// TestSplitLegsKilled: two prefill and two decode workers (ib-ndr), each a
// separate process, under a long-prompt load that every request must
// split for (no worker takes whole requests). A prefill worker is killed
// with SIGKILL mid-prefill and a decode worker mid-decode: every request
// still ends with exactly one final result — lost 0, duplicates 0 — the
// legs the dead workers held re-placed under the retry budget (a decode
// leg whose source died reports its failed pull and is re-placed too).
func TestSplitLegsKilled(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the system as separate processes")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	legArgs := func(role string) []string { return []string{"--role", role, "--link", "ib-ndr"} }
	s := launch(ctx, t, sysConfig{natsNodes: 1, admitters: 1, routers: 1, workers: 4, workerArgs: map[int][]string{
		1: legArgs(schemas.RolePrefill), 2: legArgs(schemas.RolePrefill), 3: legArgs(schemas.RoleDecode), 4: legArgs(schemas.RoleDecode)}})
	nc, js := s.observer()
	lw := watchLegs(t, nc)
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	cl, err := client.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	const (
		tenant = "acme"
		model  = "llama-3.1-8b"
		n      = 48
	)
	start := time.Now()
	var ids []string
	for i := range n {
		id := fmt.Sprintf("split-%02d", i)
		ids = append(ids, id)
		// Long, distinct prompts (about 6,000 tokens): nothing cached, a
		// prefill of a few hundred ms on an H100; 200-400 tokens of decode.
		prompt := strings.Repeat(fmt.Sprintf("request %d asks about prefill and decode on separate GPUs ", i), 500)
		req := &schemas.Request{ID: id, Model: model, Prompt: prompt, MaxTokens: 200 + 10*(i%20), Stream: i%2 == 0, DeadlineMs: 90_000}
		if _, err := cl.Submit(ctx, tenant, req); err != nil {
			t.Fatal(err)
		}
		time.Sleep(150 * time.Millisecond)
		switch i {
		case 12:
			victim, held := lw.killMid(t, s, "prefill", []int{0, 1}, lw.midPrefill)
			t.Logf("SIGKILL %s (prefill) at +%s with %d legs mid-prefill", victim, time.Since(start).Round(time.Millisecond), held)
		case 24:
			victim, held := lw.killMid(t, s, "decode", []int{2, 3}, lw.midDecode)
			t.Logf("SIGKILL %s (decode) at +%s with %d legs mid-decode", victim, time.Since(start).Round(time.Millisecond), held)
		}
	}
	ok, failed, lost := 0, map[string]int{}, 0
	var worst time.Duration
	for _, id := range ids {
		rctx, rcancel := context.WithTimeout(ctx, 100*time.Second)
		res, err := cl.Result(rctx, tenant, id)
		rcancel()
		switch {
		case err != nil:
			lost++
			t.Errorf("%s: no result: %v", id, err)
		case res.Status == schemas.StatusOK:
			ok++
			worst = max(worst, time.Duration(res.Timing.TotalMs*float64(time.Millisecond)))
			if res.WorkerID == "w1" || res.WorkerID == "w2" {
				t.Errorf("%s: result from prefill worker %s", id, res.WorkerID)
			}
		default:
			code := res.Status
			if res.Error != nil {
				code = res.Error.Code
			}
			failed[code]++
		}
	}
	time.Sleep(500 * time.Millisecond)
	rec := s.recorded(ctx, js)
	finals := rec.finals()
	dups := rec.streamDuplicates()
	for _, id := range ids {
		if k := len(finals[id]); k != 1 {
			t.Errorf("%s: %d final results stored, want 1", id, k)
		}
	}
	lw.mu.Lock()
	splits := len(lw.splits)
	lw.mu.Unlock()
	retries := len(rec.eventsOf("retry"))
	pullFails := len(rec.eventsOf("kv_pull_failed"))
	t.Logf("%d requests: %d ok, failed %v, lost %d, duplicates %d; %d split; %d retry decisions, %d failed KV pulls; worst ok total %s; run %s",
		n, ok, failed, lost, dups, splits, retries, pullFails, worst.Round(time.Millisecond), time.Since(start).Round(time.Millisecond))
	if lost != 0 || dups != 0 {
		t.Fatalf("lost %d, duplicates %d; want 0, 0", lost, dups)
	}
	if splits != n {
		t.Fatalf("%d of %d requests split; a fleet with no whole-request worker must split them all", splits, n)
	}
	if ok < n/2 {
		t.Fatalf("only %d of %d ok (failed %v)", ok, n, failed)
	}
}
