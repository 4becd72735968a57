package worker

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/switchyard-ai/switchyard/schemas"
	"github.com/switchyard-ai/switchyard/services/svc"
	"github.com/switchyard-ai/switchyard/subjects"
)

// Chunking: a streamed request's tokens go out in coarse chunks, not one
// message per token, because every chunk is also a stored message in
// TOKENS (the failover record). The first token goes out at once (time to
// first token is what a user feels); after it a chunk closes when it holds
// chunkTokens tokens or chunkInterval has passed since the last one, about
// 20 chunks a second for a stream decoding at 6 ms a token instead of 160.
const (
	chunkTokens   = 8
	chunkInterval = 50 * time.Millisecond
)

// resumeReadTimeout bounds reading a lost attempt's chunks back from TOKENS.
const resumeReadTimeout = 5 * time.Second

// tokenStream is one request's outgoing token stream on this worker: what
// it has published (counting what earlier attempts streamed, when it took
// the request over mid-stream) and the chunk it is filling.
type tokenStream struct {
	tenant, id, format string
	attempt            int
	seq                uint64 // last chunk published
	tokens             int    // output tokens published
	text               strings.Builder
	pending            strings.Builder
	pendingTokens      int
	lastFlush          time.Time
	done               bool
}

func newTokenStream(a *schemas.Admitted) *tokenStream {
	return &tokenStream{tenant: a.Tenant, id: a.Request.ID, format: a.ResultFormat, attempt: a.Attempt}
}

// continueFrom makes the stream carry on after what earlier attempts sent.
func (s *tokenStream) continueFrom(r streamed) {
	s.seq, s.tokens = r.seq, r.tokens
	s.text.WriteString(r.text)
}

// add queues n tokens of text and reports whether the chunk should go out now.
func (s *tokenStream) add(text string, n int, now time.Time) bool {
	s.pending.WriteString(text)
	s.pendingTokens += n
	return s.seq == 0 || s.pendingTokens >= chunkTokens || now.Sub(s.lastFlush) >= chunkInterval
}

// due reports whether a partly filled chunk has waited long enough.
func (s *tokenStream) due(now time.Time) bool {
	return s.pendingTokens > 0 && now.Sub(s.lastFlush) >= chunkInterval
}

// Text is everything streamed so far, pending tokens included.
func (s *tokenStream) Text() string { return s.text.String() + s.pending.String() }

// Tokens is how many output tokens were streamed, pending ones included.
func (s *tokenStream) Tokens() int { return s.tokens + s.pendingTokens }

// flush publishes the pending chunk, if any, and with done the final
// marker after it.
func (w *Worker) flush(s *tokenStream, done bool) {
	if s.done {
		return
	}
	now := w.sh.Now()
	if s.pendingTokens > 0 || s.pending.Len() > 0 {
		s.seq++
		text := s.pending.String()
		w.publishChunk(s, schemas.TokenChunk{Seq: s.seq, Text: text, Tokens: s.pendingTokens, At: now})
		s.text.WriteString(text)
		s.tokens += s.pendingTokens
		s.pending.Reset()
		s.pendingTokens = 0
		s.lastFlush = now
	}
	if done {
		s.seq++
		w.publishChunk(s, schemas.TokenChunk{Seq: s.seq, Done: true, At: now})
		s.done = true
	}
}

// publishChunk sends one chunk as a plain publish: live followers get it
// as core NATS, and TOKENS captures it in the order this connection sent
// it. Nothing waits for a stored ack — a chunk is on the hot path of every
// token. No Nats-Msg-Id either: two attempts racing for one seq are
// resolved by readers keeping the first (StreamFilter, readStreamed), and
// the server need not remember an id per chunk for the duplicate window.
func (w *Worker) publishChunk(s *tokenStream, ch schemas.TokenChunk) {
	ch.V, ch.ID, ch.Attempt = schemas.Version, s.id, s.attempt
	m, err := svc.Encode(subjects.Tokens(s.tenant, s.id), svc.ResultFormat(s.format), ch, "")
	if err != nil {
		w.sh.Log.Warn("encode token chunk", "id", s.id, "err", err)
		return
	}
	if err := w.sh.NC.PublishMsg(m); err != nil {
		w.sh.Log.Warn("publish token chunk", "id", s.id, "seq", ch.Seq, "err", err)
	}
}

// streamed is what earlier attempts of a request streamed, read back from
// TOKENS.
type streamed struct {
	seq     uint64 // last chunk
	tokens  int
	text    string
	done    bool      // the final marker was sent
	firstAt time.Time // when the first token went out
	lastAt  time.Time // when the last chunk with tokens went out
	attempt int       // the latest attempt that streamed
}

// errIncompleteRecord means TOKENS does not hold every chunk the client may
// have received, so continuing would repeat or skip text.
var errIncompleteRecord = errors.New("the stored token stream is incomplete")

// readStreamed reads back every chunk stored for one request, in order. A
// request nothing was streamed for reads as zero. The chunks must run from
// seq 1 without a gap; a duplicate seq (two attempts racing) keeps the
// first, as followers do.
func readStreamed(ctx context.Context, js jetstream.JetStream, tenant, id string) (streamed, error) {
	ctx, cancel := context.WithTimeout(ctx, resumeReadTimeout)
	defer cancel()
	subj := subjects.Tokens(tenant, id)
	st, err := js.Stream(ctx, subjects.StreamTokens)
	if err != nil {
		return streamed{}, fmt.Errorf("token stream %s: %w", subjects.StreamTokens, err)
	}
	last, err := st.GetLastMsgForSubject(ctx, subj)
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return streamed{}, nil
	}
	if err != nil {
		return streamed{}, fmt.Errorf("last chunk of %s: %w", id, err)
	}
	cons, err := st.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{FilterSubjects: []string{subj}})
	if err != nil {
		return streamed{}, fmt.Errorf("read chunks of %s: %w", id, err)
	}
	var out streamed
	var text strings.Builder
	for {
		// Everything up to last is stored already: take what is there
		// without waiting out a fetch's expiry for more.
		batch, err := cons.FetchNoWait(256)
		if err != nil {
			return streamed{}, fmt.Errorf("read chunks of %s: %w", id, err)
		}
		got := 0
		reached := false
		for m := range batch.Messages() {
			got++
			var ch schemas.TokenChunk
			if err := svc.Decode(m.Headers(), m.Data(), &ch); err != nil {
				return streamed{}, fmt.Errorf("chunk of %s: %w", id, err)
			}
			md, err := m.Metadata()
			if err != nil {
				return streamed{}, fmt.Errorf("chunk of %s: %w", id, err)
			}
			reached = reached || md.Sequence.Stream >= last.Sequence
			switch {
			case ch.Seq <= out.seq:
				continue // a racing attempt's duplicate: the first one stands
			case ch.Seq != out.seq+1:
				return streamed{}, fmt.Errorf("%w: %s jumps from chunk %d to %d", errIncompleteRecord, id, out.seq, ch.Seq)
			}
			if out.seq == 0 {
				out.firstAt = ch.At
			}
			if ch.Tokens > 0 {
				out.lastAt = ch.At
			}
			out.seq = ch.Seq
			out.attempt = max(out.attempt, ch.Attempt)
			out.tokens += ch.Tokens
			text.WriteString(ch.Text)
			out.done = out.done || ch.Done
		}
		if err := batch.Error(); err != nil && !errors.Is(err, jetstream.ErrNoMessages) {
			return streamed{}, fmt.Errorf("read chunks of %s: %w", id, err)
		}
		if reached {
			break
		}
		if got == 0 {
			select {
			case <-ctx.Done():
				return streamed{}, fmt.Errorf("read chunks of %s: %w", id, ctx.Err())
			case <-time.After(10 * time.Millisecond):
			}
		}
	}
	out.text = text.String()
	return out, nil
}

// resumePoint is where a dispatch starts: from nothing, or after what an
// earlier attempt streamed before its worker was lost. A streamed request
// that was dispatched before (a re-placement, or a redelivery to this
// worker after a restart) is read back from TOKENS; ok false means the
// dispatch was answered here already (an error result, or a Nak to try
// again) and the caller stops.
func (w *Worker) resumePoint(ctx context.Context, d schemas.Dispatch, m jetstream.Msg) (streamed, bool) {
	a := d.Admitted
	if !a.Request.Stream {
		return streamed{}, true
	}
	redelivered := false
	if md, err := m.Metadata(); err == nil {
		redelivered = md.NumDelivered > 1
	}
	if a.Attempt == 0 && !redelivered {
		return streamed{}, true
	}
	r, err := readStreamed(ctx, w.sh.JS, a.Tenant, a.Request.ID)
	switch {
	case err == nil && r.attempt > a.Attempt:
		// A newer attempt owns the stream (this is an old dispatch
		// redelivered to a worker that came back): computing it again
		// would only race that attempt for the same chunks.
		w.sh.Emit(schemas.Event{Kind: "skipped_superseded", RequestID: a.Request.ID, Tenant: a.Tenant, WorkerID: w.cfg.ID,
			Reason: fmt.Sprintf("attempt %d already streams it (chunk %d)", r.attempt, r.seq)})
		m.Ack()
	case err == nil:
		if r.seq > 0 {
			w.sh.Log.Info("resuming a stream", "id", a.Request.ID, "attempt", a.Attempt, "after_seq", r.seq, "tokens", r.tokens, "done", r.done)
		}
		return r, true
	case errors.Is(err, errIncompleteRecord), errors.Is(err, jetstream.ErrStreamNotFound):
		// Continuing would repeat or skip text the client may have seen
		// (a gap, or no TOKENS stream to read at all): say so rather than
		// fake continuity. No worker id: this says nothing about this GPU.
		e := schemas.Errf(schemas.CodeWorkerFailed, "", "its worker was lost mid-stream and the stream cannot be continued truthfully: %v", err)
		w.finish(ctx, d, m, svc.ErrorResult(a.Request.ID, a.Tenant, a.Priority, e, w.sh.Now()))
	default:
		w.sh.Log.Warn("read back a lost attempt's stream; retrying", "id", a.Request.ID, "err", err)
		m.NakWithDelay(time.Second)
	}
	return streamed{}, false
}

// answerFromRecord finishes a request whose earlier attempt streamed its
// whole answer but was lost before its result was stored: the record holds
// every token, so nothing is computed again.
func (w *Worker) answerFromRecord(ctx context.Context, d schemas.Dispatch, m jetstream.Msg, r streamed, simulated bool) {
	a := d.Admitted
	s := newTokenStream(&a)
	s.continueFrom(r)
	if !r.done {
		w.flush(s, true)
	}
	now := w.sh.Now()
	res := schemas.Result{
		ID: a.Request.ID, Tenant: a.Tenant, Status: schemas.StatusOK, Model: a.Model, Text: r.text, FinishReason: "length",
		Usage:    schemas.Usage{PromptTokens: a.PromptTokens, CompletionTokens: r.tokens},
		Timing:   schemas.Timing{QueueMs: ms(d.PlacedAt.Sub(a.SubmittedAt)), TTFTMs: ms(r.firstAt.Sub(a.SubmittedAt)), TotalMs: ms(now.Sub(a.SubmittedAt))},
		WorkerID: w.cfg.ID, GPU: w.replica.GPU.Name, Simulated: simulated, Priority: a.Priority, Attempt: a.Attempt, FinishedAt: now,
		Reliability: &schemas.Reliability{ResumedFromSeq: r.seq, ResumedTokens: r.tokens, LostWorkers: a.ExcludeWorkers},
	}
	dl := a.Deadline
	res.Deadline = &dl
	itl := 0.0
	if r.tokens > 1 && r.lastAt.After(r.firstAt) {
		itl = ms(r.lastAt.Sub(r.firstAt)) / float64(r.tokens-1)
	}
	res.Timing.ITLMs = itl
	res.SLOMet = sloMet(&a, r.firstAt.Sub(a.SubmittedAt), itl, now)
	w.finish(ctx, d, m, res)
}

// simWords generates SimulatedText word by word, so that a stream's chunks
// concatenate to exactly the text of its final result, and a worker that
// resumes a stream after k tokens continues with the words a single worker
// would have produced.
type simWords struct {
	x uint64
	n int // words produced
}

func newSimWords(seed string) simWords {
	return simWords{x: fnvSeed(seed)}
}

// next returns the next n words, with a separating space before each word
// but the very first.
func (g *simWords) next(n int) string {
	var b strings.Builder
	for range n {
		g.x ^= g.x << 13
		g.x ^= g.x >> 7
		g.x ^= g.x << 17
		if g.n > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(vocab[g.x%uint64(len(vocab))])
		g.n++
	}
	return b.String()
}

// skip advances past n words already produced elsewhere.
func (g *simWords) skip(n int) { g.next(n) }
