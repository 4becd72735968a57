package worker

import (
	"context"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/switchyard-ai/switchyard/schemas"
	"github.com/switchyard-ai/switchyard/services/svc"
	"github.com/switchyard-ai/switchyard/subjects"
)

// Telemetry: heartbeats (HBM, KV blocks, weights, load) and KV events,
// the fleet view the router and controller place and scale by.

func (w *Worker) publishKV(stored, evicted []uint64) {
	now := w.sh.Now()
	for _, ev := range []struct {
		kind string
		h    []uint64
	}{{schemas.KVStored, stored}, {schemas.KVEvicted, evicted}} {
		if len(ev.h) == 0 {
			continue
		}
		w.kvSeq++
		e := schemas.KVEvent{V: schemas.Version, WorkerID: w.cfg.ID, Seq: w.kvSeq, Kind: ev.kind, Hashes: append([]uint64(nil), ev.h...), At: now}
		if m, err := svc.Encode(subjects.KV(w.cfg.ID), schemas.Msgpack, e, ""); err == nil {
			w.sh.NC.PublishMsg(m)
		}
	}
}

func (w *Worker) onSnapshot(msg *nats.Msg) {
	w.mu.Lock()
	e := schemas.KVEvent{V: schemas.Version, WorkerID: w.cfg.ID, Seq: w.kvSeq, Kind: schemas.KVSnapshot, Hashes: w.cachedHashes(), At: w.sh.Now()}
	w.mu.Unlock()
	if m, err := svc.Encode(msg.Reply, schemas.Msgpack, e, ""); err == nil {
		w.sh.NC.PublishMsg(m)
	}
}

func (w *Worker) heartbeats(ctx context.Context) {
	t := time.NewTicker(w.cfg.HeartbeatInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if w.remote != nil {
				w.scrape(ctx)
				w.checkStall(ctx)
				if w.engineDown() {
					// Silent, not draining: the router must count what was
					// dispatched here as lost and re-place it.
					continue
				}
			}
			w.expireHeld(w.sh.Now())
			w.heartbeat()
		}
	}
}

// engineDown reports whether the engine a remote worker fronts has stopped
// answering.
func (w *Worker) engineDown() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.remote != nil && (w.remote.engine.down || w.remote.stalled)
}

// Heartbeat is the worker's current telemetry.
func (w *Worker) Heartbeat() schemas.Heartbeat {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.hbSeq++
	if w.remote != nil {
		hb := w.remoteHeartbeat()
		hb.KVSeq = w.kvSeq // relayed engine KV events (vllmkv.go) are sequenced here
		hb.Role, hb.Link = w.roles.role, w.cfg.Link
		return hb
	}
	hb := schemas.Heartbeat{
		V: schemas.Version, WorkerID: w.cfg.ID, Pool: w.cfg.Pool, Backend: "sim", Draining: w.draining,
		KVSeq: w.kvSeq, Seq: w.hbSeq, SentAt: w.sh.Now(), CompletedTotal: w.done, ErrorsTotal: w.errs,
		Role: w.roles.role, Link: w.cfg.Link,
	}
	w.eng.FillHeartbeat(&hb)
	w.annotateShift(&hb) // parked models and a switch under way (switch.go)
	return hb
}

func (w *Worker) heartbeat() {
	hb := w.Heartbeat()
	if m, err := svc.Encode(subjects.Heartbeat(w.cfg.Pool, w.cfg.ID), schemas.Msgpack, hb, ""); err == nil {
		w.sh.NC.PublishMsg(m)
	}
}
