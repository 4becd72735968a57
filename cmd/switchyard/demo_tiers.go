package main

import (
	"fmt"
	"io"
	"sort"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/switchyard-ai/switchyard/schemas"
	"github.com/switchyard-ai/switchyard/services/svc"
	"github.com/switchyard-ai/switchyard/subjects"
)

// The demo's weight-tier timeline (issue 30): with --sleep-on-release the
// controller may keep a replica past its release hold asleep in host
// memory instead of releasing it, and wake it when its level is needed
// again. The timeline shows that from two sides: the controller's warmth
// commands as the workers' weights events report them once carried out
// (with the controller's reason), and each worker's weight state as its
// heartbeats report it. A replica is asleep from its carried-out sleep
// command (or its first sleeping heartbeat) until a heartbeat shows it
// loading or serving again — woken by the controller or by a request
// placed on it; the wake's own time is read from the heartbeats, from the
// first loading one to the first serving one, not assumed. A sleeping
// worker still runs and holds its GPU: the stack's GPU-hours count it, and
// asleep_gpu_hours says how much of them were spent asleep.

// tierPoint is one line of the timeline.
type tierPoint struct {
	AtSeconds float64 `json:"t_s"`
	Worker    string  `json:"worker"`
	// What is "command" (a warmth command carried out, with its reason) or
	// "state" (the worker's heartbeat reports a new weight state).
	What   string `json:"what"`
	From   string `json:"from,omitempty"`
	State  string `json:"state"`
	Tier   string `json:"tier,omitempty"`
	Reason string `json:"reason,omitempty"`
	// Woken marks the state line that serves again after a sleep;
	// WakeSeconds is how long the wake took by the worker's heartbeats
	// (0: within one beat).
	Woken       bool    `json:"woken,omitempty"`
	WakeSeconds float64 `json:"wake_s,omitempty"`
}

// tierStats is what the sleeping tier did over the run.
type tierStats struct {
	Sleeps int `json:"sleeps"`
	Wakes  int `json:"wakes"`
	// WakeSecondsMax is the longest wake seen (heartbeats).
	WakeSecondsMax float64 `json:"wake_s_max,omitempty"`
	// AsleepGPUHours are GPU-hours spent with a model asleep, all of
	// them inside the run's GPU-hours (the GPU stays held).
	AsleepGPUHours float64     `json:"asleep_gpu_hours"`
	Timeline       []tierPoint `json:"timeline,omitempty"`
}

type tierWorker struct {
	state      string
	tp         int
	asleepFrom time.Duration // when its current sleep began (-1: awake)
	wakeFrom   time.Duration // its first loading beat after a sleep (-1: not waking)
	asleepSecs float64       // GPU-seconds asleep so far
}

func (tw *tierWatch) worker(id string, tp int) *tierWorker {
	w := tw.workers[id]
	if w == nil {
		w = &tierWorker{tp: max(1, tp), asleepFrom: -1, wakeFrom: -1}
		tw.workers[id] = w
	}
	return w
}

// tierWatch follows weights events and heartbeats.
type tierWatch struct {
	mu      sync.Mutex
	start   time.Time
	workers map[string]*tierWorker
	stats   tierStats
	subs    []*nats.Subscription
}

// watchTiers subscribes on nc; stop returns the stats.
func watchTiers(nc *nats.Conn) (*tierWatch, error) {
	tw := &tierWatch{start: time.Now(), workers: map[string]*tierWorker{}}
	hb, err := nc.Subscribe(subjects.HeartbeatAll, func(m *nats.Msg) {
		var h schemas.Heartbeat
		if svc.Decode(m.Header, m.Data, &h) != nil || len(h.Models) == 0 {
			return
		}
		tw.heartbeat(time.Since(tw.start), h.WorkerID, max(1, h.TP), h.Models[0])
	})
	if err != nil {
		return nil, fmt.Errorf("demo: heartbeats: %w", err)
	}
	ev, err := nc.Subscribe(subjects.EventAll, func(m *nats.Msg) {
		evs, err := svc.DecodeEvents(m.Header, m.Data)
		if err != nil {
			return
		}
		for _, e := range evs {
			if e.Kind == "weights" {
				tw.command(time.Since(tw.start), e)
			}
		}
	})
	if err != nil {
		hb.Unsubscribe()
		return nil, fmt.Errorf("demo: events: %w", err)
	}
	tw.subs = []*nats.Subscription{hb, ev}
	return tw, nil
}

func (tw *tierWatch) heartbeat(at time.Duration, id string, tp int, m schemas.ModelState) {
	tw.mu.Lock()
	defer tw.mu.Unlock()
	fresh := tw.workers[id] == nil
	w := tw.worker(id, tp)
	if fresh {
		w.state = m.State
	}
	if m.State == w.state {
		if m.State == schemas.WeightSleeping {
			tw.fallAsleep(w, at)
		}
		return
	}
	p := tierPoint{AtSeconds: at.Seconds(), Worker: id, What: "state", From: w.state, State: m.State, Tier: m.Tier}
	switch m.State {
	case schemas.WeightSleeping:
		tw.fallAsleep(w, at)
	case schemas.WeightLoading, schemas.WeightHot:
		if w.asleepFrom >= 0 {
			w.asleepSecs += (at - w.asleepFrom).Seconds() * float64(w.tp)
			w.asleepFrom, w.wakeFrom = -1, at
		}
		if m.State == schemas.WeightHot && w.wakeFrom >= 0 {
			// Heartbeats come about once a second: a replica asleep one
			// beat and serving the next woke within that beat.
			if w.state == schemas.WeightLoading {
				p.WakeSeconds = (at - w.wakeFrom).Seconds()
			}
			p.Woken = true
			tw.stats.Wakes++
			tw.stats.WakeSecondsMax = max(tw.stats.WakeSecondsMax, p.WakeSeconds)
			w.wakeFrom = -1
		}
	}
	w.state = m.State
	tw.stats.Timeline = append(tw.stats.Timeline, p)
}

// fallAsleep starts a sleep at at, once: the command's event and the
// worker's first sleeping heartbeat report the same one. Callers hold
// tw.mu.
func (tw *tierWatch) fallAsleep(w *tierWorker, at time.Duration) {
	if w.asleepFrom < 0 {
		w.asleepFrom = at
		tw.stats.Sleeps++
	}
}

func (tw *tierWatch) command(at time.Duration, e schemas.Event) {
	state, _ := e.Fields["state"].(string)
	tw.mu.Lock()
	defer tw.mu.Unlock()
	if state == schemas.WeightSleeping {
		tw.fallAsleep(tw.worker(e.WorkerID, 0), at)
	}
	tw.stats.Timeline = append(tw.stats.Timeline, tierPoint{AtSeconds: at.Seconds(), Worker: e.WorkerID, What: "command", State: state, Reason: e.Reason})
}

// stop ends the watch and returns the stats, the time asleep counted to
// now for workers still asleep.
func (tw *tierWatch) stop() tierStats {
	for _, s := range tw.subs {
		s.Unsubscribe()
	}
	tw.mu.Lock()
	defer tw.mu.Unlock()
	now := time.Since(tw.start)
	secs := 0.0
	for _, w := range tw.workers {
		secs += w.asleepSecs
		if w.asleepFrom >= 0 {
			secs += (now - w.asleepFrom).Seconds() * float64(w.tp)
		}
	}
	out := tw.stats
	out.AsleepGPUHours = secs / 3600
	out.Timeline = append([]tierPoint(nil), tw.stats.Timeline...)
	sort.SliceStable(out.Timeline, func(i, j int) bool { return out.Timeline[i].AtSeconds < out.Timeline[j].AtSeconds })
	return out
}

func printTiers(w io.Writer, s tierStats) {
	fmt.Fprintf(w, "  sleeping tier: %d sleeps  %d wakes  longest wake %.1fs  GPU-hours asleep %.4f (counted in GPU-hours provisioned: the GPU stays held)\n",
		s.Sleeps, s.Wakes, s.WakeSecondsMax, s.AsleepGPUHours)
	for _, p := range s.Timeline {
		switch p.What {
		case "command":
			fmt.Fprintf(w, "    %7.1fs  %-10s command %-8s  %s\n", p.AtSeconds, p.Worker, p.State, p.Reason)
		default:
			wake := ""
			switch {
			case p.Woken && p.WakeSeconds == 0:
				wake = "  (woken within one heartbeat)"
			case p.Woken:
				wake = fmt.Sprintf("  (woken in %.1fs by its heartbeats)", p.WakeSeconds)
			}
			fmt.Fprintf(w, "    %7.1fs  %-10s %s → %s  tier %s%s\n", p.AtSeconds, p.Worker, p.From, p.State, p.Tier, wake)
		}
	}
}
