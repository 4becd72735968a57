// Package stack runs a whole Switchyard in one process: an embedded
// JetStream server, the admitter, the router and N simulated GPU workers,
// each on its own NATS connection exactly as if they were separate
// processes. `switchyard up`, `switchyard demo` and end-to-end tests use it.
package stack

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/switchyard-ai/switchyard/internal/adapter/bus"
	"github.com/switchyard-ai/switchyard/internal/adapter/cachestore"
	"github.com/switchyard-ai/switchyard/internal/adapter/config"
	"github.com/switchyard-ai/switchyard/internal/adapter/workflowstore"
	"github.com/switchyard-ai/switchyard/internal/core/admission"
	"github.com/switchyard-ai/switchyard/internal/core/catalog"
	"github.com/switchyard-ai/switchyard/internal/core/perf"
	"github.com/switchyard-ai/switchyard/internal/core/routing"
	"github.com/switchyard-ai/switchyard/schemas"
	"github.com/switchyard-ai/switchyard/services/admitter"
	"github.com/switchyard-ai/switchyard/services/controller"
	"github.com/switchyard-ai/switchyard/services/router"
	"github.com/switchyard-ai/switchyard/services/svc"
	"github.com/switchyard-ai/switchyard/services/worker"
	"github.com/switchyard-ai/switchyard/subjects"
)

// WorkerSpec describes one simulated worker.
type WorkerSpec struct {
	GPU   string
	Model string
	Dtype string
	TP    int
	// Backend is "sim" (default) or "openai" with OpenAIURL: a worker that
	// fronts a real OpenAI-compatible server.
	Backend   string
	OpenAIURL string
	// MaxConcurrent and EngineStallAfter are the openai backend's bounds
	// (worker.Config); zero keeps the worker's defaults.
	MaxConcurrent    int
	EngineStallAfter time.Duration
	// InitialWeights is the weight state at start (hot by default); the
	// local scaler starts workers cold, so they pay the load time.
	InitialWeights string
	// JoinAfter provisions the worker now (its GPU time counts from now)
	// but starts it serving, and heartbeating, only after this long: a
	// replica loading its weights before it registers, as the simulator's
	// scaled-up replicas do.
	JoinAfter time.Duration
	// Role and Link are the worker's disaggregation role (schemas.Role*;
	// "" takes everything) and its KV-transfer link (a catalog link name).
	Role, Link string
	// Parked stages other models' weights on the worker, model → tier
	// (worker.Park): GPUs that change model (control.go) switch to them.
	Parked map[string]string
}

// Config configures a stack. The zero value runs three H100 workers serving
// llama-3.1-8b on an in-process server with a temporary store.
type Config struct {
	// Listen exposes the NATS server to outside clients at host:port
	// ("127.0.0.1:0" picks a port); empty keeps it in-process only.
	Listen   string
	StoreDir string
	// Workers is used when Fleet is empty: that many of DefaultWorker.
	Workers int
	Fleet   []WorkerSpec
	// SpeedUp runs simulated GPUs faster than real time.
	SpeedUp     float64
	MetricsAddr string
	// InstantWorkers answer at once with zero GPU time (bench bus).
	InstantWorkers bool
	Logger         *slog.Logger
	Catalog        *catalog.Catalog
	Streams        subjects.StreamOptions
	// Policy names the router's placement policy ("switchyard" or a
	// baseline); empty means switchyard.
	Policy string
	// Tenants is the admitter's tenant profiles file; empty means
	// admitter.Permissive().
	Tenants string
	// Control, when set, runs the controller and a local scaler over the
	// fleet (control.go).
	Control *ControlConfig
	// Routers above 1 runs that many active-active routers instead of one
	// leased router (bench bus --routers).
	Routers int
	// Auth, when set, loads a `switchyard auth` config into the server and
	// connects each service as its own user, so the stack runs under the
	// same permissions a deployment does.
	Auth *Auth
}

// Auth is the server config made by `switchyard auth` and the plain
// passwords of its service users.
type Auth struct {
	ConfigFile string
	// Passwords maps a user to its password; a service with no user of its
	// own (the controller, the stack's own readers) connects as "ops".
	Passwords map[string]string
}

// user is the user service connects as under a.
func (a *Auth) user(service string) (string, string) {
	if pw, ok := a.Passwords[service]; ok {
		return service, pw
	}
	return "ops", a.Passwords["ops"]
}

// DefaultWorker is the worker a bare `switchyard up` starts.
var DefaultWorker = WorkerSpec{GPU: "h100", Model: "llama-3.1-8b", Dtype: "bf16", TP: 1}

// Stack is a running system.
type Stack struct {
	Server      *bus.Server
	URL         string
	MetricsAddr string
	Registry    *svc.Registry
	Catalog     *catalog.Catalog
	Log         *slog.Logger

	cfg    Config
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
	mu     sync.Mutex
	conns  []*nats.Conn
	errs   []error

	workerMu     sync.Mutex
	workers      map[string]context.CancelFunc
	workerDone   map[string]chan struct{}
	nextWorkerID int
	ctl          *controller.Controller
	// provisioned is GPU-seconds held by workers already stopped; started
	// and tp date the running ones, for GPUHours.
	provisioned float64
	started     map[string]time.Time
	tp          map[string]int
}

// Start brings the stack up and returns once every service is consuming.
func Start(ctx context.Context, cfg Config) (*Stack, error) {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Catalog == nil {
		cfg.Catalog = catalog.Default()
	}
	if len(cfg.Fleet) == 0 {
		n := cfg.Workers
		if n <= 0 {
			n = 3
		}
		for i := 0; i < n; i++ {
			cfg.Fleet = append(cfg.Fleet, DefaultWorker)
		}
	}
	scfg := bus.ServerConfig{Listen: cfg.Listen, StoreDir: cfg.StoreDir, Logger: cfg.Logger}
	if cfg.Auth != nil {
		scfg.ConfigFile = cfg.Auth.ConfigFile
	}
	srv, err := bus.StartServer(scfg)
	if err != nil {
		return nil, err
	}
	sctx, cancel := context.WithCancel(ctx)
	s := &Stack{Server: srv, URL: srv.ClientURL(), Registry: &svc.Registry{}, Catalog: cfg.Catalog, Log: cfg.Logger,
		cfg: cfg, ctx: sctx, cancel: cancel, workers: map[string]context.CancelFunc{}, workerDone: map[string]chan struct{}{}}
	fail := func(err error) (*Stack, error) {
		s.Close()
		return nil, err
	}
	nc, err := s.Connect("provisioner")
	if err != nil {
		return fail(err)
	}
	js, err := bus.JetStream(nc)
	if err != nil {
		return fail(err)
	}
	if err := subjects.Provision(ctx, js, cfg.Streams); err != nil {
		return fail(err)
	}
	adm, err := s.shell("admitter", "admitter-1")
	if err != nil {
		return fail(err)
	}
	var tenants *admission.Tenants
	if cfg.Tenants != "" {
		if tenants, err = config.LoadTenants(cfg.Tenants); err != nil {
			return fail(err)
		}
	}
	s.run("admitter", admitter.New(adm, admitter.Config{ModelKnown: func(m string) bool { _, ok := cfg.Catalog.Model(m); return ok },
		Tenants: tenants, Catalog: cfg.Catalog, Cache: cachestore.Config{Replicas: cfg.Streams.Replicas}, Workflow: workflowstore.Config{Replicas: cfg.Streams.Replicas}}).Run)
	cost := perf.NewPredictor(cfg.Catalog)
	for i := 1; i <= max(1, cfg.Routers); i++ {
		rsh, err := s.shell("router", fmt.Sprintf("router-%d", i))
		if err != nil {
			return fail(err)
		}
		pol, err := routing.PolicyNamed(cfg.Policy, cfg.Catalog, cost)
		if err != nil {
			return fail(err)
		}
		s.run("router", router.New(rsh, router.Config{Cost: cost, Policy: pol, Catalog: cfg.Catalog, Lease: cfg.Routers <= 1, ActiveActive: cfg.Routers > 1}).Run)
	}
	if cfg.Fleet, err = stageModels(cfg); err != nil {
		return fail(err)
	}
	for _, spec := range cfg.Fleet {
		if cfg.Control != nil && cfg.Control.FromZero {
			break // the fleet names the pools; the scaler starts their workers
		}
		if _, err := s.AddWorker(spec); err != nil {
			return fail(err)
		}
	}
	if cfg.Control != nil {
		if err := s.startControl(*cfg.Control); err != nil {
			return fail(err)
		}
	}
	if cfg.MetricsAddr != "" {
		addr, err := s.Registry.Serve(sctx, cfg.MetricsAddr)
		if err != nil {
			return fail(err)
		}
		s.MetricsAddr = addr
	}
	// Give consumers a moment to be created and the first heartbeats to land
	// so the first requests find a fleet.
	if err := s.waitReady(ctx, len(cfg.Fleet)); err != nil {
		return fail(err)
	}
	return s, nil
}

func (s *Stack) waitReady(ctx context.Context, workers int) error {
	nc, err := s.Connect("readiness")
	if err != nil {
		return err
	}
	defer nc.Close()
	js, err := bus.JetStream(nc)
	if err != nil {
		return err
	}
	deadline := time.Now().Add(15 * time.Second)
	for time.Now().Before(deadline) {
		ready := true
		names := []string{subjects.AdmitterConsumer}
		for _, c := range schemas.Priorities {
			names = append(names, subjects.RouterConsumer(c))
		}
		for _, n := range names {
			st := subjects.StreamSubmit
			if n != subjects.AdmitterConsumer {
				st = subjects.StreamAdmitted
			}
			if _, err := js.Consumer(ctx, st, n); err != nil {
				ready = false
			}
		}
		if ready {
			time.Sleep(2 * 500 * time.Millisecond) // two heartbeat intervals
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
	return errors.New("stack: services not ready within 15s")
}

// Connect opens a new in-process connection to the stack's server (as the
// operator's user under Auth).
func (s *Stack) Connect(name string) (*nats.Conn, error) { return s.connectAs("ops", name) }

func (s *Stack) connectAs(service, name string) (*nats.Conn, error) {
	var opts []nats.Option
	if s.cfg.Auth != nil {
		opts = append(opts, nats.UserInfo(s.cfg.Auth.user(service)))
	}
	nc, err := s.Server.Connect(name, opts...)
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	s.conns = append(s.conns, nc)
	s.mu.Unlock()
	return nc, nil
}

func (s *Stack) shell(service, instance string) (*svc.Shell, error) {
	nc, err := s.connectAs(service, instance)
	if err != nil {
		return nil, err
	}
	sh, err := svc.New(service, instance, nc, s.Log)
	if err != nil {
		return nil, err
	}
	if err := sh.UseLedger(); err != nil {
		return nil, err
	}
	s.Registry.Add(sh.Metrics)
	return sh, nil
}

func (s *Stack) run(name string, fn func(context.Context) error) {
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		if err := fn(s.ctx); err != nil && !errors.Is(err, context.Canceled) {
			s.Log.Error("service stopped", "service", name, "err", err)
			s.mu.Lock()
			s.errs = append(s.errs, fmt.Errorf("%s: %w", name, err))
			s.mu.Unlock()
		}
	}()
}

// AddWorker starts one more simulated worker and returns its id.
func (s *Stack) AddWorker(spec WorkerSpec) (string, error) {
	s.workerMu.Lock()
	s.nextWorkerID++
	id := fmt.Sprintf("w%d-%s", s.nextWorkerID, spec.GPU)
	s.workerMu.Unlock()
	sh, err := s.shell("worker", id)
	if err != nil {
		return "", err
	}
	w, err := worker.New(sh, worker.Config{ID: id, GPU: spec.GPU, Model: spec.Model, Dtype: spec.Dtype, TP: spec.TP,
		SpeedUp: s.cfg.SpeedUp, Catalog: s.Catalog, Instant: s.cfg.InstantWorkers, Backend: spec.Backend, OpenAIURL: spec.OpenAIURL,
		InitialWeights: spec.InitialWeights, MaxConcurrent: spec.MaxConcurrent, EngineStallAfter: spec.EngineStallAfter,
		Role: spec.Role, Link: spec.Link})
	if err != nil {
		return "", err
	}
	for _, m := range slices.Sorted(maps.Keys(spec.Parked)) {
		if err := w.Park(m, spec.Parked[m]); err != nil {
			return "", err
		}
	}
	wctx, cancel := context.WithCancel(s.ctx)
	done := make(chan struct{})
	s.workerMu.Lock()
	s.workers[id] = cancel
	s.workerDone[id] = done
	if s.started == nil {
		s.started, s.tp = map[string]time.Time{}, map[string]int{}
	}
	s.started[id], s.tp[id] = time.Now(), max(1, spec.TP)
	s.workerMu.Unlock()
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		defer close(done)
		if spec.JoinAfter > 0 {
			select {
			case <-wctx.Done():
				return
			case <-time.After(spec.JoinAfter):
			}
		}
		if err := w.Run(wctx); err != nil {
			s.Log.Error("worker stopped", "worker", id, "err", err)
		}
	}()
	return id, nil
}

// StopWorker drains and stops one worker, returning when it has exited.
func (s *Stack) StopWorker(id string) error {
	s.workerMu.Lock()
	cancel, ok := s.workers[id]
	done := s.workerDone[id]
	delete(s.workers, id)
	delete(s.workerDone, id)
	s.workerMu.Unlock()
	if !ok {
		return fmt.Errorf("no worker %q", id)
	}
	cancel()
	<-done
	s.workerMu.Lock()
	s.provisioned += time.Since(s.started[id]).Seconds() * float64(s.tp[id])
	delete(s.started, id)
	s.workerMu.Unlock()
	return nil
}

// GPUHours is the GPU time the stack's workers have held so far, running
// or stopped: what a fleet of this shape costs, busy or idle.
func (s *Stack) GPUHours() float64 {
	s.workerMu.Lock()
	defer s.workerMu.Unlock()
	secs := s.provisioned
	for id, t := range s.started {
		secs += time.Since(t).Seconds() * float64(s.tp[id])
	}
	return secs / 3600
}

// WorkerIDs lists the running workers.
func (s *Stack) WorkerIDs() []string {
	s.workerMu.Lock()
	defer s.workerMu.Unlock()
	ids := make([]string, 0, len(s.workers))
	for id := range s.workers {
		ids = append(ids, id)
	}
	return ids
}

// Err returns the errors of services that stopped on their own.
func (s *Stack) Err() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return errors.Join(s.errs...)
}

// Close stops every service (workers drain first) and the server.
func (s *Stack) Close() {
	s.cancel()
	s.wg.Wait()
	s.mu.Lock()
	for _, nc := range s.conns {
		nc.Drain()
	}
	s.conns = nil
	s.mu.Unlock()
	s.Server.Shutdown()
}
