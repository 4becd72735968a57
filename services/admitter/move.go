package admitter

import (
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/VictoriaMetrics/metrics"
	"github.com/nats-io/nats.go"

	"github.com/switchyard-ai/switchyard/internal/core/admission"
	"github.com/switchyard-ai/switchyard/internal/core/control"
	"github.com/switchyard-ai/switchyard/schemas"
	"github.com/switchyard-ai/switchyard/services/svc"
)

// poolMemory is how long a pool the controller sized stays scalable
// without another sy.ctl.replicas message: the controller re-sends every
// interval (seconds), so a minute of silence means no controller manages
// it any more.
const poolMemory = time.Minute

// moveState is the fleet knowledge the move step needs beyond heartbeats:
// the pools a controller can scale up, and the admitted requests that wait
// for their model to warm (held, counted apart from the router backlog so
// they do not lengthen the shedder's predicted wait for everyone else).
type moveState struct {
	mu      sync.Mutex
	pools   map[string]poolSeen
	warming map[string]warmingReq
}

type poolSeen struct {
	pool admission.ScalablePool
	at   time.Time
}

type warmingReq struct {
	class   string
	expires time.Time
}

// followPools subscribes to the controller's desired-replica messages; the
// returned function unsubscribes.
func (s *moveState) followPools(nc *nats.Conn, now func() time.Time, log *slog.Logger) (func(), error) {
	sub, err := nc.Subscribe(control.ReplicasAll, func(m *nats.Msg) {
		var r control.ReplicasMsg
		if err := svc.Decode(m.Header, m.Data, &r); err != nil || r.Pool == "" || r.Model == "" {
			log.Debug("ignored replicas message", "subject", m.Subject, "err", err)
			return
		}
		s.mu.Lock()
		if s.pools == nil {
			s.pools = map[string]poolSeen{}
		}
		// As the message describes the pool: its own replica kind and cold
		// start (admission.ScalablePool.ColdStart prices one it leaves out).
		s.pools[r.Pool] = poolSeen{pool: admission.ScalablePool{Pool: r.Pool, GPU: r.GPU, Model: r.Model,
			Dtype: r.Dtype, TP: r.TP, ColdStartSeconds: r.ColdStartSeconds}, at: now()}
		s.mu.Unlock()
	})
	if err != nil {
		return nil, fmt.Errorf("admitter replicas control: %w", err)
	}
	return func() { _ = sub.Unsubscribe() }, nil
}

// scalable lists the pools a controller sized within poolMemory.
func (s *moveState) scalable(now time.Time) []admission.ScalablePool {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []admission.ScalablePool
	for k, p := range s.pools {
		if now.Sub(p.at) > poolMemory {
			delete(s.pools, k)
			continue
		}
		out = append(out, p.pool)
	}
	return out
}

// hold records an admitted request whose model no live worker has hot:
// it waits for a load or a scale-up until its deadline or its result.
func (s *moveState) hold(id, class string, deadline time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.warming == nil {
		s.warming = map[string]warmingReq{}
	}
	s.warming[id] = warmingReq{class: class, expires: deadline}
}

// done forgets a request once its result is in.
func (s *moveState) done(id string) {
	s.mu.Lock()
	delete(s.warming, id)
	s.mu.Unlock()
}

// warmingByClass counts the held requests per class, dropping expired ones.
func (s *moveState) warmingByClass(now time.Time) map[string]int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.warming) == 0 {
		return nil // the usual case: nothing waits on a load, and a nil map reads as zeros
	}
	out := map[string]int{}
	for id, w := range s.warming {
		if now.After(w.expires) {
			delete(s.warming, id)
			continue
		}
		out[w.class]++
	}
	return out
}

// excludeWarming takes the held requests out of the router backlog the
// shedder reads — they wait on a model load, not on the queue ahead of
// everyone else — and exports their count per class.
func (a *Admitter) excludeWarming(pending map[string]int, now time.Time) map[string]int {
	held := a.move.warmingByClass(now)
	for _, c := range schemas.Priorities {
		a.handles.warming.Get(svc.Labels{c}, func() *metrics.Gauge {
			return a.sh.Metrics.GetOrCreateGauge(fmt.Sprintf(`switchyard_admission_warming{class=%q}`, c), nil)
		}).Set(float64(held[c]))
		pending[c] = max(0, pending[c]-held[c])
	}
	return pending
}

// holdIfWarming counts an admitted request as waiting for its model when
// no live worker has the model hot (a partial view cannot tell).
func (a *Admitter) holdIfWarming(id string, d admission.Decision, offers admission.FleetOffers) {
	if !offers.Informed() || offers.Partial {
		return
	}
	if of, ok := offers.Models[d.Model]; ok && of.Hot > 0 {
		return
	}
	a.move.hold(id, d.Priority, d.Deadline)
	a.sh.Metrics.GetOrCreateCounter(fmt.Sprintf(`switchyard_admission_warming_total{class=%q}`, d.Priority)).Inc()
}
