package worker

// FAULT INJECTION — for fault tests and demos only.
//
// A Fault makes a worker misbehave on purpose, the way a sick GPU host
// does: every engine step takes Slowdown times longer (a thermally
// throttled or ECC-retrying device: the simulated clock keeps running, so
// the reported latencies really are Slowdown times the roofline's, as the
// router's latency-outlier check would see them), and a share ErrorRate of
// requests is answered with backend_error instead of being computed (a
// backend that crashes on some batches). Errors carry this worker's id and
// schemas.CodeBackendError, so the router's circuit breaker counts them
// against this worker. A zero Fault is a healthy worker.
//
// Which requests fail is a pure function of Seed and the request id, so a
// run with the same seed and ids fails the same requests.

import (
	"fmt"
	"hash/fnv"

	"github.com/switchyard-ai/switchyard/schemas"
	"github.com/switchyard-ai/switchyard/services/svc"
)

// Fault is deliberately injected misbehaviour (tests only).
type Fault struct {
	// Slowdown > 1 stretches every engine step's real and reported time
	// by this factor; 0 or 1 is normal speed.
	Slowdown float64
	// ErrorRate in [0, 1] is the share of requests answered with
	// backend_error without being computed.
	ErrorRate float64
	// Seed picks which requests fail.
	Seed uint64
}

// Active reports whether any fault is configured.
func (f Fault) Active() bool { return f.Slowdown > 1 || f.ErrorRate > 0 }

// Validate rejects settings that cannot mean anything.
func (f Fault) Validate() error {
	if f.Slowdown < 0 {
		return fmt.Errorf("fault slowdown %v: must be ≥ 0 (1 or 0 is normal speed)", f.Slowdown)
	}
	if f.ErrorRate < 0 || f.ErrorRate > 1 {
		return fmt.Errorf("fault error rate %v: must be in [0, 1]", f.ErrorRate)
	}
	return nil
}

// String is how the worker's start-up log names the fault.
func (f Fault) String() string {
	return fmt.Sprintf("FAULT INJECTION: slowdown x%.2f, error rate %.0f%%, seed %d", f.stretch(), 100*f.ErrorRate, f.Seed)
}

// stretch is the factor applied to each engine step's duration.
func (f Fault) stretch() float64 {
	if f.Slowdown > 1 {
		return f.Slowdown
	}
	return 1
}

// fails reports whether the request with this id is one the fault fails:
// a hash of (seed, id) mapped to [0, 1) against ErrorRate.
func (f Fault) fails(id string) bool {
	if f.ErrorRate <= 0 {
		return false
	}
	h := fnv.New64a()
	var seed [8]byte
	for i := range seed {
		seed[i] = byte(f.Seed >> (8 * i))
	}
	h.Write(seed[:])
	h.Write([]byte(id))
	// FNV's high bits barely move between similar ids; a splitmix64
	// finalizer spreads them before the top 53 bits become a fraction.
	x := h.Sum64()
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return float64(x>>11)/float64(1<<53) < f.ErrorRate
}

// injectedError returns the backend_error result for a dispatch the fault
// fails, or false. The result names this worker, so it feeds this
// worker's breaker, and is otherwise an ordinary final result.
func (w *Worker) injectedError(d schemas.Dispatch) (schemas.Result, bool) {
	a := d.Admitted
	if !w.cfg.Fault.fails(a.Request.ID) {
		return schemas.Result{}, false
	}
	e := schemas.Errf(schemas.CodeBackendError, "", "worker %s backend failed (injected fault, --fault-error-rate %.2f)", w.cfg.ID, w.cfg.Fault.ErrorRate)
	res := svc.ErrorResult(a.Request.ID, a.Tenant, a.Priority, e, w.sh.Now())
	res.WorkerID, res.GPU, res.Simulated, res.Attempt, res.Model = w.cfg.ID, w.replica.GPU.Name, true, a.Attempt, a.Model
	return res, true
}
