// Package ledger owns the exactly-one-final-result guarantee. Every service
// that ends a request (admitter rejections, router failures, workers) calls
// Finish instead of publishing a result itself.
//
// Finish publishes on sy.final.<tenant>.<id>, which only the RESULTS stream
// hears: it stores the message as sy.result.<tenant>.<id> and republishes
// what it stored there, so live subscribers see exactly the results this
// ledger kept — never a loser's. The result is published with a
// compare-and-set on its stored subject:
// Nats-Expected-Last-Subject-Sequence 0 says "only if this subject holds no
// message yet", so the RESULTS stream itself is the claim. It is atomic —
// there is no window between claiming and publishing for a finisher to die
// in — and it lasts as long as RESULTS keeps the result, far beyond the
// Nats-Msg-Id duplicate window, so a worker that comes back long after its
// request was re-placed still loses, however late it is. One stored
// message per result, not two.
package ledger

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/switchyard-ai/switchyard/schemas"
	"github.com/switchyard-ai/switchyard/subjects"
)

// EventDuplicateSuppressed is the event kind published when a finisher
// loses the claim and its result is dropped.
const EventDuplicateSuppressed = "duplicate_suppressed"

// Ledger publishes final results at most once per request id.
type Ledger struct {
	js      jetstream.JetStream
	results jetstream.Stream
	service string
	log     *slog.Logger
}

type options struct {
	service string
	log     *slog.Logger
}

// Option configures New.
type Option func(*options)

// WithService names the service in duplicate_suppressed events (default
// "ledger").
func WithService(name string) Option { return func(o *options) { o.service = name } }

// WithLogger sets the logger for best-effort failures (event publishing).
func WithLogger(l *slog.Logger) Option { return func(o *options) { o.log = l } }

// New binds the ledger to the RESULTS stream, which must already be
// provisioned (subjects.Provision). Safe to call from every service.
func New(js jetstream.JetStream, opts ...Option) (*Ledger, error) {
	o := options{service: "ledger", log: slog.Default()}
	for _, f := range opts {
		f(&o)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st, err := js.Stream(ctx, subjects.StreamResults)
	if err != nil {
		return nil, fmt.Errorf("ledger: stream %s: %w", subjects.StreamResults, err)
	}
	return &Ledger{js: js, results: st, service: o.service, log: o.log}, nil
}

// Finish publishes res as the request's one final result. published is
// true when this call's result is the final one (also when it is this
// finisher's own earlier publish being retried); false, with a nil error,
// when another finisher won: the caller drops its result (the ledger has
// emitted a duplicate_suppressed event). An error means the outcome is
// unknown and Finish may be called again with the same result.
func (l *Ledger) Finish(ctx context.Context, res schemas.Result, format schemas.Format) (published bool, err error) {
	// An id too long for a request id still carries its own invalid_id
	// refusal, so the client listening on it hears why.
	idOK := subjects.ValidToken(res.ID) ||
		(res.Error != nil && res.Error.Code == schemas.CodeInvalidID && subjects.ValidAnswerToken(res.ID))
	if !subjects.ValidToken(res.Tenant) || !idOK {
		return false, fmt.Errorf("ledger: result tenant %q / id %q are not subject tokens", res.Tenant, res.ID)
	}
	body, err := schemas.Marshal(format, res)
	if err != nil {
		return false, fmt.Errorf("ledger: encode result %s: %w", res.ID, err)
	}
	subj := subjects.Result(res.Tenant, res.ID)
	msg := nats.NewMsg(subjects.Final(res.Tenant, res.ID))
	msg.Data = body
	msg.Header.Set(schemas.HeaderContentType, format.String())
	msg.Header.Set(schemas.HeaderMsgID, res.ID)
	ack, err := l.js.PublishMsg(ctx, msg, jetstream.WithExpectLastSequencePerSubject(0))
	if err == nil {
		if ack.Duplicate {
			// Within the duplicate window the stream answers a second
			// publish with the first one's ack: decide by content.
			return l.lost(ctx, subj, res, format, body)
		}
		return true, nil
	}
	var apiErr *jetstream.APIError
	if errors.As(err, &apiErr) && (apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence ||
		apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequenceConstant) {
		return l.lost(ctx, subj, res, format, body)
	}
	return false, fmt.Errorf("ledger: publish result %s: %w", res.ID, err)
}

// lost handles a finisher whose publish found a result already there: it is
// either this finisher's own earlier publish (a retry after a lost ack:
// published) or another's (suppressed, with an event).
func (l *Ledger) lost(ctx context.Context, subj string, res schemas.Result, format schemas.Format, body []byte) (bool, error) {
	m, err := l.results.GetLastMsgForSubject(ctx, subj)
	if err != nil {
		return false, fmt.Errorf("ledger: read result %s: %w", res.ID, err)
	}
	if string(m.Data) == string(body) {
		return true, nil
	}
	var winner schemas.Result
	wf, _ := schemas.FormatFromContentType(m.Header.Get(schemas.HeaderContentType))
	_ = schemas.Unmarshal(wf, m.Data, &winner)
	l.event(ctx, res, winner)
	return false, nil
}

func (l *Ledger) event(ctx context.Context, dropped, winner schemas.Result) {
	ev := schemas.Event{
		At:        time.Now().UTC(),
		Service:   l.service,
		Kind:      EventDuplicateSuppressed,
		RequestID: dropped.ID,
		Tenant:    dropped.Tenant,
		WorkerID:  dropped.WorkerID,
		Reason:    "a final result for this request was already published; this one is dropped",
		Fields: map[string]any{
			"dropped_status":  dropped.Status,
			"dropped_attempt": dropped.Attempt,
			"winner_status":   winner.Status,
			"winner_worker":   winner.WorkerID,
			"winner_attempt":  winner.Attempt,
		},
	}
	data, err := schemas.Marshal(schemas.JSON, ev)
	if err == nil {
		msg := nats.NewMsg(subjects.Event(l.service, EventDuplicateSuppressed))
		msg.Data = data
		msg.Header.Set(schemas.HeaderContentType, schemas.JSON.String())
		_, err = l.js.PublishMsg(ctx, msg)
	}
	if err != nil {
		l.log.Warn("duplicate_suppressed event not published", "request_id", dropped.ID, "err", err)
	}
}

// Stored returns the request's stored final result message, with found
// false when there is none. The admitter uses it to answer an id that is
// reused after the submission duplicate window with the result already
// kept for it.
func (l *Ledger) Stored(ctx context.Context, tenant, id string) (msg *jetstream.RawStreamMsg, found bool, err error) {
	m, err := l.results.GetLastMsgForSubject(ctx, subjects.Result(tenant, id))
	if err == nil {
		return m, true, nil
	}
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return nil, false, nil
	}
	return nil, false, fmt.Errorf("ledger: look up result for %s: %w", id, err)
}

// Done reports whether a final result exists for the request: a worker
// checks it before starting work on a re-delivered dispatch, a router before
// adopting an in-flight one.
func (l *Ledger) Done(ctx context.Context, tenant, id string) (bool, error) {
	_, err := l.results.GetLastMsgForSubject(ctx, subjects.Result(tenant, id))
	if err == nil {
		return true, nil
	}
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return false, nil
	}
	return false, fmt.Errorf("ledger: look up result for %s: %w", id, err)
}
