package subjects

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// Stream names.
const (
	StreamSubmit     = "SUBMIT"
	StreamAdmitted   = "ADMITTED"
	StreamDispatch   = "DISPATCH"
	StreamResults    = "RESULTS"
	StreamHeartbeats = "HEARTBEATS"
	StreamEvents     = "EVENTS"
	StreamControl    = "CONTROL"
	StreamDLQ        = "DLQ"
	StreamJournal    = "JOURNAL"
	StreamTokens     = "TOKENS"
	StreamHandoffs   = "HANDOFFS"
)

// TokensMaxAge is how long the TOKENS stream keeps a streamed request's
// chunks: long enough for the router to notice a lost worker and for the
// re-placed attempt to read them back, short enough that memory holds them.
const TokensMaxAge = 10 * time.Minute

// HandoffsMaxAge is how long the HANDOFFS stream keeps a prefill leg's KV
// handle: a handle matters only while its KV is held on the prefill worker
// (seconds to a few minutes) and until the router has answered it; a
// router that was down longer re-places the request anyway.
const HandoffsMaxAge = 10 * time.Minute

// StreamOptions sizes the streams. The zero value gives the defaults used
// by the one-machine setup.
type StreamOptions struct {
	Replicas int
	Storage  jetstream.StorageType
	// MaxAge bounds history (limits retention): long enough to replay an
	// incident window, short enough that a laptop does not fill its disk.
	MaxAge   time.Duration
	MaxBytes int64
	// DuplicateWindow is the Nats-Msg-Id dedupe window.
	DuplicateWindow time.Duration
}

func (o StreamOptions) withDefaults() StreamOptions {
	if o.Replicas == 0 {
		o.Replicas = 1
	}
	if o.MaxAge == 0 {
		o.MaxAge = 24 * time.Hour
	}
	if o.MaxBytes == 0 {
		o.MaxBytes = 1 << 30
	}
	if o.DuplicateWindow == 0 {
		o.DuplicateWindow = 2 * time.Minute
	}
	return o
}

// Streams returns every stream Switchyard uses. All keep history under
// limits retention so that any window can be replayed; consumers track
// their own progress with acks. Dedupe on Nats-Msg-Id (= request id, or
// request id + attempt for dispatches) makes publishing idempotent.
func Streams(o StreamOptions) []jetstream.StreamConfig {
	o = o.withDefaults()
	mk := func(name, desc string, subj []string, maxAge time.Duration, bytesShare int64) jetstream.StreamConfig {
		return jetstream.StreamConfig{
			Name:        name,
			Description: desc,
			Subjects:    subj,
			Retention:   jetstream.LimitsPolicy,
			Storage:     o.Storage,
			Replicas:    o.Replicas,
			MaxAge:      maxAge,
			MaxBytes:    o.MaxBytes / bytesShare,
			Discard:     jetstream.DiscardOld,
			Duplicates:  o.DuplicateWindow,
		}
	}
	short := o.MaxAge
	if short > 6*time.Hour {
		short = 6 * time.Hour
	}
	admitted := mk(StreamAdmitted, "admitted requests by class, deadline bucket and tenant", []string{AdmittedAll, ScheduleAll}, o.MaxAge, 4)
	// Batch-class work may be deferred to a trough with a scheduled message.
	admitted.AllowMsgSchedules = true
	return []jetstream.StreamConfig{
		mk(StreamSubmit, "client submissions, as sent", []string{SubmitAll, BatchSubmitAll}, o.MaxAge, 4),
		admitted,
		mk(StreamDispatch, "router placements, one subject per worker", []string{DispatchAll}, o.MaxAge, 8),
		results(mk, o.MaxAge),
		mk(StreamHeartbeats, "worker heartbeats and KV events, recorded for replay", []string{HeartbeatAll, KVAll}, short, 8),
		mk(StreamEvents, "every decision with its reasons", []string{EventAll}, o.MaxAge, 8),
		mk(StreamControl, "control-plane commands", []string{ControlAll}, o.MaxAge, 16),
		mk(StreamDLQ, "messages that could not be decoded, with the reason", []string{DLQAll}, o.MaxAge, 16),
		mk(StreamJournal, "each decision loop's inputs in order, for exact replay", []string{JournalAll}, short, 8),
		tokens(mk, o.MaxAge),
		handoffs(mk, o.MaxAge),
	}
}

// handoffs is the HANDOFFS stream: the KV handles prefill legs leave (and
// the failed ones decode legs report) on sy.handoff.<tenant>.<id>. Stored,
// because the prefill worker acks its dispatch once its handle is stored:
// from then on the handle is the only durable record that the request is
// between its legs, and the routers' shared consumer redelivers it if the
// router that pulled it dies before the decode leg's dispatch is stored.
// Dedupe on Nats-Msg-Id (id + attempt and a kind suffix) makes a prefill
// leg that runs again after a restart leave one handle, not two.
func handoffs(mk func(string, string, []string, time.Duration, int64) jetstream.StreamConfig, maxAge time.Duration) jetstream.StreamConfig {
	cfg := mk(StreamHandoffs, "KV handles between a split request's prefill and decode legs", []string{HandoffAll()}, min(maxAge, HandoffsMaxAge), 16)
	cfg.Duplicates = min(cfg.Duplicates, cfg.MaxAge)
	return cfg
}

// results is the RESULTS stream, the ledger of final results. Finishers
// publish on sy.final.<tenant>.<id>; the stream stores each message under
// sy.result.<tenant>.<id> (its subject transform), and republishes what it
// stored on that subject. A live subscriber therefore sees exactly the
// results the ledger kept: a second finisher's publish, refused by the
// ledger's compare-and-set or dropped by the duplicate window, is never
// stored and so never reaches it. Direct gets are allowed so a tenant can
// read its own stored result by subject
// ($JS.API.DIRECT.GET.RESULTS.sy.result.<tenant>.<id>, which permissions
// can confine) without any consumer.
func results(mk func(string, string, []string, time.Duration, int64) jetstream.StreamConfig, maxAge time.Duration) jetstream.StreamConfig {
	cfg := mk(StreamResults, "final results, one per request id", []string{FinalAll}, maxAge, 4)
	cfg.SubjectTransform = &jetstream.SubjectTransformConfig{Source: FinalAll, Destination: ResultAll}
	cfg.RePublish = &jetstream.RePublish{Source: ResultAll, Destination: ResultAll}
	cfg.AllowDirect = true
	return cfg
}

// tokens is the TOKENS stream: every chunk a worker streamed, captured from
// its plain publishes (followers still read them as core NATS), so that a
// worker taking over a request lost mid-stream continues from exactly what
// the client received. Memory storage and a short age: the chunks matter
// only while the request may still fail over; the Result is the record.
func tokens(mk func(string, string, []string, time.Duration, int64) jetstream.StreamConfig, maxAge time.Duration) jetstream.StreamConfig {
	cfg := mk(StreamTokens, "streamed token chunks, kept briefly so a re-placed request resumes mid-stream", []string{TokensAll}, min(maxAge, TokensMaxAge), 16)
	cfg.Storage = jetstream.MemoryStorage
	// Chunks carry no Nats-Msg-Id; the window only has to fit the age.
	cfg.Duplicates = min(cfg.Duplicates, cfg.MaxAge)
	return cfg
}

// Provision creates or updates every stream. It is idempotent and safe to
// call from every service at start.
//
// On a cluster, services starting together race to create the same
// replicated streams and a create can time out while the stream's group
// forms; each stream is retried with backoff until ctx ends or a minute
// passes.
func Provision(ctx context.Context, js jetstream.JetStream, o StreamOptions) error {
	for _, cfg := range Streams(o) {
		var err error
		wait := 250 * time.Millisecond
		deadline := time.Now().Add(time.Minute)
		for {
			actx, cancel := context.WithTimeout(ctx, 10*time.Second)
			_, err = js.CreateOrUpdateStream(actx, cfg)
			cancel()
			if err == nil || errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) {
				break
			}
			if ctx.Err() != nil || time.Now().After(deadline) {
				return fmt.Errorf("provision stream %s: %w", cfg.Name, err)
			}
			select {
			case <-ctx.Done():
				return fmt.Errorf("provision stream %s: %w", cfg.Name, ctx.Err())
			case <-time.After(wait):
			}
			wait = min(2*wait, 4*time.Second)
		}
	}
	return nil
}
