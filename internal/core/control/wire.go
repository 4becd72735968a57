package control

import (
	"time"

	"github.com/switchyard-ai/switchyard/subjects"
)

// Control subjects, all under sy.ctl.> (the CONTROL stream keeps them, so a
// worker or scaler that restarts can read the last word for it):
//
//	sy.ctl.budget.<worker>    BudgetMsg    controller → worker
//	sy.ctl.spec.<worker>      SpecMsg      controller → worker
//	sy.ctl.warmth.<worker>    WarmthMsg    controller → worker
//	sy.ctl.role.<worker>      RoleMsg      controller → worker
//	sy.ctl.switch.<worker>    SwitchMsg    controller → worker (GPUs that change model)
//	sy.ctl.replicas.<pool>    ReplicasMsg  controller → scaler (and KEDA via the metric)
//	sy.ctl.shed.<class>       ShedMsg      controller → admitter
//	sy.rpc.drain.<worker>     (request)    scaler → worker: stop taking work
func BudgetSubject(worker string) string { return subjects.Control(KindBudget, worker) }

// SpecSubject is sy.ctl.spec.<worker>.
func SpecSubject(worker string) string { return subjects.Control(KindSpec, worker) }

// WarmthSubject is sy.ctl.warmth.<worker>.
func WarmthSubject(worker string) string { return subjects.Control(KindWarmth, worker) }

// RoleSubject is sy.ctl.role.<worker>.
func RoleSubject(worker string) string { return subjects.Control(KindRole, worker) }

// SwitchSubject is sy.ctl.switch.<worker>.
func SwitchSubject(worker string) string { return subjects.Control(KindSwitch, worker) }

// ReplicasSubject is sy.ctl.replicas.<pool>.
func ReplicasSubject(pool string) string { return subjects.Control(KindReplicas, pool) }

// ShedSubject is sy.ctl.shed.<class>.
func ShedSubject(class string) string { return subjects.Control(KindShed, class) }

// DrainSubject is sy.rpc.drain.<worker>, a core-NATS request (outside the
// CONTROL stream, whose publish ack would otherwise answer first): the worker
// announces itself draining in a heartbeat at once, so routers stop placing
// on it before it stops consuming, and replies when it has.
func DrainSubject(worker string) string { return subjects.RPC("drain", worker) }

// Wildcards for subscribers.
const (
	ReplicasAll = "sy.ctl.replicas.*"
	ShedAll     = "sy.ctl.shed.*"
)

// BudgetMsg sets a worker's engine budgets (values ≤ 0 keep the current).
type BudgetMsg struct {
	Worker      string    `json:"worker"`
	MaxBatch    int       `json:"max_batch"`
	TokenBudget int       `json:"token_budget"`
	Reason      string    `json:"reason"`
	At          time.Time `json:"at"`
}

// SpecMsg switches a worker's speculative decoding.
type SpecMsg struct {
	Worker string    `json:"worker"`
	On     bool      `json:"on"`
	Gain   float64   `json:"gain"`
	Reason string    `json:"reason"`
	At     time.Time `json:"at"`
}

// WarmthMsg moves a worker's model weights to State (hot, sleeping, cold).
type WarmthMsg struct {
	Worker string    `json:"worker"`
	Model  string    `json:"model"`
	State  string    `json:"state"`
	Reason string    `json:"reason"`
	At     time.Time `json:"at"`
}

// RoleMsg sets the phases a worker takes (schemas.RolePrefill, RoleDecode
// or RoleBoth). The worker takes only dispatches its new role takes
// (schemas.RoleTakes) from then on, finishes what it already holds, and
// sends the role in every heartbeat after; a role it does not know it
// ignores. The CONTROL stream keeps the last one per worker, so a worker
// that restarts reads the role it was given.
type RoleMsg struct {
	Worker string    `json:"worker"`
	Role   string    `json:"role"`
	Reason string    `json:"reason"`
	At     time.Time `json:"at"`
}

// SwitchMsg moves a worker's GPU from model From to model To
// (SwitchDecision, Config.ShiftModels): the worker heartbeats draining,
// takes no new dispatch, finishes what it holds and every dispatch sent
// before routers heard it drain, puts From's weights to sleep in host
// memory and brings To's into HBM from the tier they sit in on it
// (FromTier, as the controller priced it). Seconds is the switch's priced
// duration, drain included. A switch the worker cannot make (it does not
// serve From, To is unknown, its engine cannot change model, work still
// runs past its bound) is refused with an event saying why.
type SwitchMsg struct {
	Worker   string    `json:"worker"`
	GPU      string    `json:"gpu"`
	From     string    `json:"from"`
	To       string    `json:"to"`
	FromTier string    `json:"from_tier,omitempty"`
	Seconds  float64   `json:"seconds"`
	Reason   string    `json:"reason"`
	At       time.Time `json:"at"`
}

// ReplicasMsg is a pool's desired replica count. Routers and admitters
// read it too: it says what a new replica of the pool runs (Dtype, TP),
// how many may run (Max) and how long one started now takes to serve
// (ColdStartSeconds), so they can hold a request for a model no live
// worker serves while the pool warms one.
type ReplicasMsg struct {
	Pool             string    `json:"pool"`
	GPU              string    `json:"gpu"`
	Model            string    `json:"model"`
	Role             string    `json:"role,omitempty"` // a fixed role its replicas start with
	Dtype            string    `json:"dtype,omitempty"`
	TP               int       `json:"tp,omitempty"`
	Max              int       `json:"max,omitempty"`
	ColdStartSeconds float64   `json:"cold_start_s,omitempty"`
	Desired          int       `json:"desired"`
	Current          int       `json:"current"`
	Held             int       `json:"held,omitempty"`
	Reason           string    `json:"reason"`
	At               time.Time `json:"at"`
}

// ShedMsg sets the admitter's shedding margin of one class.
type ShedMsg struct {
	Class  string    `json:"class"`
	Margin float64   `json:"margin"`
	Reason string    `json:"reason"`
	At     time.Time `json:"at"`
}
