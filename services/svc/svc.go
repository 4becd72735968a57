// Package svc holds what every Switchyard service shell shares: its NATS
// connection and JetStream handle, publishing results, events and
// dead letters in the wire format, and its Prometheus metrics set. It
// decides nothing.
package svc

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/VictoriaMetrics/metrics"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/switchyard-ai/switchyard/internal/adapter/ledger"
	"github.com/switchyard-ai/switchyard/schemas"
	"github.com/switchyard-ai/switchyard/subjects"
)

// PullExpiry is the life of each pull request a service's consumer makes.
// With nats.go's default (30 s, heartbeat 15 s) a consumer whose client
// believes a pull is outstanding while the server holds none sits idle
// for 30 s until the missing heartbeats reset it; `bench bus` caught the
// router that way (256 messages pending, no pull waiting, nothing acked
// pending). At 2 s (heartbeat 1 s) such a stall lasts about 2 s, for one
// extra pull request per consumer every 2 s.
var PullExpiry = jetstream.PullExpiry(2 * time.Second)

// Shell is one service instance's connection to the bus.
type Shell struct {
	Service  string // "admitter", "router", "worker", ...
	Instance string
	NC       *nats.Conn
	JS       jetstream.JetStream
	Log      *slog.Logger
	Metrics  *metrics.Set
	// Now is the clock; tests and replay may replace it.
	Now func() time.Time
	// Ledger, when set, makes every final result exactly-once per request
	// id across services and restarts (UseLedger).
	Ledger  *ledger.Ledger
	events  eventBatcher
	handles shellMetrics
}

// UseLedger routes final results through the exactly-once result ledger.
func (s *Shell) UseLedger() error {
	l, err := ledger.New(s.JS, ledger.WithService(s.Service), ledger.WithLogger(s.Log))
	if err != nil {
		return fmt.Errorf("%s ledger: %w", s.Service, err)
	}
	s.Ledger = l
	return nil
}

// New builds a shell over an open connection.
func New(service, instance string, nc *nats.Conn, log *slog.Logger) (*Shell, error) {
	js, err := jetstream.New(nc, jetstream.WithPublishAsyncMaxPending(1024))
	if err != nil {
		return nil, fmt.Errorf("%s jetstream: %w", service, err)
	}
	if log == nil {
		log = slog.Default()
	}
	return &Shell{
		Service:  service,
		Instance: instance,
		NC:       nc,
		JS:       js,
		Log:      log.With("service", service, "instance", instance),
		Metrics:  metrics.NewSet(),
		Now:      time.Now,
	}, nil
}

// Encode marshals v in format f into a message for subject with the
// Content-Type header set; msgID, when set, becomes Nats-Msg-Id.
func Encode(subject string, f schemas.Format, v any, msgID string) (*nats.Msg, error) {
	data, err := schemas.Marshal(f, v)
	if err != nil {
		return nil, err
	}
	m := nats.NewMsg(subject)
	m.Data = data
	m.Header.Set(schemas.HeaderContentType, f.String())
	if msgID != "" {
		m.Header.Set(schemas.HeaderMsgID, msgID)
	}
	return m, nil
}

// Decode unmarshals a message body by its Content-Type header.
func Decode(h nats.Header, data []byte, v any) error {
	f, err := schemas.FormatFromContentType(h.Get(schemas.HeaderContentType))
	if err != nil {
		return err
	}
	return schemas.Unmarshal(f, data, v)
}

// ResultFormat is the format a result goes back in: the one the request
// came in, so a JSON client reads JSON.
func ResultFormat(name string) schemas.Format {
	if name == schemas.ContentMsgpack {
		return schemas.Msgpack
	}
	return schemas.JSON
}

// PublishResult publishes a final result, deduplicated by request id, and
// waits for the stream's ack: a result is only final once it is stored.
// With a ledger, a result that loses to an earlier one for the same id is
// dropped (and reported by the ledger) and PublishResult returns nil.
func (s *Shell) PublishResult(ctx context.Context, res schemas.Result, f schemas.Format) error {
	res.V = schemas.Version
	if res.FinishedAt.IsZero() {
		res.FinishedAt = s.Now()
	}
	if s.Ledger != nil {
		won, err := s.Ledger.Finish(ctx, res, f)
		if err != nil {
			return fmt.Errorf("publish result %s: %w", res.ID, err)
		}
		if won {
			s.countFinal(res)
		} else {
			s.duplicateCounter().Inc()
		}
		return nil
	}
	m, err := Encode(subjects.Final(res.Tenant, res.ID), f, res, res.ID)
	if err != nil {
		return err
	}
	ack, err := s.JS.PublishMsg(ctx, m)
	if err != nil {
		return fmt.Errorf("publish result %s: %w", res.ID, err)
	}
	if !ack.Duplicate {
		s.countFinal(res)
	}
	if ack.Duplicate {
		s.duplicateCounter().Inc()
		s.Log.Debug("duplicate result suppressed by stream dedupe", "id", res.ID)
	}
	return nil
}

// ErrorResult is the final result for a request that failed with e.
func ErrorResult(id, tenant, priority string, e *schemas.Error, now time.Time) schemas.Result {
	return schemas.Result{
		ID:         id,
		Tenant:     tenant,
		Status:     schemas.StatusForCode(e.Code),
		Error:      e,
		Priority:   priority,
		FinishedAt: now,
	}
}

// Emit publishes a decision event asynchronously, batched with its
// neighbours of the same kind while an earlier batch awaits its ack
// (events.go): events are recorded for replay and dashboards, but a slow
// EVENTS stream must not stall decisions, nor cost a stored message each.
func (s *Shell) Emit(ev schemas.Event) {
	ev.V = schemas.Version
	if ev.At.IsZero() {
		ev.At = s.Now()
	}
	ev.Service = s.Service
	if ev.Fields == nil {
		ev.Fields = map[string]any{}
	}
	ev.Fields["instance"] = s.Instance
	if err := s.addEvent(subjects.Event(s.Service, ev.Kind), &ev); err != nil {
		s.Log.Error("encode event", "kind", ev.Kind, "err", err)
		return
	}
	s.handles.events.Get(Labels{ev.Kind}, func() *metrics.Counter {
		return s.Metrics.GetOrCreateCounter(fmt.Sprintf(`switchyard_events_total{service=%q,kind=%q}`, s.Service, ev.Kind))
	}).Inc()
}

// DeadLetter records a message that could not be processed, with the
// reason, in the DLQ stream, keeping the original bytes and headers.
func (s *Shell) DeadLetter(ctx context.Context, orig *nats.Msg, reason string) error {
	m := nats.NewMsg(subjects.DLQ(s.Service))
	m.Data = orig.Data
	for k, vs := range orig.Header {
		for _, v := range vs {
			m.Header.Add(k, v)
		}
	}
	m.Header.Del(schemas.HeaderMsgID)
	m.Header.Set(subjects.HeaderDLQReason, reason)
	m.Header.Set(subjects.HeaderDLQSubject, orig.Subject)
	m.Header.Set(subjects.HeaderDLQAt, s.Now().UTC().Format(time.RFC3339Nano))
	if _, err := s.JS.PublishMsg(ctx, m); err != nil {
		return fmt.Errorf("dead-letter: %w", err)
	}
	s.Metrics.GetOrCreateCounter(fmt.Sprintf(`switchyard_dead_letters_total{service=%q}`, s.Service)).Inc()
	return nil
}

// countFinal records a final result in the service's metrics: by status,
// whether it met its SLO, and what it cost.
func (s *Shell) countFinal(res schemas.Result) {
	s.handles.results.Get(Labels{res.Status, res.Priority}, func() *metrics.Counter {
		return s.Metrics.GetOrCreateCounter(fmt.Sprintf(`switchyard_results_total{service=%q,status=%q,class=%q}`, s.Service, res.Status, res.Priority))
	}).Inc()
	// A client's mistake is not a service-level miss.
	if res.Error == nil || !schemas.ClientError(res.Error.Code) {
		met := "false"
		if res.Status == schemas.StatusOK && res.SLOMet {
			met = "true"
		}
		s.handles.slo.Get(Labels{res.Priority, met}, func() *metrics.Counter {
			return s.Metrics.GetOrCreateCounter(fmt.Sprintf(`switchyard_slo_total{class=%q,met=%q}`, res.Priority, met))
		}).Inc()
	}
	if res.CostUSD > 0 {
		s.handles.cost.Get(Labels{res.Priority}, func() *metrics.FloatCounter {
			return s.Metrics.GetOrCreateFloatCounter(fmt.Sprintf(`switchyard_cost_usd_total{class=%q}`, res.Priority))
		}).Add(res.CostUSD)
	}
}

// duplicateCounter is switchyard_results_duplicate_suppressed_total.
func (s *Shell) duplicateCounter() *metrics.Counter {
	return s.handles.duplicates.Get(Labels{}, func() *metrics.Counter {
		return s.Metrics.GetOrCreateCounter(fmt.Sprintf(`switchyard_results_duplicate_suppressed_total{service=%q}`, s.Service))
	})
}
