package stack

import (
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/switchyard-ai/switchyard/internal/core/catalog"
	"github.com/switchyard-ai/switchyard/internal/core/control"
	"github.com/switchyard-ai/switchyard/internal/driver/sim"
	"github.com/switchyard-ai/switchyard/schemas"
	"github.com/switchyard-ai/switchyard/services/svc"
	"github.com/switchyard-ai/switchyard/subjects"
)

// A fleet with fixed roles gives pools of its roles, and the scaler starts
// a role pool's workers with the role and a link (the fleet's, else the
// default); a pool of whole requests gets a link only beside role pools or
// when the controller assigns roles.
func TestScaledWorkerRoles(t *testing.T) {
	fleet := []WorkerSpec{
		{GPU: "h100", Model: "llama-3.1-8b", Role: schemas.RolePrefill, Link: "roce-400"},
		{GPU: "h100", Model: "llama-3.1-8b", Role: schemas.RoleDecode},
		{GPU: "h100", Model: "llama-3.1-8b", Role: schemas.RoleBoth},
	}
	pools, links, err := derivePools(ControlConfig{Min: 1}, fleet, catalog.Default())
	if err != nil {
		t.Fatal(err)
	}
	if len(pools) != 3 || pools[0].Role != schemas.RolePrefill || pools[1].Role != schemas.RoleDecode || pools[2].Role != "" {
		t.Fatalf("pools %+v", pools)
	}
	cfg := control.Config{Pools: pools}
	for i, want := range []WorkerSpec{
		{Role: schemas.RolePrefill, Link: "roce-400"},
		{Role: schemas.RoleDecode, Link: sim.DefaultRoleLink},
		{Link: sim.DefaultRoleLink}, // beside role pools
	} {
		got := scaledWorker(pools[i], cfg, links, 0)
		if got.Role != want.Role || got.Link != want.Link || got.GPU != pools[i].GPU || got.Model != pools[i].Model {
			t.Errorf("pool %s: scaled worker %+v, want role %q link %q", pools[i].Key(), got, want.Role, want.Link)
		}
	}
	whole := control.Pool{GPU: "h100", Model: "llama-3.1-8b"}
	if got := scaledWorker(whole, control.Config{Pools: []control.Pool{whole}}, nil, 0); got.Role != "" || got.Link != "" {
		t.Errorf("a fleet of whole requests: scaled worker %+v, want no role and no link", got)
	}
	if got := scaledWorker(whole, control.Config{Pools: []control.Pool{whole}, AssignRoles: true}, nil, 0); got.Link != sim.DefaultRoleLink {
		t.Errorf("with roles assigned: scaled worker %+v, want link %s", got, sim.DefaultRoleLink)
	}
}

// In a running stack, a prefill pool below its minimum gets a worker that
// heartbeats role prefill with the default link.
func TestScalerStartsRoleWorkers(t *testing.T) {
	fast := control.Config{Interval: 200 * time.Millisecond, UpCooldown: 200 * time.Millisecond}
	st := startStack(t, Config{SpeedUp: 100, Fleet: []WorkerSpec{
		{GPU: "h100", Model: "llama-3.1-8b", Dtype: "bf16", TP: 1, Role: schemas.RolePrefill},
	}, Control: &ControlConfig{Min: 2, Max: 2, Control: fast}})
	// The scaler may have added its worker already, and WorkerIDs is a
	// map's order: the fleet's own worker is the first one numbered
	// (AddWorker), w1 (a clean-clone CI run read w2 as the first and
	// failed on w1's heartbeat, which has no link).
	first := st.WorkerIDs()
	slices.Sort(first)
	nc, err := st.Connect("role-scale-test")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	seen := map[string]schemas.Heartbeat{}
	sub, err := nc.Subscribe(subjects.HeartbeatAll, func(m *nats.Msg) {
		var hb schemas.Heartbeat
		if svc.Decode(m.Header, m.Data, &hb) == nil {
			mu.Lock()
			seen[hb.WorkerID] = hb
			mu.Unlock()
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	for deadline := time.Now().Add(20 * time.Second); ; {
		mu.Lock()
		var added *schemas.Heartbeat
		for id, hb := range seen {
			if id != first[0] {
				added = &hb
			}
		}
		mu.Unlock()
		if added != nil {
			if added.Role != schemas.RolePrefill || added.Link != sim.DefaultRoleLink {
				t.Fatalf("added worker %s heartbeats role %q link %q, want prefill over %s", added.WorkerID, added.Role, added.Link, sim.DefaultRoleLink)
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("no worker added: %v, desired %v", st.WorkerIDs(), st.Controller().Desired())
		}
		time.Sleep(50 * time.Millisecond)
	}
}
