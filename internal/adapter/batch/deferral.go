package batch

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/switchyard-ai/switchyard/internal/adapter/bus"
	"github.com/switchyard-ai/switchyard/schemas"
	"github.com/switchyard-ai/switchyard/subjects"
)

// DeferKind is the admitter's event kind for a request held back until a
// trough (sy.event.admitter.defer, with fields.defer_until).
const DeferKind = "defer"

// Deferral is what the admitter decided for one deferred request.
type Deferral struct {
	Until  time.Time
	Reason string
}

// Deferrals follows the admitter's defer events for one batch's requests,
// from the batch's creation on, so a waiting client can say why requests
// have no result yet and until when they wait.
type Deferrals struct {
	mu   sync.Mutex
	byID map[string]Deferral
	err  error
	// caughtUp is closed once every event stored when the watch began
	// has been read.
	caughtUp chan struct{}
	once     sync.Once
}

// CaughtUp is closed once the watch has read the events stored when it
// began (or stopped on an error).
func (d *Deferrals) CaughtUp() <-chan struct{} { return d.caughtUp }

func (d *Deferrals) markCaughtUp() { d.once.Do(func() { close(d.caughtUp) }) }

// WatchDeferrals reads the defer events of rec's tenant from the EVENTS
// stream in the background until ctx ends, keeping those of items.
func WatchDeferrals(ctx context.Context, js jetstream.JetStream, rec Record, items []Item) (*Deferrals, error) {
	want := make(map[string]bool, len(items))
	for _, it := range items {
		want[it.RequestID] = true
	}
	start := rec.Created.Add(-clockSkew)
	cons, err := js.OrderedConsumer(ctx, subjects.StreamEvents, jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{subjects.Event("admitter", DeferKind)},
		DeliverPolicy:  jetstream.DeliverByStartTimePolicy,
		OptStartTime:   &start,
	})
	if err != nil {
		return nil, fmt.Errorf("defer events consumer: %w", err)
	}
	d := &Deferrals{byID: map[string]Deferral{}, caughtUp: make(chan struct{})}
	// With no defer event since the batch began there is nothing to catch
	// up on: say so now rather than after a fetch's empty wait.
	if st, err := js.Stream(ctx, subjects.StreamEvents); err == nil {
		last, err := st.GetLastMsgForSubject(ctx, subjects.Event("admitter", DeferKind))
		if errors.Is(err, jetstream.ErrMsgNotFound) || (err == nil && last.Time.Before(start)) {
			d.markCaughtUp()
		}
	}
	go func() {
		defer d.markCaughtUp()
		for ctx.Err() == nil {
			mb, err := cons.Fetch(256, jetstream.FetchMaxWait(time.Second))
			if err != nil {
				d.fail(err)
				return
			}
			n := 0
			for m := range mb.Messages() {
				n++
				if md, err := m.Metadata(); err == nil && md.NumPending == 0 {
					d.markCaughtUp()
				}
				evs, err := bus.DecodeEvents(m.Headers(), m.Data())
				if err != nil {
					continue
				}
				for _, ev := range evs {
					if ev.Tenant != rec.Tenant || !want[ev.RequestID] {
						continue
					}
					d.mu.Lock()
					d.byID[ev.RequestID] = Deferral{Until: fieldTime(ev.Fields["defer_until"]), Reason: ev.Reason}
					d.mu.Unlock()
				}
			}
			if n == 0 {
				d.markCaughtUp()
			}
			if err := mb.Error(); err != nil && !errors.Is(err, jetstream.ErrNoMessages) && !errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil {
				d.fail(err)
				return
			}
		}
	}()
	return d, nil
}

func (d *Deferrals) fail(err error) {
	d.mu.Lock()
	d.err = err
	d.mu.Unlock()
}

// fieldTime reads a time from an event field, which is a time.Time after
// msgpack and an RFC 3339 string after JSON.
func fieldTime(v any) time.Time {
	switch t := v.(type) {
	case time.Time:
		return t
	case string:
		if p, err := time.Parse(time.RFC3339Nano, t); err == nil {
			return p
		}
	}
	return time.Time{}
}

// Waiting summarises the deferred requests that have no result yet.
type Waiting struct {
	// Count is how many deferred requests still wait; Until the latest
	// time any of them was deferred to; Reason the most common reason.
	Count  int
	Until  time.Time
	Reason string
	// WatchError is the error that stopped reading the admitter's defer
	// events, "" while the watch runs: the count may then miss requests
	// deferred since, and the progress line says so rather than showing
	// a stale count as the whole story.
	WatchError string
}

// Pending reports the deferred requests without a result in done.
func (d *Deferrals) Pending(done func(requestID string) bool) Waiting {
	if d == nil {
		return Waiting{}
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	var w Waiting
	if d.err != nil {
		w.WatchError = d.err.Error()
	}
	reasons := map[string]int{}
	for id, df := range d.byID {
		if done(id) {
			continue
		}
		w.Count++
		if df.Until.After(w.Until) {
			w.Until = df.Until
		}
		reasons[df.Reason]++
	}
	best := make([]string, 0, len(reasons))
	for r := range reasons {
		best = append(best, r)
	}
	sort.Slice(best, func(i, j int) bool {
		if reasons[best[i]] != reasons[best[j]] {
			return reasons[best[i]] > reasons[best[j]]
		}
		return best[i] < best[j]
	})
	if len(best) > 0 {
		w.Reason = best[0]
	}
	return w
}

// Describe is the progress line's note on deferred work, "" for none.
func (w Waiting) Describe(now time.Time) string {
	if w.Count == 0 {
		if w.WatchError != "" {
			return "deferrals unknown: " + w.WatchError
		}
		return ""
	}
	s := fmt.Sprintf("%d deferred", w.Count)
	if !w.Until.IsZero() {
		if left := w.Until.Sub(now); left > 0 {
			s += fmt.Sprintf(" until %s (in %s)", w.Until.Local().Format("15:04:05"), left.Round(time.Second))
		} else {
			s += fmt.Sprintf(" until %s (due)", w.Until.Local().Format("15:04:05"))
		}
	}
	if w.Reason != "" {
		s += ": " + w.Reason
	}
	if w.WatchError != "" {
		s += " (perhaps more: deferrals unknown since " + w.WatchError + ")"
	}
	return s
}

// ETA estimates when a batch finishes from its recent completion rate
// and, for deferred requests, the time they were deferred to: the later
// of the two. ok is false while nothing allows an estimate.
type ETA struct {
	samples []etaSample
}

type etaSample struct {
	at   time.Time
	done int
}

// etaWindow is how far back the completion rate is measured: long enough
// to smooth bursts, short enough to follow a batch that speeds up once
// its deferral ends.
const etaWindow = 30 * time.Second

// Observe records done results at now.
func (e *ETA) Observe(now time.Time, done int) {
	e.samples = append(e.samples, etaSample{now, done})
	for len(e.samples) > 2 && now.Sub(e.samples[1].at) > etaWindow {
		e.samples = e.samples[1:]
	}
}

// Estimate is the remaining time for total results, given the deferred
// requests still waiting.
func (e *ETA) Estimate(now time.Time, total int, w Waiting) (time.Duration, bool) {
	var byRate time.Duration
	rateOK := false
	if n := len(e.samples); n >= 2 {
		first, last := e.samples[0], e.samples[n-1]
		if dn, dt := last.done-first.done, last.at.Sub(first.at); dn > 0 && dt > 0 {
			rate := float64(dn) / dt.Seconds()
			byRate = time.Duration(float64(total-last.done) / rate * float64(time.Second))
			rateOK = true
		}
	}
	var byDefer time.Duration
	if w.Count > 0 && !w.Until.IsZero() {
		byDefer = max(0, w.Until.Sub(now))
	}
	if !rateOK && byDefer == 0 {
		return 0, false
	}
	return max(byRate, byDefer), true
}

// Line is the whole progress note: deferral, then ETA.
func Line(now time.Time, done, total int, w Waiting, e *ETA) string {
	var parts []string
	if d := w.Describe(now); d != "" {
		parts = append(parts, d)
	}
	if e != nil && done < total {
		if left, ok := e.Estimate(now, total, w); ok {
			parts = append(parts, "ETA "+left.Round(time.Second).String())
		}
	}
	out := ""
	for i, p := range parts {
		if i > 0 {
			out += "; "
		}
		out += p
	}
	return out
}

// Has adapts a result map for Pending.
func Has(results map[string]schemas.Result) func(string) bool {
	return func(id string) bool { _, ok := results[id]; return ok }
}
