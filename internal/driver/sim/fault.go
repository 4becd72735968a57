package sim

import (
	"fmt"
	"time"
)

// Fault kinds.
const (
	// FaultDie kills a worker: its engine stops with its work, it
	// heartbeats no more, and whatever was dispatched to it is lost with
	// its KV cache until the router's breaker notices the silence.
	FaultDie = "die"
	// FaultSlow makes every step take 1/Factor times as long (a throttled
	// or degraded GPU); Factor 1 restores full speed.
	FaultSlow = "slow"
	// FaultSilent stops a worker's heartbeats while it keeps computing (a
	// partitioned telemetry path): the router treats it as lost and
	// re-places its work, and the first result to arrive wins.
	FaultSilent = "silent"
	// FaultRecover ends a silence (heartbeats resume); a dead worker stays
	// dead.
	FaultRecover = "recover"
)

// Fault is one scheduled event that happens to a worker.
type Fault struct {
	// At is from the start of the trace.
	At time.Duration `json:"at"`
	// Worker is a worker id ("h100-03") as the simulator names them.
	Worker string `json:"worker"`
	Kind   string `json:"kind"`
	// Factor is FaultSlow's speed, in (0, 1].
	Factor float64 `json:"factor,omitempty"`
}

type workerFault struct {
	dead, silent bool
	speed        float64 // 0 means full speed
}

// stretch is how long a step of duration d takes at the worker's speed.
func (f workerFault) stretch(d time.Duration) int64 {
	if f.speed <= 0 || f.speed >= 1 {
		return int64(d)
	}
	return int64(float64(d) / f.speed)
}

func (c *Config) checkFaults() error {
	for _, f := range c.Faults {
		switch f.Kind {
		case FaultDie, FaultSilent, FaultRecover:
		case FaultSlow:
			if f.Factor <= 0 || f.Factor > 1 {
				return fmt.Errorf("sim: fault %s on %s: factor %v not in (0, 1]", f.Kind, f.Worker, f.Factor)
			}
		default:
			return fmt.Errorf("sim: unknown fault kind %q (want die, slow, silent or recover)", f.Kind)
		}
		if f.At < 0 {
			return fmt.Errorf("sim: fault %s on %s at %v: negative time", f.Kind, f.Worker, f.At)
		}
	}
	return nil
}

// scheduleFaults queues the faults. On a fixed fleet each must name one of
// its workers; an autoscaled fleet starts workers later, so a fault that
// finds no such worker when it strikes is counted as missed instead.
func (r *runner) scheduleFaults() error {
	first := int64(r.tr.Requests[0].Arrival)
	for k, f := range r.cfg.Faults {
		if _, ok := r.byWID[f.Worker]; !ok && r.as == nil {
			return fmt.Errorf("sim: fault %s at %v names worker %q, which the fleet does not have (its workers are named gpu-NN, e.g. %s)",
				f.Kind, f.At, f.Worker, r.ws[0].id)
		}
		r.h.push(first+int64(f.At), evFault, int32(k))
	}
	return nil
}

func (r *runner) fault(k int32) {
	f := r.cfg.Faults[k]
	wi, ok := r.byWID[f.Worker]
	if !ok {
		r.rel.FaultsMissed++
		return
	}
	w := r.ws[wi]
	r.rel.Faults++
	switch f.Kind {
	case FaultDie:
		w.fault.dead = true
		w.busy = false
		for i := range w.running {
			w.eng.Cancel(r.tr.Requests[i].ID)
		}
		clear(w.running)
		clear(w.deliveredAt)
	case FaultSlow:
		w.fault.speed = f.Factor
	case FaultSilent:
		w.fault.silent = true
	case FaultRecover:
		w.fault.silent = false
	}
}
