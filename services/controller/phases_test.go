package controller

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/switchyard-ai/switchyard/internal/core/catalog"
	"github.com/switchyard-ai/switchyard/internal/core/control"
	"github.com/switchyard-ai/switchyard/internal/testkit/bustest"
	"github.com/switchyard-ai/switchyard/schemas"
	"github.com/switchyard-ai/switchyard/services/svc"
	"github.com/switchyard-ai/switchyard/subjects"
)

// phaseController builds a live controller over pools on a real
// embedded server and returns it with a subscription to every sy.ctl
// message it sends.
func phaseController(t *testing.T, cfg control.Config) (*Controller, chan *nats.Msg) {
	t.Helper()
	env := bustest.StartProvisioned(t, subjects.StreamOptions{})
	sh, err := svc.New("controller", "c-phases", env.NC, slog.Default())
	if err != nil {
		t.Fatal(err)
	}
	cfg.Catalog = catalog.Default()
	c, err := New(sh, Config{Control: cfg})
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan *nats.Msg, 64)
	sub, err := env.NC.ChanSubscribe("sy.ctl.>", got)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	return c, got
}

func feed(t *testing.T, c *Controller, hbs []schemas.Heartbeat, results int) {
	t.Helper()
	for _, hb := range hbs {
		m, err := svc.Encode(subjects.Heartbeat(hb.GPU, hb.WorkerID), schemas.Msgpack, hb, "")
		if err != nil {
			t.Fatal(err)
		}
		c.onHeartbeat(m)
	}
	for i := range results {
		r := schemas.Result{ID: "r", Status: schemas.StatusOK, Priority: schemas.PriorityInteractive, SLOMet: true, WorkerID: "w",
			Usage: schemas.Usage{PromptTokens: 12400 + i, CompletionTokens: 350, CachedTokens: 0}}
		m, err := svc.Encode(subjects.Result("t", "r"), schemas.Msgpack, r, "")
		if err != nil {
			t.Fatal(err)
		}
		c.onResult(m)
	}
}

// wait returns the first message on subject within a few seconds.
func wait(t *testing.T, got chan *nats.Msg, subject string, v any) {
	t.Helper()
	deadline := time.After(5 * time.Second)
	for {
		select {
		case m := <-got:
			if m.Subject != subject {
				continue
			}
			if err := svc.Decode(m.Header, m.Data, v); err != nil {
				t.Fatal(err)
			}
			return
		case <-deadline:
			t.Fatalf("nothing on %s", subject)
		}
	}
}

func hb(id, gpu, role string) schemas.Heartbeat {
	return schemas.Heartbeat{WorkerID: id, GPU: gpu, Role: role, Link: "ib-ndr", Running: 1,
		Models: []schemas.ModelState{{Name: "llama-3.1-8b", State: schemas.WeightHot}}}
}

// TestRoleCommandOnTheBus: with AssignRoles, a pool of whole requests
// whose results show long uncached prompts turns one worker to prefill,
// and the command goes out as sy.ctl.role.<worker> with its reason.
func TestRoleCommandOnTheBus(t *testing.T) {
	c, got := phaseController(t, control.Config{AssignRoles: true,
		Pools: []control.Pool{{GPU: "h100", Model: "llama-3.1-8b", Min: 1, Max: 4}}})
	feed(t, c, []schemas.Heartbeat{hb("h100-00", "h100", ""), hb("h100-01", "h100", "")}, 30)
	d := c.Step(context.Background())
	if len(d.Roles) != 1 {
		t.Fatalf("roles %+v, want one worker turned to prefill", d.Roles)
	}
	var msg control.RoleMsg
	wait(t, got, control.RoleSubject(d.Roles[0].Worker), &msg)
	if msg.Worker != d.Roles[0].Worker || msg.Role != schemas.RolePrefill || msg.Reason == "" {
		t.Errorf("role command %+v", msg)
	}
}

// TestReplicasMessageNamesTheRole: a prefill and a decode pool of one GPU
// are two pools, each decision's sy.ctl.replicas message names its role
// (what a scaler starts its workers with), and each pool counts its own
// workers.
func TestReplicasMessageNamesTheRole(t *testing.T) {
	pools := []control.Pool{
		{GPU: "h100", Model: "llama-3.1-8b", Min: 1, Max: 4, Role: schemas.RolePrefill},
		{GPU: "h100", Model: "llama-3.1-8b", Min: 1, Max: 4, Role: schemas.RoleDecode},
	}
	c, got := phaseController(t, control.Config{Pools: pools})
	feed(t, c, []schemas.Heartbeat{hb("h100-00", "h100", schemas.RolePrefill), hb("h100-01", "h100", schemas.RoleDecode), hb("h100-02", "h100", schemas.RoleDecode)}, 30)
	d := c.Step(context.Background())
	for _, p := range pools {
		var msg control.ReplicasMsg
		wait(t, got, control.ReplicasSubject(p.Key()), &msg)
		want := 1
		if p.Role == schemas.RoleDecode {
			want = 2
		}
		if msg.Role != p.Role || msg.Current != want {
			t.Errorf("%s: role %q current %d, want %q and %d", p.Key(), msg.Role, msg.Current, p.Role, want)
		}
	}
	if len(d.Replicas) != 2 {
		t.Fatalf("replicas %+v", d.Replicas)
	}
}
