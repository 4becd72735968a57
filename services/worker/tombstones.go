package worker

import "time"

// tombstoneTTL is how long a cancel for a request this worker does not
// (yet) hold is remembered. A cancel can overtake its dispatch: the router
// publishes the dispatch, the client's next step is refused and the
// admitter cancels the running one — all before this worker's consumer has
// delivered the dispatch. Without the tombstone the request would run to
// the end, GPU time spent on an answer nobody wants.
const tombstoneTTL = 5 * time.Minute

// maxTombstones bounds the memory tombstones take.
const maxTombstones = 10000

type tombstone struct {
	reason string
	at     time.Time
}

func tombKey(tenant, id string) string { return tenant + "\x00" + id }

// bury records a cancel for a request not held here. Callers hold w.mu.
func (w *Worker) bury(tenant, id, reason string, now time.Time) {
	if w.tombstones == nil {
		w.tombstones = map[string]tombstone{}
	}
	if len(w.tombstones) >= maxTombstones {
		for k, t := range w.tombstones {
			if now.Sub(t.at) > tombstoneTTL || len(w.tombstones) >= maxTombstones {
				delete(w.tombstones, k)
			}
		}
	}
	w.tombstones[tombKey(tenant, id)] = tombstone{reason: reason, at: now}
}

// exhume reports, and forgets, a cancel that arrived before its dispatch.
// Callers hold w.mu.
func (w *Worker) exhume(tenant, id string, now time.Time) (string, bool) {
	k := tombKey(tenant, id)
	t, ok := w.tombstones[k]
	if !ok {
		return "", false
	}
	delete(w.tombstones, k)
	return t.reason, now.Sub(t.at) <= tombstoneTTL
}
