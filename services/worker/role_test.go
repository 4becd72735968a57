package worker

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/switchyard-ai/switchyard/internal/core/control"
	"github.com/switchyard-ai/switchyard/internal/testkit/bustest"
	"github.com/switchyard-ai/switchyard/schemas"
	"github.com/switchyard-ai/switchyard/services/svc"
	"github.com/switchyard-ai/switchyard/subjects"
)

// roleWatch records a worker's heartbeated roles and its role events.
type roleWatch struct {
	mu     sync.Mutex
	roles  []string
	events []schemas.Event
}

func watchRole(t *testing.T, nc *nats.Conn, id string) *roleWatch {
	t.Helper()
	rw := &roleWatch{}
	hb, err := nc.Subscribe(subjects.Heartbeat("h100", id), func(m *nats.Msg) {
		var h schemas.Heartbeat
		if svc.Decode(m.Header, m.Data, &h) == nil {
			rw.mu.Lock()
			rw.roles = append(rw.roles, h.Role)
			rw.mu.Unlock()
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	ev, err := nc.Subscribe(subjects.Event("worker", "*"), func(m *nats.Msg) {
		evs, err := svc.DecodeEvents(m.Header, m.Data)
		if err != nil {
			return
		}
		rw.mu.Lock()
		for _, e := range evs {
			if e.WorkerID == id && (e.Kind == EventRoleSet || e.Kind == EventRoleRefused) {
				rw.events = append(rw.events, e)
			}
		}
		rw.mu.Unlock()
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { hb.Unsubscribe(); ev.Unsubscribe() })
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	return rw
}

// waitRole waits for a heartbeat with role, after n heartbeats seen.
func (rw *roleWatch) waitRole(t *testing.T, role string) {
	t.Helper()
	for deadline := time.Now().Add(3 * time.Second); ; {
		rw.mu.Lock()
		got := ""
		if len(rw.roles) > 0 {
			got = rw.roles[len(rw.roles)-1]
		}
		rw.mu.Unlock()
		if got == role {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("heartbeat role %q, want %q", got, role)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func (rw *roleWatch) waitEvent(t *testing.T, kind, has string) schemas.Event {
	t.Helper()
	for deadline := time.Now().Add(3 * time.Second); ; {
		rw.mu.Lock()
		for _, e := range rw.events {
			if e.Kind == kind && strings.Contains(e.Reason, has) {
				rw.mu.Unlock()
				return e
			}
		}
		rw.mu.Unlock()
		if time.Now().After(deadline) {
			t.Fatalf("no %s event with %q", kind, has)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// startRoleWorker runs a simulated role-both worker with a link that
// heartbeats every 50 ms; stop ends it and waits for it.
func startRoleWorker(t *testing.T, env bustest.Env, id string) (stop func()) {
	t.Helper()
	nc, err := env.Server.Connect(id)
	if err != nil {
		t.Fatal(err)
	}
	sh, err := svc.New("worker", id, nc, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	if err := sh.UseLedger(); err != nil {
		t.Fatal(err)
	}
	w, err := New(sh, Config{ID: id, GPU: "h100", Model: "llama-3.1-8b", SpeedUp: 50, Role: schemas.RoleBoth, Link: "ib-ndr",
		HeartbeatInterval: 50 * time.Millisecond, KVHold: 100 * time.Millisecond, DrainTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = w.Run(ctx) }()
	var once sync.Once
	stop = func() { once.Do(func() { cancel(); <-done; nc.Close() }) }
	t.Cleanup(stop)
	return stop
}

func publishRole(t *testing.T, env bustest.Env, c control.RoleMsg) {
	t.Helper()
	// Stored, as the controller's publish is (the CONTROL stream takes
	// sy.ctl.>): the restart below reads it back.
	m, err := svc.Encode(control.RoleSubject(c.Worker), schemas.Msgpack, c, "")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := env.JS.PublishMsg(context.Background(), m); err != nil {
		t.Fatal(err)
	}
}

// The controller turns a live role-both worker into a prefill worker: an
// unknown role is refused with an event and changes nothing; the prefill
// role is heartbeated at once, a whole request dispatched after it is
// refused and a prefill leg taken; a restarted worker reads the stored
// role instead of its --role.
func TestRoleCommand(t *testing.T) {
	env := bustest.StartProvisioned(t, subjects.StreamOptions{})
	const id = "r1"
	rw := watchRole(t, env.NC, id)
	h := watchLegs(t, env.NC)
	stop := startRoleWorker(t, env, id)
	rw.waitRole(t, schemas.RoleBoth)

	at := time.Now()
	publishRole(t, env, control.RoleMsg{Worker: id, Role: "verifier", Reason: "test", At: at})
	rw.waitEvent(t, EventRoleRefused, `unknown role "verifier"`)
	publishRole(t, env, control.RoleMsg{Worker: id, Role: schemas.RolePrefill, Reason: "prefill share", At: at.Add(time.Millisecond)})
	rw.waitRole(t, schemas.RolePrefill)
	if e := rw.waitEvent(t, EventRoleSet, "prefill share"); e.Fields["from"] != schemas.RoleBoth || e.Fields["to"] != schemas.RolePrefill {
		t.Fatalf("role event %+v", e)
	}
	// Past the grace for dispatches placed before routers heard.
	time.Sleep(150 * time.Millisecond)

	now := time.Now()
	adm := schemas.Admitted{Tenant: "acme", Model: "llama-3.1-8b", PromptTokens: 2000, SubmittedAt: now, Deadline: now.Add(time.Minute),
		Priority: schemas.PriorityInteractive,
		Request:  schemas.Request{ID: "whole-r", Model: "llama-3.1-8b", Prompt: "x", MaxTokens: 8}}
	publishDispatch(t, env.JS, schemas.Dispatch{Admitted: adm, WorkerID: id, PlacedAt: now}, "whole-r-a0")
	leg := adm
	leg.Request.ID = "leg-r"
	publishDispatch(t, env.JS, schemas.Dispatch{Admitted: leg, WorkerID: id, PlacedAt: now, Phase: schemas.PhasePrefill, DecodeWorker: "d9"}, "leg-r-a0-p")
	h.wait(t, "refusal and handle", func() bool { return len(h.results) >= 1 && len(h.handles) >= 1 })
	h.mu.Lock()
	r, kv := h.results[0], h.handles[0]
	h.mu.Unlock()
	if r.ID != "whole-r" || r.Error == nil || !strings.Contains(r.Error.Message, "role prefill") {
		t.Fatalf("whole request on the prefill worker: %+v (%+v)", r, r.Error)
	}
	if kv.RequestID != "leg-r" || kv.Worker != id || kv.Failed != nil {
		t.Fatalf("prefill leg's handle %+v", kv)
	}

	stop()
	rw.mu.Lock()
	rw.roles = nil
	rw.mu.Unlock()
	startRoleWorker(t, env, id) // --role both, as before
	rw.waitRole(t, schemas.RolePrefill)
	rw.mu.Lock()
	first := rw.roles[0]
	rw.mu.Unlock()
	if first != schemas.RolePrefill {
		t.Fatalf("restarted worker's first heartbeat has role %q, want the stored prefill", first)
	}
}

// A worker without a link refuses a fixed role, which would leave it only
// split legs it cannot take, and still takes role both; a dispatch the old
// role took, stored before routers could hear of a change, is served.
func TestRoleCommandChecks(t *testing.T) {
	env := bustest.Start(t)
	var logs lockedBuffer
	sh, err := svc.New("worker", "nolink", env.NC, slog.New(slog.NewTextHandler(&logs, nil)))
	if err != nil {
		t.Fatal(err)
	}
	w, err := New(sh, Config{ID: "nolink", GPU: "h100", Model: "llama-3.1-8b"})
	if err != nil {
		t.Fatal(err)
	}
	if w.applyRole(control.RoleMsg{Worker: "nolink", Role: schemas.RolePrefill}, "live") || w.Role() != "" {
		t.Fatalf("a worker with no link took role prefill (now %q)", w.Role())
	}
	if !strings.Contains(logs.String(), "no link") {
		t.Fatalf("refusal not explained:\n%s", logs.String())
	}
	if w.applyRole(control.RoleMsg{Worker: "other", Role: schemas.RoleBoth}, "live") {
		t.Fatal("took a role command naming another worker")
	}

	w.cfg.Link = "ib-ndr"
	if !w.applyRole(control.RoleMsg{Worker: "nolink", Role: schemas.RolePrefill}, "live") {
		t.Fatal("a worker with a link refused role prefill")
	}
	before, after := time.Now().Add(-time.Second), time.Now().Add(time.Minute)
	if _, ok := w.legRole(schemas.PhaseBoth, before); !ok {
		t.Error("a whole request stored before the change was refused")
	}
	if role, ok := w.legRole(schemas.PhaseBoth, after); ok || role != schemas.RolePrefill {
		t.Errorf("a whole request stored after the change: taken %v by role %q", ok, role)
	}
	if _, ok := w.legRole(schemas.PhasePrefill, after); !ok {
		t.Error("a prefill leg refused by a prefill worker")
	}
}
