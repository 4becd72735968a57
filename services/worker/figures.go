package worker

import (
	"time"

	"github.com/switchyard-ai/switchyard/internal/core/slo"
	"github.com/switchyard-ai/switchyard/schemas"
)

// The figures a result reports, defined once for every path a worker
// answers by (simulated engine, real engine, answered from the stream's
// record, the zero-time backend).

// sloMet is slo.Met for an answered request: its first token (from
// submission), its mean time per output token after the first and when
// it finished, against what the request carries. Three paths had judged
// the deadline alone, and disagreed with the fourth (and the simulator)
// on every request with a TTFT or TPOT target, or without a deadline.
func sloMet(a *schemas.Admitted, ttft time.Duration, itlMs float64, finished time.Time) bool {
	return slo.Met(slo.Observed{OK: true, TTFT: ttft, ITL: time.Duration(itlMs * float64(time.Millisecond)), Finished: finished},
		slo.TargetOf(a))
}

// busyMeter splits a real engine's time among the generations this worker
// has at it: while n are there, each accrues 1/n of every second. Their
// shares add up to the time the engine had any of them — its busy time,
// as far as this worker can see — where wall time per request counted
// every concurrent second n times, overstating GPU-seconds and cost by
// the concurrency. A generation waiting in the engine's own queue shares
// too: the engine's time is what it waits for. Where the engine reports
// the batch it runs (vLLM's and SGLang's running requests, Batch), a
// larger batch — other clients' requests beside this worker's — divides
// the time instead: the GPU ran them all. Callers hold Worker.mu.
type busyMeter struct {
	last  time.Time
	share map[string]float64
	// Batch is the engine's own count of requests running as of its last
	// scrape, 0 when it reports none.
	Batch int
}

// advance credits the time since the last change to what is running.
func (b *busyMeter) advance(now time.Time) {
	if n := max(len(b.share), b.Batch); len(b.share) > 0 && now.After(b.last) {
		dt := now.Sub(b.last).Seconds() / float64(n)
		for id := range b.share {
			b.share[id] += dt
		}
	}
	if now.After(b.last) {
		b.last = now
	}
}

// start begins id's share at now.
func (b *busyMeter) start(id string, now time.Time) {
	if b.share == nil {
		b.share = map[string]float64{}
	}
	b.advance(now)
	b.share[id] = 0
}

// end closes id's share at now and returns its seconds.
func (b *busyMeter) end(id string, now time.Time) float64 {
	b.advance(now)
	s := b.share[id]
	delete(b.share, id)
	return s
}
