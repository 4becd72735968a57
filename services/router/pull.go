package router

import (
	"context"
	"sync"
	"time"
)

// A router's pull rate (Config.PullRate, --pull-rate): the most admitted
// messages a second it takes from the shared per-class consumers, over
// every class it pulls. Routers that share consumers take the admitted
// work in proportion to how fast each asks for it, so a capped router
// takes a smaller share: the way to give a small router less of the load,
// and the fairness test's way to skew ingress (nine tenths through one
// router) in a design whose routers have no ingress of their own.
//
// The cap paces the consumer's callback, so a message waits in the client
// at most one interval (≤ 1 s: MinPullRate) before the router holds it and
// keeps it alive with in-progress acks; a capped router pulls one message
// at a time (pullBatch), so no more than one waits, far inside AckWait.

// MinPullRate is the lowest --pull-rate: a message waits at most 1/rate in
// the client before the router holds it, and that must stay well inside
// AckWait.
const MinPullRate = 1.0

// pacer spaces admitted messages at most one per every.
type pacer struct {
	mu    sync.Mutex
	every time.Duration
	next  time.Time
}

// newPacer is the pacer for rate messages a second; nil (no cap) for 0.
func newPacer(rate float64) *pacer {
	if rate <= 0 {
		return nil
	}
	return &pacer{every: time.Duration(float64(time.Second) / rate)}
}

// wait blocks until the next message may be taken (at once without a
// cap), or ctx ends.
func (p *pacer) wait(ctx context.Context) {
	if p == nil {
		return
	}
	p.mu.Lock()
	now := time.Now()
	at := p.next
	if at.Before(now) {
		at = now // a burst of one: an idle spell banks no credit
	}
	p.next = at.Add(p.every)
	p.mu.Unlock()
	if d := time.Until(at); d > 0 {
		t := time.NewTimer(d)
		defer t.Stop()
		select {
		case <-ctx.Done():
		case <-t.C:
		}
	}
}
