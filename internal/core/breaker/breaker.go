// Package breaker owns the per-worker circuit breakers of the routing layer.
// A breaker is fed by three signals: result errors, latency outliers (the
// observed completion time against the placement's prediction for that GPU
// generation) and heartbeat staleness. It moves closed → open → half-open →
// closed (or back to open) and reports every change as a Transition with its
// reason, so the router can publish it as an event.
//
// Everything here is pure and deterministic: time is passed in, nothing
// sleeps, nothing reads a clock. The router calls Observe for every result,
// Heartbeat for every heartbeat, Tick on its own clock, and Allow while
// filtering placement candidates.
package breaker

import (
	"fmt"
	"sort"
	"time"
)

// State is a breaker's state.
type State int

// Breaker states.
const (
	Closed State = iota
	Open
	HalfOpen
)

func (s State) String() string {
	switch s {
	case Closed:
		return "closed"
	case Open:
		return "open"
	case HalfOpen:
		return "half_open"
	}
	return fmt.Sprintf("state(%d)", int(s))
}

// Config tunes every breaker of a Set. The zero value of a field means its
// default (see Defaults).
type Config struct {
	// Window is how many recent outcomes the failure rate is computed over.
	Window int
	// MinSamples is how many outcomes the window needs before the rate may
	// trip the breaker; below it only ConsecutiveFailures trips.
	MinSamples int
	// FailureRate trips the breaker when the share of bad outcomes (errors
	// and latency outliers) in the window reaches it.
	FailureRate float64
	// ConsecutiveFailures trips the breaker regardless of the window.
	ConsecutiveFailures int
	// OutlierFactor: an outcome is a latency outlier when observed/predicted
	// exceeds it. Predictions come from the GPU generation's roofline, so a
	// healthy worker sits near 1; a throttled or sick one drifts above.
	OutlierFactor float64
	// IgnoreLatency turns latency outliers off: only errors and silence
	// open a breaker (a baseline router, whose own system ejects no worker
	// for being slow, runs so).
	IgnoreLatency bool
	// OutlierSlack is the least excess over the prediction that can make
	// an outlier: short requests' times are dominated by bus and queueing
	// jitter, and 3 × a 30 ms prediction says nothing about the GPU.
	OutlierSlack time.Duration
	// StaleAfter opens the breaker of a worker whose last heartbeat is older.
	StaleAfter time.Duration
	// OpenFor is the first cool-down before half-open; every failed probe
	// round doubles it up to MaxOpenFor, so a worker that stays bad gets an
	// ever smaller trickle of probes.
	OpenFor    time.Duration
	MaxOpenFor time.Duration
	// ProbeInterval is the minimum spacing of half-open probes: at most one
	// request per interval reaches a half-open worker.
	ProbeInterval time.Duration
	// Probes is how many consecutive probe successes close the breaker.
	Probes int
}

// Defaults are tuned so a degraded worker receives under 5 % of traffic
// within 10 s of going bad: it trips after a handful of its own requests,
// then sees nothing for OpenFor and at most one probe per ProbeInterval,
// and every failed probe doubles the quiet period.
func Defaults() Config {
	return Config{
		Window:              20,
		MinSamples:          5,
		FailureRate:         0.5,
		ConsecutiveFailures: 5,
		OutlierFactor:       3,
		OutlierSlack:        time.Second,
		StaleAfter:          3 * time.Second,
		OpenFor:             5 * time.Second,
		MaxOpenFor:          60 * time.Second,
		ProbeInterval:       time.Second,
		Probes:              3,
	}
}

func (c Config) withDefaults() Config {
	d := Defaults()
	if c.Window <= 0 {
		c.Window = d.Window
	}
	if c.MinSamples <= 0 {
		c.MinSamples = d.MinSamples
	}
	if c.MinSamples > c.Window {
		c.MinSamples = c.Window
	}
	if c.FailureRate <= 0 {
		c.FailureRate = d.FailureRate
	}
	if c.ConsecutiveFailures <= 0 {
		c.ConsecutiveFailures = d.ConsecutiveFailures
	}
	if c.OutlierFactor <= 0 {
		c.OutlierFactor = d.OutlierFactor
	}
	if c.OutlierSlack <= 0 {
		c.OutlierSlack = d.OutlierSlack
	}
	if c.StaleAfter <= 0 {
		c.StaleAfter = d.StaleAfter
	}
	if c.OpenFor <= 0 {
		c.OpenFor = d.OpenFor
	}
	if c.MaxOpenFor < c.OpenFor {
		c.MaxOpenFor = max(d.MaxOpenFor, c.OpenFor)
	}
	if c.ProbeInterval <= 0 {
		c.ProbeInterval = d.ProbeInterval
	}
	if c.Probes <= 0 {
		c.Probes = d.Probes
	}
	return c
}

// Outcome is what happened to one request placed on a worker.
type Outcome struct {
	// Code is the error code of a failed request (schemas.Code*); empty for
	// a success. Only failures the worker is to blame for should be fed
	// here: a request rejected for its own content says nothing about the
	// GPU.
	Code string
	// ObservedSeconds is the request's time on the worker; PredictedSeconds
	// is the placement's prediction (Dispatch.PredictedSeconds). Either zero
	// disables the outlier check for this outcome.
	ObservedSeconds  float64
	PredictedSeconds float64
}

// Cause names why a transition happened.
type Cause string

// Transition causes.
const (
	CauseErrors    Cause = "errors"        // failure rate or consecutive failures
	CauseSlow      Cause = "latency"       // latency outliers pushed the rate over
	CauseStale     Cause = "stale"         // heartbeat older than StaleAfter
	CauseCooldown  Cause = "cooldown"      // open long enough: start probing
	CauseHeartbeat Cause = "heartbeat"     // a stale worker is heard from again
	CauseProbeOK   Cause = "probes_passed" // enough probes succeeded
	CauseProbeFail Cause = "probe_failed"  // a probe failed while half-open
)

// Transition is one state change, ready to become an event.
type Transition struct {
	Worker string    `json:"worker_id"`
	From   State     `json:"from"`
	To     State     `json:"to"`
	At     time.Time `json:"at"`
	Cause  Cause     `json:"cause"`
	Reason string    `json:"reason"`
	// OpenUntil is when an open breaker starts probing; zero otherwise.
	OpenUntil time.Time `json:"open_until,omitzero"`
}

// EventKind is the event kind a router publishes the transition under:
// breaker_open, breaker_half_open or breaker_closed.
func (t Transition) EventKind() string { return "breaker_" + t.To.String() }

// Status is one breaker's externally visible state.
type Status struct {
	Worker      string    `json:"worker_id"`
	State       State     `json:"state"`
	Since       time.Time `json:"since"`
	Reason      string    `json:"reason,omitempty"`
	FailureRate float64   `json:"failure_rate"`
	Samples     int       `json:"samples"`
	OpenUntil   time.Time `json:"open_until,omitzero"`
}

// breaker is one worker's state machine.
type breaker struct {
	state  State
	since  time.Time
	reason string

	// ring of recent outcomes: true means bad.
	ring        []bool
	next, count int
	bad         int
	consecutive int
	slowInRing  int
	slowRing    []bool

	lastHeartbeat time.Time
	openUntil     time.Time
	openFor       time.Duration
	staleOpen     bool

	lastProbe  time.Time
	probesOK   int
	inProbe    int
	everProbed bool

	// ratio is a moving average of observed/predicted completion time over
	// this worker's answered requests, ratioN how many fed it.
	ratio  float64
	ratioN int
}

func newBreaker(c Config, now time.Time) *breaker {
	return &breaker{state: Closed, since: now, ring: make([]bool, c.Window), slowRing: make([]bool, c.Window), openFor: c.OpenFor}
}

func (b *breaker) record(bad, slow bool) {
	if b.count == len(b.ring) {
		if b.ring[b.next] {
			b.bad--
		}
		if b.slowRing[b.next] {
			b.slowInRing--
		}
	} else {
		b.count++
	}
	b.ring[b.next], b.slowRing[b.next] = bad, slow
	if bad {
		b.bad++
	}
	if slow {
		b.slowInRing++
	}
	b.next = (b.next + 1) % len(b.ring)
	if bad {
		b.consecutive++
	} else {
		b.consecutive = 0
	}
}

func (b *breaker) resetWindow() {
	clear(b.ring)
	clear(b.slowRing)
	b.next, b.count, b.bad, b.slowInRing, b.consecutive = 0, 0, 0, 0, 0
}

func (b *breaker) rate() float64 {
	if b.count == 0 {
		return 0
	}
	return float64(b.bad) / float64(b.count)
}

func (b *breaker) move(worker string, to State, now time.Time, cause Cause, reason string) Transition {
	t := Transition{Worker: worker, From: b.state, To: to, At: now, Cause: cause, Reason: reason}
	b.state, b.since, b.reason = to, now, reason
	b.probesOK, b.inProbe = 0, 0
	if to == Open {
		b.openUntil = now.Add(b.openFor)
		t.OpenUntil = b.openUntil
	} else {
		b.openUntil = time.Time{}
	}
	if to != Open {
		b.staleOpen = false
	}
	return t
}

// Set holds one breaker per worker. It is not safe for concurrent use; the
// router owns it from one goroutine (or behind its own lock).
type Set struct {
	cfg      Config
	breakers map[string]*breaker
	// fleetRatio is the median of the workers' observed/predicted ratios,
	// refreshed on Tick: the bar a latency outlier is measured against.
	fleetRatio float64
	ratios     []float64 // Tick's scratch
}

// ratioAlpha weighs a new outcome in a worker's moving observed/predicted
// ratio; minRatioSamples is how many outcomes make it count in the median.
const (
	ratioAlpha      = 0.2
	minRatioSamples = 3
)

// NewSet returns an empty Set; zero Config fields take their defaults.
func NewSet(cfg Config) *Set {
	return &Set{cfg: cfg.withDefaults(), breakers: map[string]*breaker{}}
}

func (s *Set) get(worker string, now time.Time) *breaker {
	b, ok := s.breakers[worker]
	if !ok {
		b = newBreaker(s.cfg, now)
		s.breakers[worker] = b
	}
	return b
}

// Allow reports whether the router may place a request on worker now. A
// closed (or unknown) worker is allowed; an open one is not; a half-open one
// admits one probe per ProbeInterval while fewer than Probes are in flight.
// An admitted probe is counted, so call Allow for the candidate that is
// actually picked — or use Allowed to filter and Allow to commit.
func (s *Set) Allow(worker string, now time.Time) bool {
	b, ok := s.breakers[worker]
	if !ok {
		return true
	}
	if !s.allowed(b, now) {
		return false
	}
	if b.state == HalfOpen {
		b.inProbe++
		b.lastProbe = now
		b.everProbed = true
	}
	return true
}

// Allowed is Allow without committing a probe: it answers whether Allow
// would say yes now. Use it to filter candidates before picking one.
func (s *Set) Allowed(worker string, now time.Time) bool {
	b, ok := s.breakers[worker]
	return !ok || s.allowed(b, now)
}

func (s *Set) allowed(b *breaker, now time.Time) bool {
	switch b.state {
	case Closed:
		return true
	case HalfOpen:
		if b.inProbe >= s.cfg.Probes-b.probesOK {
			return false
		}
		return !b.everProbed || !now.Before(b.lastProbe.Add(s.cfg.ProbeInterval))
	}
	return false
}

// Observe feeds one request outcome for worker and returns the transition it
// caused, if any.
func (s *Set) Observe(worker string, o Outcome, now time.Time) (Transition, bool) {
	b := s.get(worker, now)
	failed := o.Code != ""
	slow := false
	ratio := 0.0
	if o.PredictedSeconds > 0 && o.ObservedSeconds > 0 && !s.cfg.IgnoreLatency {
		// A latency outlier is slow against the fleet, not against the
		// prediction alone: when the whole fleet runs 4x its predictions
		// (an overload the cost model underrates), every worker is as slow
		// as the others and ejecting them would turn load into an outage.
		ratio = o.ObservedSeconds / o.PredictedSeconds
		expect := o.PredictedSeconds * max(1, s.fleetRatio)
		slow = ratio > s.cfg.OutlierFactor*max(1, s.fleetRatio) && o.ObservedSeconds-expect > s.cfg.OutlierSlack.Seconds()
		if !failed {
			if b.ratioN == 0 {
				b.ratio = ratio
			} else {
				b.ratio += ratioAlpha * (ratio - b.ratio)
			}
			b.ratioN++
		}
	}
	bad := failed || slow
	switch b.state {
	case Closed:
		b.record(bad, slow && !failed)
		if !bad {
			return Transition{}, false
		}
		var reason string
		tripped := false
		if b.consecutive >= s.cfg.ConsecutiveFailures {
			tripped = true
			reason = fmt.Sprintf("%d consecutive failures", b.consecutive)
		} else if b.count >= s.cfg.MinSamples && b.rate() >= s.cfg.FailureRate {
			tripped = true
			reason = fmt.Sprintf("failure rate %.0f%% over last %d results (threshold %.0f%%)", 100*b.rate(), b.count, 100*s.cfg.FailureRate)
		}
		if !tripped {
			return Transition{}, false
		}
		cause := CauseErrors
		if b.slowInRing*2 > b.bad {
			cause = CauseSlow
		}
		reason += "; last: " + describe(o, ratio, s.cfg.OutlierFactor*max(1, s.fleetRatio))
		b.openFor = s.cfg.OpenFor
		b.resetWindow()
		return b.move(worker, Open, now, cause, reason), true
	case HalfOpen:
		if b.inProbe > 0 {
			b.inProbe--
		}
		if bad {
			b.openFor = min(2*b.openFor, s.cfg.MaxOpenFor)
			cause := CauseProbeFail
			return b.move(worker, Open, now, cause, "probe failed: "+describe(o, ratio, s.cfg.OutlierFactor*max(1, s.fleetRatio))), true
		}
		b.probesOK++
		if b.probesOK >= s.cfg.Probes {
			b.openFor = s.cfg.OpenFor
			b.resetWindow()
			return b.move(worker, Closed, now, CauseProbeOK, fmt.Sprintf("%d probes succeeded", s.cfg.Probes)), true
		}
		return Transition{}, false
	}
	// Open: a late result from before the trip says nothing new.
	return Transition{}, false
}

func describe(o Outcome, ratio, factor float64) string {
	if o.Code != "" {
		return "error " + o.Code
	}
	if ratio > factor {
		return fmt.Sprintf("latency %.2fs is %.1fx the predicted %.2fs (outlier bar %.1fx, the fleet's median ratio times the outlier factor)", o.ObservedSeconds, ratio, o.PredictedSeconds, factor)
	}
	return "ok"
}

// Heartbeat records that worker was heard from at sentAt (use the receive
// time if the sender's clock is not trusted). A worker whose breaker opened
// for staleness goes to half-open: it is back, and probes decide whether it
// is healthy.
func (s *Set) Heartbeat(worker string, sentAt, now time.Time) (Transition, bool) {
	b := s.get(worker, now)
	if sentAt.After(b.lastHeartbeat) {
		b.lastHeartbeat = sentAt
	}
	if b.state == Open && b.staleOpen && now.Sub(b.lastHeartbeat) <= s.cfg.StaleAfter {
		return b.move(worker, HalfOpen, now, CauseHeartbeat, "heartbeat resumed"), true
	}
	return Transition{}, false
}

// Silent reports whether worker's breaker is open because the worker
// stopped heartbeating and has not been heard from since: whatever it
// held is gone with it.
func (s *Set) Silent(worker string) bool {
	b, ok := s.breakers[worker]
	return ok && b.state == Open && b.staleOpen
}

// Expect starts the staleness clock for a worker this router has work on
// but has never heard from (a new leader adopting an earlier router's
// dispatches): if no heartbeat arrives within StaleAfter of now, the
// worker is declared silent like any other.
func (s *Set) Expect(worker string, now time.Time) {
	if b := s.get(worker, now); b.lastHeartbeat.IsZero() {
		b.lastHeartbeat = now
	}
}

// Forget drops a worker's breaker (a worker that left the fleet for good).
func (s *Set) Forget(worker string) { delete(s.breakers, worker) }

// Tick applies the passage of time: breakers of workers whose heartbeat is
// stale open, and open breakers whose cool-down is over go half-open. The
// router calls it on its clock (every heartbeat sweep, say each second).
// Transitions come back in worker order.
func (s *Set) Tick(now time.Time) []Transition {
	s.refreshFleetRatio()
	var out []Transition
	for _, w := range s.workers() {
		b := s.breakers[w]
		stale := !b.lastHeartbeat.IsZero() && now.Sub(b.lastHeartbeat) > s.cfg.StaleAfter
		switch {
		case stale && b.state != Open:
			b.openFor = s.cfg.OpenFor
			t := b.move(w, Open, now, CauseStale, fmt.Sprintf("no heartbeat for %s (stale after %s)", now.Sub(b.lastHeartbeat).Round(time.Millisecond), s.cfg.StaleAfter))
			b.staleOpen = true
			b.resetWindow()
			out = append(out, t)
		case b.state == Open && !stale && !now.Before(b.openUntil):
			out = append(out, b.move(w, HalfOpen, now, CauseCooldown, fmt.Sprintf("open for %s; probing", b.openFor)))
		case b.state == HalfOpen && b.inProbe > 0 && now.Sub(b.lastProbe) > s.cfg.MaxOpenFor:
			// A probe whose result never came back (the worker lost it)
			// must not wedge the breaker half-open with no probe slot.
			b.openFor = min(2*b.openFor, s.cfg.MaxOpenFor)
			out = append(out, b.move(w, Open, now, CauseProbeFail, fmt.Sprintf("probe unanswered for %s", now.Sub(b.lastProbe).Round(time.Millisecond))))
		}
	}
	return out
}

// refreshFleetRatio takes the median of the workers' moving ratios (those
// with enough outcomes, breaker closed): a slow worker is one of a few, so
// the median is the healthy fleet's.
func (s *Set) refreshFleetRatio() {
	s.ratios = s.ratios[:0]
	for _, b := range s.breakers {
		if b.ratioN >= minRatioSamples && b.state == Closed {
			s.ratios = append(s.ratios, b.ratio)
		}
	}
	if len(s.ratios) == 0 {
		s.fleetRatio = 0
		return
	}
	sort.Float64s(s.ratios)
	s.fleetRatio = s.ratios[len(s.ratios)/2]
}

func (s *Set) workers() []string {
	ws := make([]string, 0, len(s.breakers))
	for w := range s.breakers {
		ws = append(ws, w)
	}
	sort.Strings(ws)
	return ws
}

// States returns every breaker's status, ordered by worker.
func (s *Set) States() []Status {
	out := make([]Status, 0, len(s.breakers))
	for _, w := range s.workers() {
		b := s.breakers[w]
		out = append(out, Status{Worker: w, State: b.state, Since: b.since, Reason: b.reason, FailureRate: b.rate(), Samples: b.count, OpenUntil: b.openUntil})
	}
	return out
}

// State returns one worker's state; unknown workers are closed.
func (s *Set) State(worker string) State {
	if b, ok := s.breakers[worker]; ok {
		return b.state
	}
	return Closed
}
