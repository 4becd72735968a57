package worker

import (
	"context"
	"errors"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/switchyard-ai/switchyard/schemas"
)

// Work in progress is acknowledged as in progress. The dispatch consumer's
// ack wait (Config.AckWait, 30 s) is shorter than a long generation (1,000
// tokens at 30 ms); without in-progress acks JetStream redelivered such a
// dispatch while it ran, and the duplicate was acked — acking the stream
// message with the work unfinished, so that if the worker then died,
// restart recovery and the routers' adoption no longer saw it and the
// request was lost. Every dispatch the worker holds — waiting for an engine
// slot, generating at a real engine, or in the simulated engine — gets an
// in-progress ack every third of the ack wait until its final ack.

// keepAlive extends the ack wait of every dispatch held until ctx ends.
func (w *Worker) keepAlive(ctx context.Context) {
	t := time.NewTicker(w.cfg.AckWait / 3)
	defer t.Stop()
	var msgs []jetstream.Msg
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		msgs = w.heldMsgs(msgs[:0])
		for _, m := range msgs {
			if err := m.InProgress(); err != nil {
				w.sh.Log.Debug("in-progress ack", "err", err)
			}
		}
		clear(msgs)
	}
}

// heldMsgs appends the dispatches the worker holds to out.
func (w *Worker) heldMsgs(out []jetstream.Msg) []jetstream.Msg {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, j := range w.inflight {
		if j.msg != nil {
			out = append(out, j.msg)
		}
	}
	for _, h := range w.held {
		if h.msg != nil {
			out = append(out, h.msg)
		}
	}
	if w.remote != nil {
		for _, m := range w.remote.msgs {
			out = append(out, m)
		}
	}
	return out
}

// holding is how many dispatches the worker holds: in the simulated engine
// and at (or waiting for) a real engine.
func (w *Worker) holding() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	// Held prefill KV counts: a stopping prefill worker waits for its
	// decode workers' pulls (bounded by the drain), or they fail over.
	n := len(w.inflight) + len(w.held)
	if w.remote != nil {
		n += len(w.remote.msgs)
	}
	return n
}

// errDrained is the cause a drain that ran out of time cancels the real
// engine's generations with: they are handed back, not answered.
var errDrained = errors.New("the worker stopped before the generation ended")

// handBackGrace is how long a timed-out drain waits for the generations it
// cancelled to hand their dispatches back.
const handBackGrace = 2 * time.Second

// handBackAll ends a drain that ran out of time: generations still at the
// engine are cancelled and their dispatches left unacked, so the routers,
// seeing this worker fall silent, re-place them under the retry budget
// (a stream resumes from the tokens already sent). Sequences in the
// simulated engine are left unacked as they stand.
func (w *Worker) handBackAll() {
	if w.remote == nil {
		return
	}
	w.mu.Lock()
	stop := make([]context.CancelCauseFunc, 0, len(w.remote.cancels))
	for _, c := range w.remote.cancels {
		stop = append(stop, c)
	}
	w.mu.Unlock()
	w.sh.Log.Warn("drain timed out: handing the generations still at the engine back for re-placement",
		"generations", len(stop), "timeout", w.cfg.DrainTimeout)
	for _, c := range stop {
		c(errDrained)
	}
	until := time.Now().Add(handBackGrace)
	for w.holding() > 0 && time.Now().Before(until) {
		time.Sleep(10 * time.Millisecond)
	}
}

// drainedCause reports whether ctx was cancelled by a drain that timed out.
func drainedCause(ctx context.Context) bool { return errors.Is(context.Cause(ctx), errDrained) }

// handBackDrained leaves a dispatch unanswered and unacked when the worker
// stops under it (handBackAll).
func (w *Worker) handBackDrained(d schemas.Dispatch, m jetstream.Msg, ts *tokenStream) {
	a := d.Admitted
	w.sh.Emit(schemas.Event{Kind: "handed_back", RequestID: a.Request.ID, Tenant: a.Tenant, WorkerID: w.cfg.ID,
		Reason: "the worker stopped before the generation ended (drain timeout " + w.cfg.DrainTimeout.String() + ")",
		Fields: map[string]any{"chunks_streamed": chunksOf(ts), "attempt": a.Attempt}})
	m.NakWithDelay(engineLostRedelivery)
}
