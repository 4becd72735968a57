package admitter

import (
	"fmt"
	"log/slog"
	"maps"
	"sync"

	"github.com/nats-io/nats.go"

	"github.com/switchyard-ai/switchyard/internal/core/admission"
	"github.com/switchyard-ai/switchyard/internal/core/control"
	"github.com/switchyard-ai/switchyard/services/svc"
)

// shedControl holds the shedding margins the controller set on
// sy.ctl.shed.<class> (control.ShedMsg). They overlay the configured
// Shedder's margins class by class: the controller tightens the lower
// classes while the high ones miss their SLO at a pool's maximum and
// relaxes them once attainment holds.
type shedControl struct {
	mu      sync.Mutex
	margins map[string]float64
}

// follow subscribes to every class's margin; the returned function
// unsubscribes.
func (s *shedControl) follow(nc *nats.Conn, log *slog.Logger) (func(), error) {
	sub, err := nc.Subscribe(control.ShedAll, func(m *nats.Msg) {
		var c control.ShedMsg
		if err := svc.Decode(m.Header, m.Data, &c); err != nil || c.Class == "" || c.Margin <= 0 {
			log.Warn("ignored shed control", "subject", m.Subject, "err", err)
			return
		}
		s.mu.Lock()
		if s.margins == nil {
			s.margins = map[string]float64{}
		}
		s.margins[c.Class] = c.Margin
		s.mu.Unlock()
		log.Info("shedding margin set", "class", c.Class, "margin", c.Margin, "reason", c.Reason)
	})
	if err != nil {
		return nil, fmt.Errorf("admitter shed control: %w", err)
	}
	return func() { _ = sub.Unsubscribe() }, nil
}

// shedder is base with the controller's margins laid over its own (or
// admission.DefaultMargins when it has none).
func (s *shedControl) shedder(base admission.Shedder) admission.Shedder {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.margins) == 0 {
		return base
	}
	m := maps.Clone(base.Margin)
	if m == nil {
		m = maps.Clone(admission.DefaultMargins)
	}
	maps.Copy(m, s.margins)
	base.Margin = m
	return base
}
