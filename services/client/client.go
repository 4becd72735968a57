// Package client is the small Go client for Switchyard: submit a request on
// sy.submit.<tenant>, then read its one final result from the RESULTS stream
// (which also serves late readers) and, optionally, follow its token stream.
// Any NATS client can do the same with plain publishes; this package only
// saves Go users the subject grammar and the codec.
package client

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"

	"github.com/switchyard-ai/switchyard/internal/adapter/bus"
	"github.com/switchyard-ai/switchyard/schemas"
	"github.com/switchyard-ai/switchyard/subjects"
)

// Client submits requests and reads results for any tenant the connection
// is permitted to use.
type Client struct {
	nc     *nats.Conn
	js     jetstream.JetStream
	format schemas.Format
}

// New wraps a connection. Requests are sent as msgpack unless WithJSON.
func New(nc *nats.Conn, opts ...Option) (*Client, error) {
	js, err := jetstream.New(nc, jetstream.WithPublishAsyncMaxPending(1024))
	if err != nil {
		return nil, fmt.Errorf("client jetstream: %w", err)
	}
	c := &Client{nc: nc, js: js, format: schemas.Msgpack}
	for _, o := range opts {
		o(c)
	}
	return c, nil
}

// Option configures a Client.
type Option func(*Client)

// WithJSON makes the client send JSON bodies.
func WithJSON() Option { return func(c *Client) { c.format = schemas.JSON } }

// ErrPayloadTooLarge is wrapped by a submission whose encoded request is
// larger than the NATS server carries (its max_payload). Retrying cannot
// help: shorten the prompt, or raise the server's max_payload (Switchyard's
// embedded server sets schemas.MaxPayload).
var ErrPayloadTooLarge = errors.New("request larger than the bus's max_payload")

// NewID returns a fresh request id.
func NewID() string { return nuid.Next() }

// Submit publishes req for tenant and waits for JetStream's ack, so an
// error-free return means the request is durably recorded. It fills in an
// id when the request has none and returns it.
func (c *Client) Submit(ctx context.Context, tenant string, req *schemas.Request) (string, error) {
	msg, err := c.message(tenant, req)
	if err != nil {
		return "", err
	}
	if _, err := c.js.PublishMsg(ctx, msg); err != nil {
		if errors.Is(err, nats.ErrMaxPayload) {
			return "", fmt.Errorf("submit %s: %w: %w", req.ID, ErrPayloadTooLarge, err)
		}
		return "", fmt.Errorf("submit %s: %w", req.ID, err)
	}
	return req.ID, nil
}

// Resubmit submits req until JetStream acknowledges it, backing off from
// 100 ms to 2 s between tries, until ctx ends. It is safe because every
// try carries the same id, which the SUBMIT stream dedupes — so ctx must
// end well inside the stream's duplicate window (2 minutes by default).
// Use it when an ack was lost: during a JetStream leader election a plain
// retry fails at once, again and again, while the election takes seconds.
func (c *Client) Resubmit(ctx context.Context, tenant string, req *schemas.Request) (string, error) {
	backoff := 100 * time.Millisecond
	for {
		tctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		id, err := c.Submit(tctx, tenant, req)
		cancel()
		if err == nil {
			return id, nil
		}
		if errors.Is(err, ErrPayloadTooLarge) || errors.Is(err, errInvalid) {
			return "", err // the same bytes would fail the same way
		}
		select {
		case <-ctx.Done():
			return "", fmt.Errorf("resubmit %s: %w (last: %w)", req.ID, ctx.Err(), err)
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 2*time.Second)
	}
}

// SubmitAsync publishes without waiting for the ack; the returned future
// reports it. Use it for bulk submission (batches, load generation).
func (c *Client) SubmitAsync(tenant string, req *schemas.Request) (jetstream.PubAckFuture, error) {
	msg, err := c.message(tenant, req)
	if err != nil {
		return nil, err
	}
	f, err := c.js.PublishMsgAsync(msg)
	if err != nil {
		return nil, fmt.Errorf("submit %s: %w", req.ID, err)
	}
	return f, nil
}

// SubmitBatchAsync publishes on the tenant's batch lane (sy.batch.<tenant>):
// bulk work, admitted by its own consumer on the batch class, so it never
// queues in front of interactive submissions.
func (c *Client) SubmitBatchAsync(tenant string, req *schemas.Request) (jetstream.PubAckFuture, error) {
	msg, err := c.message(tenant, req)
	if err != nil {
		return nil, err
	}
	msg.Subject = subjects.BatchSubmit(tenant)
	f, err := c.js.PublishMsgAsync(msg)
	if err != nil {
		return nil, fmt.Errorf("submit %s: %w", req.ID, err)
	}
	return f, nil
}

// PublishAsyncComplete is closed when every async submit has been acked.
func (c *Client) PublishAsyncComplete() <-chan struct{} { return c.js.PublishAsyncComplete() }

// errInvalid marks a submission the client refuses before publishing.
var errInvalid = errors.New("invalid submission")

func (c *Client) message(tenant string, req *schemas.Request) (*nats.Msg, error) {
	if !subjects.ValidToken(tenant) {
		return nil, fmt.Errorf("%w: tenant %q is not a valid subject token", errInvalid, tenant)
	}
	if req.ID == "" {
		req.ID = NewID()
	}
	data, err := schemas.Marshal(c.format, req)
	if err != nil {
		return nil, err
	}
	msg := nats.NewMsg(subjects.Submit(tenant))
	msg.Data = data
	msg.Header.Set(schemas.HeaderContentType, c.format.String())
	msg.Header.Set(schemas.HeaderMsgID, req.ID)
	// Checked here rather than left to the publish, which fails the same
	// way on every try, so that callers can tell it from a bus outage.
	if limit := c.nc.MaxPayload(); limit > 0 && int64(len(data)) > limit {
		return nil, fmt.Errorf("submit %s: %w: the encoded request is %d bytes, the NATS server carries at most %d (max_payload)",
			req.ID, ErrPayloadTooLarge, len(data), limit)
	}
	return msg, nil
}

// Result waits for the final result of one request, whether it was
// published before or after the call: it listens on the result subject,
// then looks the result up in RESULTS by subject (a direct get), and waits
// for the live one only if nothing is stored yet. It needs no consumer, so
// a tenant confined by `switchyard auth` (which may subscribe to its own
// results and direct-get them, nothing more) can call it.
func (c *Client) Result(ctx context.Context, tenant, id string) (schemas.Result, error) {
	subj := subjects.Result(tenant, id)
	sub, err := c.nc.SubscribeSync(subj)
	if err != nil {
		return schemas.Result{}, fmt.Errorf("result %s: subscribe: %w", id, err)
	}
	defer sub.Unsubscribe()
	// The interest must reach the server before the lookup: a result
	// stored after the lookup is then delivered live, not missed between.
	fctx, cancel := context.WithTimeout(ctx, 10*time.Second) // nats.go's flush needs a deadline
	err = c.nc.FlushWithContext(fctx)
	cancel()
	if err != nil {
		return schemas.Result{}, fmt.Errorf("result %s: flush: %w", id, err)
	}
	for {
		if r, found, err := c.stored(ctx, subj); err != nil || found {
			return r, err
		}
		// A live delivery can be lost across a reconnect; look in RESULTS
		// again every few seconds rather than wait on it forever.
		wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		msg, err := sub.NextMsgWithContext(wctx)
		cancel()
		if err == nil {
			return DecodeResult(msg.Header, msg.Data)
		}
		if ctx.Err() != nil {
			return schemas.Result{}, ctx.Err()
		}
		if !errors.Is(err, context.DeadlineExceeded) {
			return schemas.Result{}, fmt.Errorf("result %s: %w", id, err)
		}
	}
}

// stored reads the last message on a result subject with a direct get on
// the subject itself ($JS.API.DIRECT.GET.RESULTS.<subject>), the one read
// of RESULTS that NATS permissions can confine to a tenant's own subjects.
func (c *Client) stored(ctx context.Context, subj string) (schemas.Result, bool, error) {
	msg, err := c.nc.RequestWithContext(ctx, "$JS.API.DIRECT.GET."+subjects.StreamResults+"."+subj, nil)
	if err != nil {
		return schemas.Result{}, false, fmt.Errorf("read %s from %s: %w", subj, subjects.StreamResults, err)
	}
	switch status := msg.Header.Get("Status"); status {
	case "":
		r, err := DecodeResult(msg.Header, msg.Data)
		return r, err == nil, err
	case "404":
		return schemas.Result{}, false, nil
	default:
		return schemas.Result{}, false, fmt.Errorf("read %s from %s: status %s %s", subj, subjects.StreamResults, status, msg.Header.Get("Description"))
	}
}

// ReadResults calls fn, in stream order, for every result of tenant ("*"
// for all) stored at or after since (zero: from the start), up to the
// last one stored when the read began, then returns. It is how a caller
// that may have missed live deliveries — an ordered consumer reset by a
// server's death — reconciles against the durable record in one pass.
func (c *Client) ReadResults(ctx context.Context, tenant string, since time.Time, fn func(schemas.Result)) error {
	st, err := c.js.Stream(ctx, subjects.StreamResults)
	if err != nil {
		return fmt.Errorf("read results: %w", err)
	}
	cfg := jetstream.OrderedConsumerConfig{FilterSubjects: []string{subjects.Result(tenant, "*")}}
	if !since.IsZero() {
		cfg.DeliverPolicy = jetstream.DeliverByStartTimePolicy
		cfg.OptStartTime = &since
	}
	err = bus.ReadStored(ctx, st, cfg, 0, 2*time.Second, func(m jetstream.Msg, _ *jetstream.MsgMetadata) {
		if r, err := DecodeResult(m.Headers(), m.Data()); err == nil {
			fn(r)
		}
	})
	if err != nil {
		return fmt.Errorf("read results: %w", err)
	}
	return nil
}

// DecodeResult decodes a result message body by its Content-Type
// (bus.DecodeResult), for Go users reading RESULTS themselves.
func DecodeResult(h nats.Header, data []byte) (schemas.Result, error) {
	return bus.DecodeResult(h, data)
}

// Do submits and waits for the result.
func (c *Client) Do(ctx context.Context, tenant string, req *schemas.Request) (schemas.Result, error) {
	id, err := c.Submit(ctx, tenant, req)
	if err != nil {
		return schemas.Result{}, err
	}
	return c.Result(ctx, tenant, id)
}

// Results delivers every result published for tenant ("*" for all) from
// now on to fn, until ctx ends. It is what a dashboard, a batch collector or
// the demo's accountant uses.
func (c *Client) Results(ctx context.Context, tenant string, fn func(schemas.Result)) error {
	cons, err := c.js.OrderedConsumer(ctx, subjects.StreamResults, jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{subjects.Result(tenant, "*")},
		DeliverPolicy:  jetstream.DeliverNewPolicy,
	})
	if err != nil {
		return fmt.Errorf("results consumer: %w", err)
	}
	cc, err := cons.Consume(func(m jetstream.Msg) {
		r, err := DecodeResult(m.Headers(), m.Data())
		if err != nil {
			return
		}
		fn(r)
	})
	if err != nil {
		return fmt.Errorf("results consume: %w", err)
	}
	<-ctx.Done()
	cc.Stop()
	return nil
}

// Stream follows a request's token stream, calling fn for each chunk in
// order; unsubscribe after the Done chunk. Subscribe before submitting:
// followers read chunks as core NATS, from the moment they subscribe.
//
// When a request's worker is lost mid-stream, the worker that takes it over
// continues the stream after the last chunk TOKENS stored (the same Seq
// sequence, a higher Attempt). fn never sees a chunk twice: one whose Seq
// was already delivered is dropped, and so is any chunk of an attempt older
// than one already seen (a lost worker that was only silent, not dead).
func (c *Client) Stream(tenant, id string, fn func(schemas.TokenChunk)) (*nats.Subscription, error) {
	var f StreamFilter
	return c.nc.Subscribe(subjects.Tokens(tenant, id), func(m *nats.Msg) {
		format, err := schemas.FormatFromContentType(m.Header.Get(schemas.HeaderContentType))
		if err != nil {
			return
		}
		var ch schemas.TokenChunk
		if schemas.Unmarshal(format, m.Data, &ch) == nil && f.Admit(ch) {
			fn(ch)
		}
	})
}

// StreamFilter keeps a follower from delivering a token chunk twice when a
// request fails over mid-stream: Admit reports whether a chunk is new. The
// zero value is ready; it is not safe for concurrent use.
type StreamFilter struct {
	lastSeq uint64
	attempt int
}

// Admit reports whether ch should be delivered: its Seq is past every one
// delivered, and its attempt is not older than one already seen. A gap in
// Seq is admitted, for the caller to notice.
func (f *StreamFilter) Admit(ch schemas.TokenChunk) bool {
	if ch.Seq <= f.lastSeq || ch.Attempt < f.attempt {
		return false
	}
	f.lastSeq, f.attempt = ch.Seq, ch.Attempt
	return true
}
