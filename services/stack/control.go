package stack

import (
	"fmt"
	"slices"
	"time"

	"github.com/switchyard-ai/switchyard/internal/core/catalog"
	"github.com/switchyard-ai/switchyard/internal/core/control"
	"github.com/switchyard-ai/switchyard/internal/core/perf"
	"github.com/switchyard-ai/switchyard/internal/driver/sim"
	"github.com/switchyard-ai/switchyard/schemas"
	"github.com/switchyard-ai/switchyard/services/controller"
)

// ControlConfig turns the control loop on in a stack: the controller
// service (services/controller) decides every Interval and a local scaler
// acts on its desired replicas with the stack's AddWorker and StopWorker,
// so autoscaling is visible on one machine. New workers are paid for from
// the start, load their weights for the model's cold-load time and then
// join by heartbeat; leaving workers are announced draining, then drained
// (they finish what they hold) before they exit.
type ControlConfig struct {
	// Pools to scale; empty means one per GPU × model of the fleet,
	// bounded by [Min, Max].
	Pools []control.Pool
	// Min and Max bound the derived pools: Min 0 lets a pool scale to
	// zero (a negative Min is 0); Max defaults to twice the pool's
	// starting size, at least 4.
	Min, Max int
	// FromZero starts none of the fleet's workers: the fleet only names
	// the pools, each at Min 0, and the local scaler starts a pool's first
	// worker when the controller orders it — for requests the router holds
	// while it warms (scale from zero).
	FromZero bool
	// Control is the controller's configuration; its Pools and Catalog are
	// filled from the stack. Interval defaults to 2 s.
	Control control.Config
	// Planner is the controller's planner (controller.Config.Planner);
	// empty is Switchyard's.
	Planner string
	// ParkedTier is, with GPUs that change model (Control.ShiftModels),
	// where the fleet's other models sit on each worker at the start
	// (default host: asleep in host memory, a wake of about a second;
	// page_cache or disk for a fleet that has only the files), as the
	// simulator's Autoscale.ParkedTier.
	ParkedTier string
}

// Controller returns the running controller service (nil without Control).
func (s *Stack) Controller() *controller.Controller { return s.ctl }

// startControl starts the controller and the local scaler.
func (s *Stack) startControl(cc ControlConfig) error {
	cfg := cc.Control
	cfg.Catalog = s.Catalog
	pools, links, err := derivePools(cc, s.cfg.Fleet, s.Catalog)
	if err != nil {
		return err
	}
	cfg.Pools = pools
	if cfg.ShiftModels {
		shift, inventory, err := shiftPools(s.cfg.Fleet, pools, s.Catalog)
		if err != nil {
			return err
		}
		if len(cc.Pools) == 0 {
			cfg.Pools = shift
		}
		if cfg.Inventory == nil {
			cfg.Inventory = inventory
		}
	}
	speedUp := s.cfg.SpeedUp
	if speedUp <= 0 {
		speedUp = 1 // as the workers read it
	}
	// A new replica is paid for from the start, loads its weights, and
	// only then registers. A worker that joined cold would wait for a
	// request to start its load, and placement never sends a worker a
	// request it cannot finish by its deadline after a 30 s load, so it
	// would stay cold and idle. The load takes the model's simulated
	// cold-load time, compressed by SpeedUp as all simulated GPU time is.
	// A started worker not heard from within its load time and a minute
	// more is given up on.
	load := map[string]time.Duration{}
	startTimeout := time.Minute
	for _, p := range cfg.Pools {
		rep, err := perf.NewReplica(s.Catalog, p.GPU, p.Model, p.Dtype, max(p.TP, 1))
		if err != nil {
			return fmt.Errorf("stack control: %w", err)
		}
		load[p.Key()] = time.Duration(rep.LoadSeconds(schemas.WeightCold) / speedUp * float64(time.Second))
		startTimeout = max(startTimeout, time.Minute+load[p.Key()])
	}
	sh, err := s.shell("controller", "controller-1")
	if err != nil {
		return err
	}
	// The controller first, so the scaler leaves alone the pools GPUs that
	// change model size (it would start a worker for a switch under way).
	var sc *controller.Scaler
	ctl, err := controller.New(sh, controller.Config{Control: cfg, Starting: func() map[string]int { return sc.Starting() }, Planner: cc.Planner})
	if err != nil {
		return err
	}
	shifting := ctl.ShiftPools()
	var scaled []control.Pool
	for _, p := range cfg.Pools {
		if !shifting[p.Key()] {
			scaled = append(scaled, p)
		}
	}
	sc, err = controller.NewScaler(sh.NC, controller.ScalerConfig{
		Pools: scaled,
		Add: func(p control.Pool) (string, error) {
			return s.AddWorker(scaledWorker(p, cfg, links, load[p.Key()]))
		},
		Stop: s.StopWorker,
		Log:  s.Log.With("service", "scaler"),
		// Heartbeats arrive every 500 ms in a stack; a second of grace
		// lets dispatches already sent reach the draining worker.
		DrainGrace:   time.Second,
		StartTimeout: startTimeout,
	})
	if err != nil {
		return err
	}
	s.ctl = ctl
	s.run("scaler", sc.Run)
	s.run("controller", ctl.Run)
	return nil
}

// derivePools is the pools the controller sizes: cc.Pools, else one per
// GPU × model × fixed role of the fleet, bounded by [Min, Max]. links is
// the KV link each pool's fleet workers name, by pool key, so the workers
// the scaler adds can take split legs as their pool's first ones do.
func derivePools(cc ControlConfig, fleet []WorkerSpec, cat *catalog.Catalog) ([]control.Pool, map[string]string, error) {
	links := map[string]string{}
	count := map[string]int{}
	var order []control.Pool
	for _, w := range fleet {
		rep, err := perf.NewReplica(cat, w.GPU, w.Model, w.Dtype, max(w.TP, 1))
		if err != nil {
			return nil, nil, fmt.Errorf("stack control: %w", err)
		}
		// Canonical names, so the pool key matches the heartbeats'; a
		// fixed role is its own pool (control.HeartbeatPool), sized for
		// its phase.
		p := control.Pool{GPU: rep.GPU.Name, Model: rep.Model.Name, Dtype: w.Dtype, TP: rep.TP}
		if control.FixedRole(w.Role) {
			p.Role = w.Role
		}
		if count[p.Key()] == 0 {
			order = append(order, p)
		}
		count[p.Key()]++
		if w.Link != "" && links[p.Key()] == "" {
			links[p.Key()] = w.Link
		}
	}
	if len(cc.Pools) > 0 {
		return cc.Pools, links, nil
	}
	var pools []control.Pool
	for _, p := range order {
		p.Min, p.Max = max(cc.Min, 0), cc.Max
		if cc.FromZero {
			p.Min = 0
		}
		if p.Max <= 0 {
			p.Max = max(4, 2*count[p.Key()])
		}
		p.Max = max(p.Max, p.Min)
		pools = append(pools, p)
	}
	return pools, links, nil
}

// scaledWorker is the worker the local scaler starts for pool p. A pool
// with a fixed role starts its workers with that role and a link: the
// pool's own fleet link, else sim.DefaultRoleLink, as the simulator's
// autoscaler does (a prefill or decode worker without a link could take
// no work at all). A pool of whole requests keeps its fleet link, and
// gets the default one where role pools run beside it or the controller
// assigns roles: the controller turns only workers with a link.
func scaledWorker(p control.Pool, cfg control.Config, links map[string]string, joinAfter time.Duration) WorkerSpec {
	spec := WorkerSpec{GPU: p.GPU, Model: p.Model, Dtype: p.Dtype, TP: p.TP, JoinAfter: joinAfter, Link: links[p.Key()]}
	if control.FixedRole(p.Role) {
		spec.Role = p.Role
	}
	if spec.Link != "" {
		return spec
	}
	split := spec.Role != "" || cfg.AssignRoles
	for _, o := range cfg.Pools {
		split = split || control.FixedRole(o.Role)
	}
	if split {
		spec.Link = sim.DefaultRoleLink
	}
	return spec
}

// shiftPools is, for GPUs that change model, the core's pools of the
// fleet (control.ShiftPools: every GPU type and TP × every model, each
// bounded by that type's GPUs) with derived's settings where the fleet
// already has the pool; fixed-role pools stay as derived and count no
// inventory.
func shiftPools(fleet []WorkerSpec, derived []control.Pool, cat *catalog.Catalog) ([]control.Pool, map[string]int, error) {
	reps, err := shiftReplicas(fleet, cat)
	if err != nil {
		return nil, nil, err
	}
	byKey := map[string]control.Pool{}
	var out []control.Pool
	for _, p := range derived {
		if control.FixedRole(p.Role) {
			out = append(out, p)
			continue
		}
		byKey[p.Key()] = p
	}
	pools, inventory := control.ShiftPools(reps)
	for _, p := range pools {
		if d, ok := byKey[p.Key()]; ok {
			d.Min, d.Max = p.Min, p.Max
			p = d
		}
		out = append(out, p)
	}
	return out, inventory, nil
}

// shiftReplicas is the fleet's whole-request workers as the core's
// ShiftReplica, one per worker (fixed-role workers change no model).
func shiftReplicas(fleet []WorkerSpec, cat *catalog.Catalog) ([]control.ShiftReplica, error) {
	var out []control.ShiftReplica
	for _, w := range fleet {
		if control.FixedRole(w.Role) {
			continue
		}
		rep, err := perf.NewReplica(cat, w.GPU, w.Model, w.Dtype, max(w.TP, 1))
		if err != nil {
			return nil, fmt.Errorf("stack control: %w", err)
		}
		out = append(out, control.ShiftReplica{GPU: rep.GPU.Name, TP: rep.TP, Model: rep.Model.Name, Count: 1})
	}
	return out, nil
}

// stageModels parks, with GPUs that change model (Control.ShiftModels),
// every other model of the fleet on each simulated worker of the same GPU
// type and TP at ControlConfig.ParkedTier (control.ParkedModels over
// control.ShiftPools, as the simulator stages them); it returns a copy of
// the fleet, the caller's untouched.
func stageModels(cfg Config) ([]WorkerSpec, error) {
	if cfg.Control == nil || !cfg.Control.Control.ShiftModels {
		return cfg.Fleet, nil
	}
	tier, err := control.ParkedTier(cfg.Control.ParkedTier)
	if err != nil {
		return nil, fmt.Errorf("stack control: %w", err)
	}
	reps, err := shiftReplicas(cfg.Fleet, cfg.Catalog)
	if err != nil {
		return nil, err
	}
	pools, _ := control.ShiftPools(reps)
	out := slices.Clone(cfg.Fleet)
	k := 0 // reps holds one entry per whole-request worker, in fleet order
	for i, w := range out {
		if control.FixedRole(w.Role) {
			continue
		}
		own := reps[k]
		k++
		if w.Backend != "" && w.Backend != "sim" {
			continue
		}
		parked := map[string]string{}
		for _, m := range control.ParkedModels(pools, own.GPU, own.TP, own.Model) {
			parked[m] = tier
		}
		if len(parked) > 0 {
			out[i].Parked = parked
		}
	}
	return out, nil
}
