package admission

import (
	"math"
	"time"

	"github.com/switchyard-ai/switchyard/schemas"
)

// FleetView turns the heartbeat stream into the Load and Offers that Decide
// needs. It is a plain value with time passed in, so the admitter shell,
// the simulator and replay compute the same figures from the same inputs.
// Not safe for concurrent use: the caller serialises Observe and Load.
type FleetView struct {
	// Window is the span over which a worker's completion rate is
	// measured; 0 means 5 s.
	Window time.Duration
	// Stale drops a worker whose last heartbeat is older; 0 means 3 s.
	Stale time.Duration
	// PeakHalfLife is how fast the remembered peak throughput decays;
	// 0 means 30 s.
	PeakHalfLife time.Duration

	workers map[string]*workerObs
	peak    float64
	peakAt  time.Time
	// listening is when the view began hearing heartbeats (Listen); zero
	// for a view fed from the fleet's start, as the simulator's is.
	listening time.Time
}

type sample struct {
	at      time.Time
	done    uint64
	running int
}

type workerObs struct {
	last    schemas.Heartbeat
	seen    time.Time
	samples []sample
}

// Listen records that the view hears heartbeats from now on: an
// admitter calls it when its heartbeat subscription starts.
func (f *FleetView) Listen(now time.Time) { f.listening = now }

// HeardAll reports whether the view has listened long enough to have heard
// every live worker: a live worker is one heard within Stale, so a view
// that has listened for less may not yet have heard one that is live, and
// cannot conclude from its silence that it is absent. A view never told
// when it began listening (Listen) has heard from the fleet's start.
func (f *FleetView) HeardAll(now time.Time) bool {
	return f.listening.IsZero() || now.Sub(f.listening) >= f.stale()
}

func (f *FleetView) window() time.Duration { return orDefault(f.Window, 5*time.Second) }
func (f *FleetView) stale() time.Duration  { return orDefault(f.Stale, 3*time.Second) }

func orDefault(d, def time.Duration) time.Duration {
	if d <= 0 {
		return def
	}
	return d
}

// Observe records one heartbeat received at now. Rates are measured on the
// worker's own SentAt clock, so delivery jitter does not distort them.
func (f *FleetView) Observe(hb schemas.Heartbeat, now time.Time) {
	if f.workers == nil {
		f.workers = map[string]*workerObs{}
	}
	w := f.workers[hb.WorkerID]
	if w == nil {
		w = &workerObs{}
		f.workers[hb.WorkerID] = w
	}
	at := hb.SentAt
	if at.IsZero() {
		at = now
	}
	if n := len(w.samples); n > 0 {
		prev := w.samples[n-1]
		if hb.CompletedTotal < prev.done || !at.After(prev.at) {
			// A restarted worker (counter went back) or a reordered
			// heartbeat: start measuring afresh rather than invent a rate.
			if hb.CompletedTotal < prev.done {
				w.samples = w.samples[:0]
			} else {
				w.last, w.seen = hb, now
				return
			}
		}
	}
	w.samples = append(w.samples, sample{at: at, done: hb.CompletedTotal, running: hb.Running})
	cut := 0
	for cut < len(w.samples)-2 && at.Sub(w.samples[cut+1].at) >= f.window() {
		cut++
	}
	w.samples = w.samples[cut:]
	w.last, w.seen = hb, now
}

func (w *workerObs) rate() float64 {
	if len(w.samples) < 2 {
		return 0
	}
	a, b := w.samples[0], w.samples[len(w.samples)-1]
	dt := b.at.Sub(a.at).Seconds()
	if dt <= 0 {
		return 0
	}
	return float64(b.done-a.done) / dt
}

// capacity is what the worker could complete per second with every batch
// slot busy, by Little's law: the mean service time is the mean number
// running over the completion rate, and MaxBatch slots each finish one
// request per service time. Completions alone only show the arrival rate
// of a lightly loaded worker — three long prompts complete a few per
// minute on a worker that could take 60 more at once. Fewer than one
// running on average (requests shorter than the heartbeat period) counts
// as one, which keeps the figure a lower bound. Continuous batching slows
// each stream as the batch fills, so at full batch the figure is high by
// that slowdown; the measured rate takes over once the worker is full.
func (w *workerObs) capacity(rate float64) float64 {
	slots := w.slots()
	if rate <= 0 || slots <= 0 || len(w.samples) < 2 {
		return rate
	}
	running := 0.0
	for _, s := range w.samples {
		running += float64(s.running)
	}
	running /= float64(len(w.samples))
	return max(rate, float64(slots)*rate/max(running, 1))
}

// free is the number of requests the worker can start at once: its idle
// batch slots, or none while sequences wait on it (the engine queues only
// what it cannot start, for lack of a slot or of KV blocks).
//
// A slot is only free if there is KV cache to run in it: on long prompts
// the cache fills long before the batch does, and a worker with 200 idle
// slots and no free blocks can start nothing (the router then holds the
// work in its own queue, where the worker's Waiting never shows it). The
// KV room is counted in running sequences' worth of blocks.
func (w *workerObs) free() int {
	if w.last.Waiting > 0 {
		return 0
	}
	free := max(0, w.last.MaxBatch-w.last.Running)
	if used := w.last.KVBlocksTotal - w.last.KVBlocksFree; w.last.Running > 0 && used > 0 {
		perSeq := float64(used) / float64(w.last.Running)
		free = min(free, int(float64(w.last.KVBlocksFree)/perSeq))
	}
	return free
}

// slots is how many requests the worker can run at once: its batch, or
// fewer when its KV cache holds fewer of the requests it is running.
func (w *workerObs) slots() int {
	return min(w.last.MaxBatch, w.last.Running+w.free())
}

func (f *FleetView) live(now time.Time) []*workerObs {
	var out []*workerObs
	for id, w := range f.workers {
		if now.Sub(w.seen) > f.stale() {
			if now.Sub(w.seen) > 10*f.stale() {
				delete(f.workers, id)
			}
			continue
		}
		if w.last.Draining {
			continue
		}
		out = append(out, w)
	}
	return out
}

// Load is the fleet's load at now given the per-class pending counts of
// the admitted streams.
//
// Slots and FreeSlots come from the heartbeats' batch figures, so a request
// that finds an idle slot is predicted to wait nothing however slow recent
// completions were. RequestsPerSec is the fleet's capacity: per worker the
// larger of the measured completion rate and its Little's-law capacity
// (workerObs.capacity), summed, and never less than the decayed peak seen
// recently, so a burst is not judged against the trough before it.
// UtilizationByClass splits the KV blocks in use by the class holding
// them, from the heartbeats' kv_blocks_by_class.
func (f *FleetView) Load(pending map[string]int, now time.Time) Load {
	l := Load{Pending: pending}
	live := f.live(now)
	capacity, util := 0.0, 0.0
	kvTotal := 0
	var kvByClass map[string]int
	for _, w := range live {
		capacity += w.capacity(w.rate())
		util += w.last.Utilization
		l.Slots += w.slots()
		l.FreeSlots += w.free()
		l.WorkerWaiting += w.last.Waiting
		for c, n := range w.last.WaitingByClass {
			if l.WorkerWaitingByClass == nil {
				l.WorkerWaitingByClass = map[string]int{}
			}
			l.WorkerWaitingByClass[c] += n
		}
		if w.last.KVBlocksTotal > 0 && w.last.KVBlocksByClass != nil {
			kvTotal += w.last.KVBlocksTotal
			if kvByClass == nil {
				kvByClass = map[string]int{}
			}
			for c, n := range w.last.KVBlocksByClass {
				kvByClass[c] += n
			}
		}
	}
	if len(live) > 0 {
		util /= float64(len(live))
	}
	if kvTotal > 0 {
		l.UtilizationByClass = make(map[string]float64, len(kvByClass))
		for c, n := range kvByClass {
			l.UtilizationByClass[c] = float64(n) / float64(kvTotal)
		}
	}
	if f.peak > 0 {
		hl := orDefault(f.PeakHalfLife, 30*time.Second)
		decayed := f.peak
		if dt := now.Sub(f.peakAt); dt > 0 {
			decayed = f.peak * math.Exp2(-dt.Seconds()/hl.Seconds())
		}
		f.peak, f.peakAt = decayed, now
	}
	if capacity > f.peak {
		f.peak, f.peakAt = capacity, now
	}
	if len(live) > 0 {
		l.RequestsPerSec = f.peak
	}
	l.Utilization = util
	return l
}

// ContextWindow is the largest context window, in tokens, that a live
// worker reports for model in its heartbeat (ModelState.ContextLength), 0
// when none reports one. The largest, because the router may place the
// request on that worker; a worker started with a shorter window refuses
// what does not fit on its own.
func (f *FleetView) ContextWindow(model string, now time.Time) int {
	best := 0
	for _, w := range f.live(now) {
		for _, m := range w.last.Models {
			if m.Name == model && m.ContextLength > best {
				best = m.ContextLength
			}
		}
	}
	return best
}

// MeanPrice is the mean $/GPU-hour of the live fleet, 0 when empty.
func (f *FleetView) MeanPrice(now time.Time) float64 {
	live := f.live(now)
	if len(live) == 0 {
		return 0
	}
	s := 0.0
	for _, w := range live {
		s += w.last.PricePerHour
	}
	return s / float64(len(live))
}
