// Package admitter is the admitter service shell: it consumes SUBMIT,
// decodes each submission (internal/intake), asks the admission core what
// to do with it, and publishes the admitted envelope on
// sy.admitted.<class>.<bucket>.<tenant> or a specific error result on
// sy.result.<tenant>.<id>. Every message it acknowledges has produced
// exactly one of those.
package admitter

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/switchyard-ai/switchyard/internal/intake"
	"github.com/switchyard-ai/switchyard/schemas"
	"github.com/switchyard-ai/switchyard/services/svc"
	"github.com/switchyard-ai/switchyard/subjects"
)

// ConsumerName is the durable consumer all admitter replicas share; JetStream
// spreads messages across them and redelivers what a dead one held.
const ConsumerName = "admitter"

// Config configures the admitter.
type Config struct {
	// ModelKnown validates model names against the catalog.
	ModelKnown schemas.ModelLookup
	Limits     schemas.Limits
	// DefaultPriority applies when neither the request nor the tenant sets one.
	DefaultPriority string
	// DefaultDeadline per class applies when the request sets none.
	DefaultDeadline map[string]time.Duration
	MaxMessageBytes int
	// AckWait bounds how long a crashed admitter holds a message.
	AckWait time.Duration
}

// DefaultDeadlines are the latency budgets per class when nothing else says.
var DefaultDeadlines = map[string]time.Duration{
	schemas.PriorityCritical:    10 * time.Second,
	schemas.PriorityInteractive: 30 * time.Second,
	schemas.PriorityStandard:    2 * time.Minute,
	schemas.PriorityBatch:       24 * time.Hour,
}

// Admitter is one admitter replica.
type Admitter struct {
	sh  *svc.Shell
	cfg Config
}

// New builds an admitter over a shell.
func New(sh *svc.Shell, cfg Config) *Admitter {
	if cfg.DefaultPriority == "" {
		cfg.DefaultPriority = schemas.PriorityStandard
	}
	if cfg.DefaultDeadline == nil {
		cfg.DefaultDeadline = DefaultDeadlines
	}
	if cfg.MaxMessageBytes == 0 {
		cfg.MaxMessageBytes = 4 << 20
	}
	if cfg.AckWait == 0 {
		cfg.AckWait = 4 * time.Second
	}
	return &Admitter{sh: sh, cfg: cfg}
}

// Run consumes submissions until ctx ends.
func (a *Admitter) Run(ctx context.Context) error {
	cons, err := a.sh.JS.CreateOrUpdateConsumer(ctx, subjects.StreamSubmit, jetstream.ConsumerConfig{
		Durable:       ConsumerName,
		Description:   "admitter replicas share this consumer",
		FilterSubject: subjects.SubmitAll,
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       a.cfg.AckWait,
		MaxAckPending: 512,
		DeliverPolicy: jetstream.DeliverAllPolicy,
	})
	if err != nil {
		return fmt.Errorf("admitter consumer: %w", err)
	}
	cc, err := cons.Consume(func(m jetstream.Msg) { a.handle(ctx, m) },
		jetstream.PullMaxMessages(64),
		jetstream.ConsumeErrHandler(func(_ jetstream.ConsumeContext, err error) {
			if !errors.Is(err, jetstream.ErrNoHeartbeat) {
				a.sh.Log.Debug("consume", "err", err)
			}
		}))
	if err != nil {
		return fmt.Errorf("admitter consume: %w", err)
	}
	a.sh.Log.Info("admitter running")
	<-ctx.Done()
	cc.Drain()
	<-cc.Closed()
	return nil
}

func (a *Admitter) handle(ctx context.Context, m jetstream.Msg) {
	now := a.sh.Now()
	h := m.Headers()
	sub, fail := intake.Decode(m.Subject(), h.Get(schemas.HeaderContentType), h.Get(schemas.HeaderMsgID), m.Data(), a.cfg.MaxMessageBytes)
	if fail != nil {
		a.reject(ctx, m, fail, now)
		return
	}
	req := &sub.Request
	if e := req.Validate(now, a.cfg.ModelKnown, a.cfg.Limits); e != nil {
		a.reject(ctx, m, &intake.Failure{Tenant: sub.Tenant, ID: sub.ID, Format: sub.Format, Err: e}, now)
		return
	}
	priority := req.Priority
	if priority == "" {
		priority = a.cfg.DefaultPriority
	}
	deadline := req.EffectiveDeadline(now, a.cfg.DefaultDeadline[priority])
	adm := intake.Admit(sub, priority, req.Model, now, deadline)
	out, err := svc.Encode(subjects.Admitted(priority, subjects.DeadlineBucket(deadline.Sub(now)), sub.Tenant), schemas.Msgpack, adm, sub.ID)
	if err == nil {
		_, err = a.sh.JS.PublishMsg(ctx, out)
	}
	if err != nil {
		// Not acked: JetStream redelivers it, to this or another replica.
		a.sh.Log.Warn("publish admitted", "id", sub.ID, "err", err)
		m.NakWithDelay(time.Second)
		return
	}
	a.sh.Metrics.GetOrCreateCounter(fmt.Sprintf(`switchyard_admitted_total{class=%q}`, priority)).Inc()
	a.sh.Emit(schemas.Event{Kind: "admitted", RequestID: sub.ID, Tenant: sub.Tenant,
		Fields: map[string]any{"class": priority, "model": adm.Model, "prompt_tokens": adm.PromptTokens, "deadline_ms": deadline.Sub(now).Milliseconds()}})
	m.Ack()
}

// reject answers a submission with its specific error and, for unusable
// bytes, keeps the original in the DLQ. The message is acked only once the
// answer is stored.
func (a *Admitter) reject(ctx context.Context, m jetstream.Msg, f *intake.Failure, now time.Time) {
	if f.DeadLetter {
		raw := &nats.Msg{Subject: m.Subject(), Header: m.Headers(), Data: m.Data()}
		if err := a.sh.DeadLetter(ctx, raw, f.Err.Error()); err != nil {
			a.sh.Log.Warn("dead-letter", "err", err)
			m.NakWithDelay(time.Second)
			return
		}
	}
	a.sh.Emit(schemas.Event{Kind: "rejected", RequestID: f.ID, Tenant: f.Tenant, Reason: f.Err.Code,
		Fields: map[string]any{"message": f.Err.Message, "field": f.Err.Field}})
	a.sh.Metrics.GetOrCreateCounter(fmt.Sprintf(`switchyard_rejected_total{code=%q}`, f.Err.Code)).Inc()
	if !f.NoReply {
		res := svc.ErrorResult(f.ID, f.Tenant, "", f.Err, now)
		if err := a.sh.PublishResult(ctx, res, f.Format); err != nil {
			a.sh.Log.Warn("publish error result", "id", f.ID, "err", err)
			m.NakWithDelay(time.Second)
			return
		}
	}
	m.Ack()
}
