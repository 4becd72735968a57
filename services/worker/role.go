package worker

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/switchyard-ai/switchyard/internal/core/control"
	"github.com/switchyard-ai/switchyard/schemas"
	"github.com/switchyard-ai/switchyard/services/svc"
	"github.com/switchyard-ai/switchyard/subjects"
)

// Events a role command leaves: one applied (with from and to), one
// refused (with why: a role this worker does not know, or a fixed role
// for a worker with no link to move KV over).
const (
	EventRoleSet     = "role_set"
	EventRoleRefused = "role_refused"
)

// roleReadTimeout bounds the start-up read of the stored role command: a
// store that does not answer leaves the worker on its --role, not stuck.
const roleReadTimeout = 5 * time.Second

// roleState is the worker's live role (guarded by Worker.mu). It starts as
// Config.Role and the controller changes it with sy.ctl.role.<worker>.
type roleState struct {
	role string
	// prev and changed are the role before the last change and when this
	// worker applied it: a dispatch the old role took that was stored
	// before the routers could have heard of the change is still served
	// (legRole), not failed back to its client.
	prev    string
	changed time.Time
	// msgAt is the At of the last role command applied, so the stored
	// command read at start never undoes a newer one heard live.
	msgAt time.Time
}

// roleOf reads "" as RoleBoth, as schemas.RoleTakes does.
func roleOf(r string) string {
	if r == "" {
		return schemas.RoleBoth
	}
	return r
}

// roleGrace is how long after a role change a dispatch the old role took
// may still have been placed by a router that had not yet heard: the
// change is heartbeated at once, and one more interval covers a lost
// heartbeat and the clocks of router, server and worker disagreeing.
func (w *Worker) roleGrace() time.Duration { return 2 * w.cfg.HeartbeatInterval }

// Role is the worker's current role.
func (w *Worker) Role() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.roles.role
}

// legRole reports the worker's current role and whether a dispatch of
// phase stored at placed is taken: where the current role takes it, or
// where the role before the last change took it and it was placed before
// routers could know of the change. Work placed under the old role is
// what the worker "already holds" from the routers' point of view;
// refusing it would fail requests for a race nobody lost.
func (w *Worker) legRole(phase string, placed time.Time) (string, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	r := w.roles
	if schemas.RoleTakes(r.role, phase) {
		return roleOf(r.role), true
	}
	old := !r.changed.IsZero() && !placed.IsZero() && placed.Before(r.changed.Add(w.roleGrace())) && schemas.RoleTakes(r.prev, phase)
	return roleOf(r.role), old
}

// onRole applies the controller's role command as it arrives.
func (w *Worker) onRole(m *nats.Msg) {
	var c control.RoleMsg
	if err := svc.Decode(m.Header, m.Data, &c); err != nil {
		w.sh.Log.Warn("undecodable role control", "err", err)
		return
	}
	w.applyRole(c, "live")
}

// applyRole sets the worker's role from a role command, or refuses it
// with an event saying why. From then on the worker takes only the
// dispatches its role takes, finishes what it holds (sequences in the
// engine and held KV are untouched), and heartbeats the role; it
// heartbeats at once so routers stop placing what it no longer takes.
// source is "live" or "stored" (read at start), for the log.
func (w *Worker) applyRole(c control.RoleMsg, source string) bool {
	if c.Worker != "" && c.Worker != w.cfg.ID {
		// The subject names this worker; a body naming another is a
		// publisher's bug, and applying it could split the wrong fleet.
		w.refuseRole(c, source, fmt.Sprintf("the command names worker %q", c.Worker))
		return false
	}
	if !schemas.ValidRole(c.Role) {
		w.refuseRole(c, source, fmt.Sprintf("unknown role %q (prefill, decode or both)", c.Role))
		return false
	}
	to := roleOf(c.Role)
	if control.FixedRole(to) && w.cfg.Link == "" {
		// A prefill or decode worker only ever runs split legs, and with
		// no link it can take none: it would refuse all its work.
		w.refuseRole(c, source, fmt.Sprintf("role %s takes only split legs, and this worker has no link to move KV over (start it with --link)", to))
		return false
	}
	w.mu.Lock()
	if !c.At.IsZero() && c.At.Before(w.roles.msgAt) {
		w.mu.Unlock()
		w.sh.Log.Debug("older role command ignored", "role", to, "at", c.At, "applied_at", w.roles.msgAt, "source", source)
		return false
	}
	if !c.At.IsZero() {
		w.roles.msgAt = c.At
	}
	from := roleOf(w.roles.role)
	if from == to {
		w.mu.Unlock()
		return false
	}
	w.roles.role = to
	w.roles.prev, w.roles.changed = "", time.Time{}
	if source == "live" {
		// A restored role is no change to the routers: they heard it in
		// this worker's heartbeats before it restarted.
		// Wall time, not the shell's clock: it is compared with the
		// server's timestamps on dispatches (storedAt).
		w.roles.prev, w.roles.changed = from, time.Now()
	}
	w.mu.Unlock()
	if w.remote != nil && to != schemas.RoleDecode {
		cfg := w.cfg
		cfg.Role = to
		warnRemoteHold(w.sh, cfg)
	}
	w.sh.Emit(schemas.Event{Kind: EventRoleSet, WorkerID: w.cfg.ID, Reason: c.Reason,
		Fields: map[string]any{"from": from, "to": to, "source": source}})
	w.sh.Log.Info("role set", "from", from, "to", to, "reason", c.Reason, "source", source)
	w.heartbeat()
	return true
}

func (w *Worker) refuseRole(c control.RoleMsg, source, why string) {
	w.sh.Log.Warn("role command refused", "role", c.Role, "why", why, "reason", c.Reason, "source", source)
	w.sh.Emit(schemas.Event{Kind: EventRoleRefused, WorkerID: w.cfg.ID, Reason: why,
		Fields: map[string]any{"role": c.Role, "controller_reason": c.Reason, "source": source}})
}

// restoreRole applies the last role command stored for this worker in the
// CONTROL stream, so a worker that restarts keeps the controller's
// decision rather than its --role flag. None stored keeps the flag's
// role; so does a store that cannot be read, with a warning: the
// controller's next change still reaches the worker live.
func (w *Worker) restoreRole(ctx context.Context) {
	c, err := w.storedRole(ctx)
	switch {
	case errors.Is(err, jetstream.ErrMsgNotFound):
		return
	case err != nil:
		w.sh.Log.Warn("stored role not read: keeping the configured role", "role", roleOf(w.cfg.Role), "err", err)
		return
	}
	w.applyRole(c, "stored")
}

func (w *Worker) storedRole(ctx context.Context) (control.RoleMsg, error) {
	ctx, cancel := context.WithTimeout(ctx, roleReadTimeout)
	defer cancel()
	st, err := w.sh.JS.Stream(ctx, subjects.StreamControl)
	if err != nil {
		return control.RoleMsg{}, fmt.Errorf("control stream %s: %w", subjects.StreamControl, err)
	}
	subj := control.RoleSubject(w.cfg.ID)
	m, err := st.GetLastMsgForSubject(ctx, subj)
	if err != nil {
		return control.RoleMsg{}, fmt.Errorf("last %s: %w", subj, err)
	}
	var c control.RoleMsg
	if err := svc.Decode(m.Header, m.Data, &c); err != nil {
		return control.RoleMsg{}, fmt.Errorf("stored %s: %w", subj, err)
	}
	return c, nil
}

// storedAt is when a dispatch was stored (the server's clock, which a
// role change's grace is measured against), or its placement time where
// the metadata cannot be read.
func storedAt(m jetstream.Msg, d schemas.Dispatch) time.Time {
	if md, err := m.Metadata(); err == nil && !md.Timestamp.IsZero() {
		return md.Timestamp
	}
	return d.PlacedAt
}
