package controller

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/switchyard-ai/switchyard/internal/core/control"
	"github.com/switchyard-ai/switchyard/schemas"
	"github.com/switchyard-ai/switchyard/services/svc"
	"github.com/switchyard-ai/switchyard/subjects"
)

// ScalerConfig configures a local scaler. Add and Stop are the process's
// worker lifecycle (services/stack's AddWorker and StopWorker in
// `switchyard up` and `demo`); passing functions keeps this package free
// of a dependency on the stack that runs it.
type ScalerConfig struct {
	// Pools maps pool keys to what a new worker of that pool runs.
	Pools []control.Pool
	// Add starts one worker of the pool and returns its id; it must not
	// block on the worker's readiness (the worker joins by heartbeat). A
	// pool with a fixed role (p.Role) starts its worker with that role
	// and a KV link, or the worker's heartbeats join no pool of it.
	Add func(p control.Pool) (string, error)
	// Stop drains a worker (it finishes what it holds) and returns once it
	// has exited.
	Stop func(id string) error
	// DrainGrace is how long a worker announced draining keeps consuming
	// before it is stopped, so dispatches routers sent before they saw the
	// announcement still reach it (default 1 s: several heartbeat
	// deliveries and dispatch latencies on one LAN).
	DrainGrace time.Duration
	// StaleAfter forgets a worker whose heartbeats stopped (default 5 s);
	// StartTimeout forgets a started worker that never heartbeated
	// (default 2 min).
	StaleAfter, StartTimeout time.Duration
	Log                      *slog.Logger
}

// Scaler acts on sy.ctl.replicas.<pool>: it starts workers up to the
// desired count and drains the idlest ones down to it.
type Scaler struct {
	nc  *nats.Conn
	cfg ScalerConfig
	now func() time.Time

	mu       sync.Mutex
	pools    map[string]control.Pool
	seen     map[string]scaled // by worker id, from heartbeats
	starting map[string]started
	stopping map[string]bool
	stops    sync.WaitGroup
}

type scaled struct {
	pool string
	hb   schemas.Heartbeat
	at   time.Time
}

type started struct {
	pool string
	at   time.Time
}

// NewScaler builds a scaler on nc.
func NewScaler(nc *nats.Conn, cfg ScalerConfig) (*Scaler, error) {
	if cfg.Add == nil || cfg.Stop == nil {
		return nil, fmt.Errorf("scaler: Add and Stop are required")
	}
	if cfg.StaleAfter <= 0 {
		cfg.StaleAfter = 5 * time.Second
	}
	if cfg.DrainGrace <= 0 {
		cfg.DrainGrace = time.Second
	}
	if cfg.StartTimeout <= 0 {
		cfg.StartTimeout = 2 * time.Minute
	}
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	s := &Scaler{nc: nc, cfg: cfg, now: time.Now, pools: map[string]control.Pool{},
		seen: map[string]scaled{}, starting: map[string]started{}, stopping: map[string]bool{}}
	for _, p := range cfg.Pools {
		s.pools[p.Key()] = p
	}
	return s, nil
}

// Run acts on desired replicas until ctx ends, then waits for the drains
// it started.
func (s *Scaler) Run(ctx context.Context) error {
	hb, err := s.nc.Subscribe(subjects.HeartbeatAll, s.onHeartbeat)
	if err != nil {
		return fmt.Errorf("scaler heartbeats: %w", err)
	}
	defer hb.Unsubscribe()
	rs, err := s.nc.Subscribe(control.ReplicasAll, func(m *nats.Msg) {
		var r control.ReplicasMsg
		if err := svc.Decode(m.Header, m.Data, &r); err != nil {
			return
		}
		s.Reconcile(r.Pool, r.Desired)
	})
	if err != nil {
		return fmt.Errorf("scaler replicas: %w", err)
	}
	defer rs.Unsubscribe()
	<-ctx.Done()
	s.stops.Wait()
	return nil
}

func (s *Scaler) onHeartbeat(m *nats.Msg) {
	var hb schemas.Heartbeat
	if err := svc.Decode(m.Header, m.Data, &hb); err != nil || hb.WorkerID == "" || len(hb.Models) == 0 {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stopping[hb.WorkerID] {
		return
	}
	// A worker with a fixed role belongs to its role's pool where one is
	// configured (a prefill and a decode pool of one GPU are two pools).
	pool := control.HeartbeatPool(&hb, func(k string) bool { _, ok := s.pools[k]; return ok })
	s.seen[hb.WorkerID] = scaled{pool: pool, hb: hb, at: s.now()}
	delete(s.starting, hb.WorkerID)
}

// Starting reports workers started but not yet heartbeating, per pool key:
// the controller counts them as provisioned.
func (s *Scaler) Starting() map[string]int {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := map[string]int{}
	for _, st := range s.starting {
		out[st.pool]++
	}
	return out
}

// Reconcile moves the pool toward desired workers.
func (s *Scaler) Reconcile(pool string, desired int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	p, ok := s.pools[pool]
	if !ok || desired < 0 {
		return
	}
	now := s.now()
	var live []scaled
	for id, w := range s.seen {
		if now.Sub(w.at) > s.cfg.StaleAfter {
			delete(s.seen, id)
			continue
		}
		if w.pool == pool && !w.hb.Draining {
			live = append(live, w)
		}
	}
	pending := 0
	for id, st := range s.starting {
		if now.Sub(st.at) > s.cfg.StartTimeout {
			s.cfg.Log.Warn("started worker never heartbeated", "worker", id, "pool", pool)
			delete(s.starting, id)
			continue
		}
		if st.pool == pool {
			pending++
		}
	}
	hbs := make([]schemas.Heartbeat, len(live))
	for i, w := range live {
		hbs[i] = w.hb
	}
	start, drain := control.Reconcile(hbs, pending, desired)
	for ; start > 0; start-- {
		id, err := s.cfg.Add(p)
		if err != nil {
			s.cfg.Log.Error("scale up", "pool", pool, "err", err)
			return
		}
		s.starting[id] = started{pool: pool, at: now}
		s.cfg.Log.Info("worker started", "pool", pool, "worker", id, "desired", desired)
	}
	for _, id := range drain {
		s.stopping[id] = true
		delete(s.seen, id)
		s.stops.Add(1)
		go func() {
			defer s.stops.Done()
			s.cfg.Log.Info("draining worker", "pool", pool, "worker", id, "desired", desired)
			s.drain(id)
			if err := s.cfg.Stop(id); err != nil {
				s.cfg.Log.Warn("stop worker", "worker", id, "err", err)
			}
			s.mu.Lock()
			delete(s.stopping, id)
			s.mu.Unlock()
		}()
	}
}

// drainingReply is the worker's answer to a drain request
// (services/worker/control.go).
const drainingReply = "draining"

// drain asks the worker to announce itself draining and waits the grace
// period. A worker that does not answer is stopped anyway after the grace:
// its own drain on stop still finishes what it holds.
func (s *Scaler) drain(id string) {
	// The CONTROL stream also answers (with a publish ack, since it stores
	// sy.ctl.>), so only the worker's own reply counts.
	if m, err := s.nc.Request(control.DrainSubject(id), nil, 2*time.Second); err != nil || string(m.Data) != drainingReply {
		s.cfg.Log.Warn("worker did not confirm draining; stopping after the grace period anyway", "worker", id, "err", err)
	}
	time.Sleep(s.cfg.DrainGrace)
}
