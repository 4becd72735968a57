// Package ledger owns the exactly-one-final-result guarantee. Every service
// that ends a request (admitter rejections, router failures, workers) calls
// Finish instead of publishing on sy.result.<tenant>.<id> itself.
//
// Two mechanisms, because each alone has a hole:
//   - a claim in the KV bucket sy_results: kv.Create(tenant.id) succeeds
//     exactly once, for as long as the claim lives (the results' retention),
//     so a worker that comes back long after its request was re-placed
//     loses, however late it is;
//   - the publish carries Nats-Msg-Id = request id, so the RESULTS stream
//     drops a second copy within its duplicate window.
//
// The claim holds the winning result's bytes. If the winner dies between
// claiming and publishing, the next finisher that loses the claim sees no
// result on the stream and publishes the winner's stored result for it; the
// Msg-Id makes that safe if the winner's publish lands too.
package ledger

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"log/slog"
	"regexp"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/switchyard-ai/switchyard/schemas"
	"github.com/switchyard-ai/switchyard/subjects"
)

// Bucket is the KV bucket of result claims.
const Bucket = "sy_results"

// EventDuplicateSuppressed is the event kind published when a finisher
// loses the claim and its result is dropped.
const EventDuplicateSuppressed = "duplicate_suppressed"

// Ledger publishes final results at most once per request id.
type Ledger struct {
	js      jetstream.JetStream
	kv      jetstream.KeyValue
	results jetstream.Stream
	service string
	log     *slog.Logger
}

type options struct {
	service  string
	replicas int
	ttl      time.Duration
	storage  jetstream.StorageType
	log      *slog.Logger
}

// Option configures New.
type Option func(*options)

// WithService names the service in duplicate_suppressed events (default
// "ledger").
func WithService(name string) Option { return func(o *options) { o.service = name } }

// WithReplicas sets the claim bucket's replicas (3 on an R3 cluster).
func WithReplicas(n int) Option { return func(o *options) { o.replicas = n } }

// WithTTL sets how long claims live; keep it at least the RESULTS stream's
// MaxAge (default 24 h, as subjects' default).
func WithTTL(d time.Duration) Option { return func(o *options) { o.ttl = d } }

// WithMemoryStorage keeps claims in memory (tests only: claims must survive
// a server restart in production).
func WithMemoryStorage() Option { return func(o *options) { o.storage = jetstream.MemoryStorage } }

// WithLogger sets the logger for best-effort failures (event publishing).
func WithLogger(l *slog.Logger) Option { return func(o *options) { o.log = l } }

// New creates or binds the claim bucket. The RESULTS stream must already be
// provisioned (subjects.Provision). Safe to call from every service.
func New(js jetstream.JetStream, opts ...Option) (*Ledger, error) {
	o := options{service: "ledger", replicas: 1, ttl: 24 * time.Hour, storage: jetstream.FileStorage, log: slog.Default()}
	for _, f := range opts {
		f(&o)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	kv, err := js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{
		Bucket:      Bucket,
		Description: "final-result claims: one key per tenant.request-id, created once",
		History:     1,
		TTL:         o.ttl,
		Storage:     o.storage,
		Replicas:    o.replicas,
	})
	if err != nil {
		return nil, fmt.Errorf("ledger bucket %s: %w", Bucket, err)
	}
	st, err := js.Stream(ctx, subjects.StreamResults)
	if err != nil {
		return nil, fmt.Errorf("ledger: stream %s: %w", subjects.StreamResults, err)
	}
	return &Ledger{js: js, kv: kv, results: st, service: o.service, log: o.log}, nil
}

var plainKey = regexp.MustCompile(`^[-_=a-zA-Z0-9]+$`)

// Key is the claim key for a request: "tenant.id" when both are plain, else
// "b64.<tenant>.<id>" in unpadded base64url (subject tokens may hold
// characters KV keys may not). A plain key has two tokens and an encoded one
// three, so the two forms never collide.
func Key(tenant, id string) string {
	if plainKey.MatchString(tenant) && plainKey.MatchString(id) {
		return tenant + "." + id
	}
	enc := base64.RawURLEncoding
	return "b64." + enc.EncodeToString([]byte(tenant)) + "." + enc.EncodeToString([]byte(id))
}

// claim encoding: one format byte, then the result body.
func encodeClaim(f schemas.Format, body []byte) []byte {
	return append([]byte{byte(f)}, body...)
}

func decodeClaim(v []byte) (schemas.Format, []byte, error) {
	if len(v) < 1 || (v[0] != byte(schemas.JSON) && v[0] != byte(schemas.Msgpack)) {
		return 0, nil, fmt.Errorf("ledger: malformed claim (%d bytes)", len(v))
	}
	return schemas.Format(v[0]), v[1:], nil
}

// Finish publishes res as the request's one final result. published is
// true when this call won the claim (its result is the final one); false,
// with a nil error, when another finisher won: the caller drops its result
// (the ledger has emitted a duplicate_suppressed event). An error means the
// outcome is unknown and Finish may be called again with the same result.
func (l *Ledger) Finish(ctx context.Context, res schemas.Result, format schemas.Format) (published bool, err error) {
	if !subjects.ValidToken(res.Tenant) || !subjects.ValidToken(res.ID) {
		return false, fmt.Errorf("ledger: result tenant %q / id %q are not subject tokens", res.Tenant, res.ID)
	}
	body, err := schemas.Marshal(format, res)
	if err != nil {
		return false, fmt.Errorf("ledger: encode result %s: %w", res.ID, err)
	}
	key := Key(res.Tenant, res.ID)
	_, err = l.kv.Create(ctx, key, encodeClaim(format, body))
	switch {
	case err == nil:
		if err := l.publish(ctx, res.Tenant, res.ID, format, body); err != nil {
			// The claim is ours; a retry of Finish finds it and re-publishes
			// (see below), so the result is not lost.
			return false, err
		}
		return true, nil
	case errors.Is(err, jetstream.ErrKeyExists):
		return l.lost(ctx, key, res, format, body)
	default:
		return false, fmt.Errorf("ledger: claim %s: %w", key, err)
	}
}

// lost handles a finisher that did not win the claim: make sure the
// winner's result is on the stream, and report the suppression unless this
// is the winner itself retrying after a failed publish (then it reports
// published, as the stored result is its own).
func (l *Ledger) lost(ctx context.Context, key string, res schemas.Result, format schemas.Format, body []byte) (bool, error) {
	entry, err := l.kv.Get(ctx, key)
	if err != nil {
		return false, fmt.Errorf("ledger: read claim %s: %w", key, err)
	}
	wf, wbody, err := decodeClaim(entry.Value())
	if err != nil {
		return false, err
	}
	if _, err := l.results.GetLastMsgForSubject(ctx, subjects.Result(res.Tenant, res.ID)); err != nil {
		if !errors.Is(err, jetstream.ErrMsgNotFound) {
			return false, fmt.Errorf("ledger: look up result %s: %w", res.ID, err)
		}
		// The winner claimed but its result is not on the stream (it died,
		// or is about to publish): publish the winner's result for it.
		if err := l.publish(ctx, res.Tenant, res.ID, wf, wbody); err != nil {
			return false, err
		}
	}
	if wf == format && string(wbody) == string(body) {
		return true, nil
	}
	var winner schemas.Result
	_ = schemas.Unmarshal(wf, wbody, &winner)
	l.event(ctx, res, winner)
	return false, nil
}

func (l *Ledger) publish(ctx context.Context, tenant, id string, f schemas.Format, body []byte) error {
	msg := nats.NewMsg(subjects.Result(tenant, id))
	msg.Data = body
	msg.Header.Set(schemas.HeaderContentType, f.String())
	msg.Header.Set(schemas.HeaderMsgID, id)
	if _, err := l.js.PublishMsg(ctx, msg); err != nil {
		return fmt.Errorf("ledger: publish result %s: %w", id, err)
	}
	return nil
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

// Done reports whether a final result has been claimed for the request: a
// worker checks it before starting work on a re-delivered dispatch, a
// router before re-placing.
func (l *Ledger) Done(ctx context.Context, tenant, id string) (bool, error) {
	_, err := l.kv.Get(ctx, Key(tenant, id))
	if err == nil {
		return true, nil
	}
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return false, nil
	}
	return false, fmt.Errorf("ledger: read claim for %s: %w", id, err)
}
