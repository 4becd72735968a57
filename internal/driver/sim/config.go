package sim

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/switchyard-ai/switchyard/internal/core/breaker"
	"github.com/switchyard-ai/switchyard/internal/core/catalog"
	"github.com/switchyard-ai/switchyard/internal/core/placement"
	"github.com/switchyard-ai/switchyard/internal/core/queue"
	"github.com/switchyard-ai/switchyard/internal/core/retry"
	"github.com/switchyard-ai/switchyard/internal/core/routing"
	"github.com/switchyard-ai/switchyard/schemas"
)

// What a simulation is run with: the fleet (GPU × model × count), the
// router's configuration as the live router is built with it, and the
// defaults.

// Epoch is virtual time zero. A fixed date keeps runs reproducible.
var Epoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// GPUSpec is one pool of identical replicas.
type GPUSpec struct {
	GPU   string
	Count int // replicas
	TP    int // GPUs per replica (default 1)
	// Model is the catalog model the pool serves ("" = Config.Model).
	Model string
	// Role fixes the phases the pool's workers take (schemas.RolePrefill,
	// RoleDecode; "" or RoleBoth takes all and leaves the split to the
	// router) and Link their network link for KV transfers (a catalog
	// link; "" takes Config.Link).
	Role, Link string
}

// DefaultRoleLink is the link of a pool that fixes a role without naming a
// link: InfiniBand NDR, what the disaggregated deployments of vLLM, Dynamo
// and llm-d run their KV transfers over.
const DefaultRoleLink = "ib-ndr"

// linkOf is a pool's link: its own, else the run's, else the default for
// a pool with a fixed role.
func (c *Config) linkOf(g GPUSpec) string {
	switch {
	case g.Link != "":
		return g.Link
	case c.Link != "":
		return c.Link
	case g.Role != "" && g.Role != schemas.RoleBoth:
		return DefaultRoleLink
	}
	for _, o := range c.GPUs {
		if o.Role != "" && o.Role != schemas.RoleBoth {
			return DefaultRoleLink // a role-both pool beside role pools
		}
	}
	return ""
}

// ParseGPUs parses "h100:8,a100-80g:8" (optionally "h100:4:2" for TP 2,
// "h100:4@llama-3.1-70b" for a pool serving another model than the run's,
// and "h100:4@prefill" or "a100-80g:4@decode" for a pool with a fixed
// role; "@" parts combine: "h100:2@prefill@llama-3.1-70b").
func ParseGPUs(s string) ([]GPUSpec, error) {
	var out []GPUSpec
	for _, part := range strings.Split(s, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		tags := strings.Split(part, "@")
		part = tags[0]
		f := strings.Split(part, ":")
		g := GPUSpec{GPU: f[0], Count: 1, TP: 1}
		for _, tag := range tags[1:] {
			switch tag = strings.TrimSpace(tag); tag {
			case schemas.RolePrefill, schemas.RoleDecode, schemas.RoleBoth:
				g.Role = tag
			default:
				if g.Model != "" {
					return nil, fmt.Errorf("sim: %q names two models (%s, %s); a role is prefill, decode or both", part, g.Model, tag)
				}
				g.Model = tag
			}
		}
		var err error
		if len(f) > 1 {
			if g.Count, err = strconv.Atoi(f[1]); err != nil || g.Count < 1 {
				return nil, fmt.Errorf("sim: bad replica count in %q", part)
			}
		}
		if len(f) > 2 {
			if g.TP, err = strconv.Atoi(f[2]); err != nil || g.TP < 1 {
				return nil, fmt.Errorf("sim: bad tp in %q", part)
			}
		}
		if len(f) > 3 {
			return nil, fmt.Errorf("sim: %q: want gpu[:count[:tp]]", part)
		}
		out = append(out, g)
	}
	if len(out) == 0 {
		return nil, errors.New("sim: no GPUs")
	}
	return out, nil
}

// Config describes the simulated fleet.
type Config struct {
	GPUs []GPUSpec
	// Link is the workers' network link for KV transfers (a catalog link,
	// internal/core/catalog/links.go) where a pool names none. Empty: the
	// workers have none and no request is split, unless a pool fixes a
	// role, which implies a disaggregated deployment (DefaultRoleLink).
	Link    string
	Model   string // catalog model name
	Dtype   string // default bf16
	Catalog *catalog.Catalog
	// KVBlocks overrides each replica's KV capacity in 16-token blocks
	// (0 = what the roofline model leaves after weights).
	KVBlocks int
	// MaxBatch and TokenBudget are the engines' budgets (0 = vLLM's).
	MaxBatch, TokenBudget int
	// HeartbeatInterval is the workers' heartbeat period (default 1 s, the
	// live worker's).
	HeartbeatInterval time.Duration
	// DispatchLatency is router → worker delivery time (default 2 ms, a
	// JetStream publish and push-consumer delivery on one LAN).
	DispatchLatency time.Duration
	// Tick is the router's retry tick while requests wait (default 25 ms,
	// the live router's; services/router Config.Tick).
	Tick time.Duration
	// Drain is how long after the last arrival the run continues before
	// unfinished requests count as failed (default 5 min).
	Drain time.Duration
	// Seed seeds the engines' speculative-decoding draws.
	Seed int64
	// Breaker and Retry configure the router core's circuit breakers and
	// retry budget (zero values: their packages' defaults, as live).
	Breaker breaker.Config
	Retry   retry.Config
	// Faults happen to workers on a schedule (fault.go).
	Faults []Fault
	// Autoscale, when set, runs the control loop (internal/core/control) in
	// virtual time over the fleet, which GPUs only starts (autoscale.go).
	Autoscale *Autoscale
	// OnResolve, when set, sees every request's outcome as it resolves: a
	// diagnostics hook for finding where a class loses its SLO.
	OnResolve func(Outcome)
	// OnInput, when set, sees every Input the router core is given and the
	// Actions it answered with, in order: what the live router would have
	// journalled. The Input's pointers are reused after the call; copy what
	// must outlive it.
	OnInput func(in routing.Input, acts []routing.Action)
	// QueueLIFOAfter overrides queue.DefaultLIFOAfter for the Switchyard
	// policy, the wait after which a backlogged class serves newest first;
	// negative keeps every class in EDF order always, for comparisons.
	QueueLIFOAfter time.Duration
	// FixedError keeps the placer's prediction error at its configured 25 %
	// instead of the spread per GPU kind and phase the router core learns
	// from results (routing.Config.FixedError): for A/B runs.
	FixedError bool
}

func (c *Config) fill() {
	if c.Dtype == "" {
		c.Dtype = catalog.DtypeBF16
	}
	if c.Catalog == nil {
		c.Catalog = catalog.Default()
	}
	if c.HeartbeatInterval <= 0 {
		c.HeartbeatInterval = time.Second
	}
	if c.DispatchLatency <= 0 {
		c.DispatchLatency = 2 * time.Millisecond
	}
	if c.Tick <= 0 {
		c.Tick = 25 * time.Millisecond
	}
	if c.Drain <= 0 {
		c.Drain = 5 * time.Minute
	}
}

// RouterConfig is the router core's configuration for a run of policy p:
// what the live router is built with (services/router), with the
// simulator's breaker, retry and queue overrides. A bare routing.Core built
// from it and fed a run's Inputs (Config.OnInput) answers the same Actions.
func (c Config) RouterConfig(p placement.Policy, cost placement.CostModel) routing.Config {
	return routing.Config{Policy: p, Cost: cost, Breaker: c.Breaker, Retry: c.Retry,
		Queue: queue.Discipline{LIFOAfter: c.QueueLIFOAfter}, FixedError: c.FixedError}
}

// Replicas is the number of replicas the config describes.
func (c *Config) Replicas() int {
	n := 0
	for _, g := range c.GPUs {
		n += g.Count
	}
	return n
}
