package worker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/switchyard-ai/switchyard/internal/testkit/bustest"
	"github.com/switchyard-ai/switchyard/schemas"
	"github.com/switchyard-ai/switchyard/services/svc"
	"github.com/switchyard-ai/switchyard/subjects"
)

// TestReadStreamedBack: what a worker streams is what a taking-over worker
// reads back from TOKENS — every chunk in order (more than one fetch's
// worth), the token count and the text; a racing attempt's duplicate seq
// keeps the first; a gap is refused rather than papered over.
func TestReadStreamedBack(t *testing.T) {
	env := bustest.StartProvisioned(t, subjects.StreamOptions{})
	sh, err := svc.New("worker", "w", env.NC, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	w := &Worker{sh: sh}
	ctx := context.Background()
	const tenant = "acme"

	// stream publishes n tokens for id as attempt, in chunks of the
	// worker's own making, and returns the text sent.
	stream := func(id string, attempt, n int, done bool) *tokenStream {
		a := schemas.Admitted{Tenant: tenant, Request: schemas.Request{ID: id}, Attempt: attempt}
		s := newTokenStream(&a)
		g := newSimWords(id)
		now := time.Now()
		for i := range n {
			// A chunk closes every chunkTokens tokens, as it would by
			// count on a fast decode.
			if s.add(g.next(1), 1, now) || (i+1)%chunkTokens == 0 {
				w.flush(s, false)
			}
		}
		w.flush(s, done)
		if err := env.NC.Flush(); err != nil {
			t.Fatal(err)
		}
		return s
	}
	waitStored := func(id string, seq uint64) {
		t.Helper()
		st, err := env.JS.Stream(ctx, subjects.StreamTokens)
		if err != nil {
			t.Fatal(err)
		}
		for deadline := time.Now().Add(5 * time.Second); ; {
			m, err := st.GetLastMsgForSubject(ctx, subjects.Tokens(tenant, id))
			if err == nil {
				var c schemas.TokenChunk
				if svc.Decode(m.Header, m.Data, &c) == nil && c.Seq >= seq {
					return
				}
			}
			if time.Now().After(deadline) {
				t.Fatalf("chunk %d of %s not stored", seq, id)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}

	t.Run("nothing streamed", func(t *testing.T) {
		r, err := readStreamed(ctx, env.JS, tenant, "never")
		if err != nil || r.seq != 0 || r.tokens != 0 || r.text != "" {
			t.Fatalf("got %+v, %v; want zero", r, err)
		}
	})
	t.Run("long stream with its end", func(t *testing.T) {
		const n = 3000 // ~375 chunks: more than one fetch
		s := stream("long", 0, n, true)
		waitStored("long", s.seq)
		r, err := readStreamed(ctx, env.JS, tenant, "long")
		if err != nil {
			t.Fatal(err)
		}
		if r.seq != s.seq || r.tokens != n || !r.done || r.text != SimulatedText("long", "", n) || r.firstAt.IsZero() {
			t.Fatalf("read back seq %d, %d tokens, done %v, %d words; want seq %d, %d tokens, done, the whole answer",
				r.seq, r.tokens, r.done, len(strings.Fields(r.text)), s.seq, n)
		}
	})
	t.Run("a racing attempt's duplicate keeps the first", func(t *testing.T) {
		first := stream("race", 0, 40, false)
		// Another attempt republishes seq 1..: a reader keeps the first.
		stream("race", 1, 80, false)
		waitStored("race", 80/chunkTokens)
		r, err := readStreamed(ctx, env.JS, tenant, "race")
		if err != nil {
			t.Fatal(err)
		}
		if !strings.HasPrefix(r.text, first.Text()) {
			t.Fatalf("read back %q, want it to start with the first attempt's %q", r.text, first.Text())
		}
		// The later attempt streamed past the first: it owns the stream,
		// and a redelivered attempt 0 must stand down (resumePoint).
		if r.attempt != 1 {
			t.Fatalf("latest attempt read back %d, want 1", r.attempt)
		}
	})
	t.Run("a gap is refused", func(t *testing.T) {
		a := schemas.Admitted{Tenant: tenant, Request: schemas.Request{ID: "gap"}}
		s := newTokenStream(&a)
		for _, seq := range []uint64{1, 2, 4} {
			w.publishChunk(s, schemas.TokenChunk{Seq: seq, Text: fmt.Sprint(" t", seq), Tokens: 1, At: time.Now()})
		}
		env.NC.Flush()
		waitStored("gap", 4)
		if _, err := readStreamed(ctx, env.JS, tenant, "gap"); !errors.Is(err, errIncompleteRecord) {
			t.Fatalf("read a stream missing chunk 3: err %v, want errIncompleteRecord", err)
		}
	})
}

// TestChunking: the first token goes out at once, then chunks close by
// count or by age, and the text of all chunks is the answer's text.
func TestChunking(t *testing.T) {
	a := schemas.Admitted{Tenant: "acme", Request: schemas.Request{ID: "c"}}
	s := newTokenStream(&a)
	t0 := time.Unix(0, 0)
	if !s.add("w0", 1, t0) {
		t.Fatal("the first token waits for a full chunk: time to first token would suffer")
	}
	s.seq, s.pending, s.pendingTokens, s.lastFlush = 1, strings.Builder{}, 0, t0
	for i := 1; i < chunkTokens; i++ {
		if s.add(" w", 1, t0.Add(time.Millisecond)) {
			t.Fatalf("chunk closed after %d tokens, want %d", i, chunkTokens)
		}
	}
	if !s.add(" w", 1, t0.Add(time.Millisecond)) {
		t.Fatalf("chunk not closed at %d tokens", chunkTokens)
	}
	s.pending, s.pendingTokens = strings.Builder{}, 0
	s.add(" w", 1, t0)
	if s.due(t0.Add(chunkInterval / 2)) {
		t.Fatal("a one-token chunk closed before its interval")
	}
	if !s.due(t0.Add(chunkInterval)) {
		t.Fatal("a one-token chunk not due after its interval")
	}
	if got, want := SimulatedText("seed", "", 5), func() string {
		g := newSimWords("seed")
		return g.next(2) + g.next(3)
	}(); got != want {
		t.Fatalf("words in two chunks %q differ from the whole %q", want, got)
	}
}

// dispatchMsg is a dispatch as the worker's consumer hands it over,
// recording what the worker answered.
type dispatchMsg struct {
	delivered uint64
	acked     bool
	naked     bool
}

func (m *dispatchMsg) Metadata() (*jetstream.MsgMetadata, error) {
	return &jetstream.MsgMetadata{NumDelivered: m.delivered}, nil
}
func (m *dispatchMsg) Data() []byte                     { return nil }
func (m *dispatchMsg) Headers() nats.Header             { return nil }
func (m *dispatchMsg) Subject() string                  { return "" }
func (m *dispatchMsg) Reply() string                    { return "" }
func (m *dispatchMsg) Ack() error                       { m.acked = true; return nil }
func (m *dispatchMsg) DoubleAck(context.Context) error  { m.acked = true; return nil }
func (m *dispatchMsg) Nak() error                       { m.naked = true; return nil }
func (m *dispatchMsg) NakWithDelay(time.Duration) error { m.naked = true; return nil }
func (m *dispatchMsg) InProgress() error                { return nil }
func (m *dispatchMsg) Term() error                      { return nil }
func (m *dispatchMsg) TermWithReason(string) error      { return nil }

// TestResumePoint: which dispatches read the record back, continue from
// it, or stand down for a newer attempt.
func TestResumePoint(t *testing.T) {
	env := bustest.StartProvisioned(t, subjects.StreamOptions{})
	sh, err := svc.New("worker", "w", env.NC, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	w := &Worker{sh: sh, cfg: Config{ID: "w"}}
	ctx := context.Background()
	// "taken" was streamed 20 tokens by attempt 0, then 20 more by attempt 1.
	for attempt, upto := range []int{20, 40} {
		a := schemas.Admitted{Tenant: "acme", Request: schemas.Request{ID: "taken"}, Attempt: attempt}
		s := newTokenStream(&a)
		for i := attempt * 20; i < upto; i++ {
			w.publishChunk(s, schemas.TokenChunk{Seq: uint64(i + 1), Text: " w", Tokens: 1})
		}
	}
	env.NC.Flush()
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if r, err := readStreamed(ctx, env.JS, "acme", "taken"); err == nil && r.seq == 40 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the 40 chunks were not stored")
		}
	}
	tests := []struct {
		name       string
		id         string
		stream     bool
		attempt    int
		delivered  uint64
		wantGo     bool
		wantTokens int
		wantAck    bool
	}{
		{"not streamed", "taken", false, 1, 1, true, 0, false},
		{"first delivery of attempt 0", "taken", true, 0, 1, true, 0, false},
		{"re-placed attempt continues", "taken", true, 2, 1, true, 40, false},
		{"current attempt redelivered continues", "taken", true, 1, 2, true, 40, false},
		{"old attempt redelivered stands down", "taken", true, 0, 2, false, 0, true},
		{"re-placed before any token starts fresh", "fresh", true, 1, 1, true, 0, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			d := schemas.Dispatch{Admitted: schemas.Admitted{Tenant: "acme", Attempt: tc.attempt,
				Request: schemas.Request{ID: tc.id, Stream: tc.stream}}}
			m := &dispatchMsg{delivered: tc.delivered}
			r, ok := w.resumePoint(ctx, d, m)
			if ok != tc.wantGo || r.tokens != tc.wantTokens || m.acked != tc.wantAck || m.naked {
				t.Fatalf("go %v with %d tokens, acked %v, naked %v; want go %v with %d tokens, acked %v",
					ok, r.tokens, m.acked, m.naked, tc.wantGo, tc.wantTokens, tc.wantAck)
			}
		})
	}
}

// TestAnswerFromRecord: an attempt lost after streaming its whole answer,
// before its result was stored, is answered from TOKENS without computing:
// the result's text is the chunks and its usage their tokens.
func TestAnswerFromRecord(t *testing.T) {
	env := bustest.StartProvisioned(t, subjects.StreamOptions{})
	sh, err := svc.New("worker", "w", env.NC, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	w := &Worker{sh: sh, cfg: Config{ID: "w2"}}
	ctx := context.Background()
	a := schemas.Admitted{Tenant: "acme", Request: schemas.Request{ID: "whole", Stream: true, MaxTokens: 30}, PromptTokens: 12,
		SubmittedAt: time.Now(), Deadline: time.Now().Add(time.Minute), ExcludeWorkers: []string{"w1"}}
	s := newTokenStream(&a)
	g := newSimWords("whole")
	s.add(g.next(30), 30, time.Now())
	w.flush(s, false) // every token sent, the final marker not: the worker died in between
	env.NC.Flush()
	var r streamed
	for deadline := time.Now().Add(5 * time.Second); r.seq == 0; time.Sleep(10 * time.Millisecond) {
		if r, err = readStreamed(ctx, env.JS, "acme", "whole"); err != nil || time.Now().After(deadline) {
			t.Fatalf("record not stored: %v", err)
		}
	}
	a.Attempt = 1
	m := &dispatchMsg{delivered: 1}
	w.answerFromRecord(ctx, schemas.Dispatch{Admitted: a}, m, r, true)
	st, err := env.JS.Stream(ctx, subjects.StreamResults)
	if err != nil {
		t.Fatal(err)
	}
	msg, err := st.GetLastMsgForSubject(ctx, subjects.Result("acme", "whole"))
	if err != nil {
		t.Fatal(err)
	}
	var res schemas.Result
	if err := svc.Decode(msg.Header, msg.Data, &res); err != nil {
		t.Fatal(err)
	}
	if res.Status != schemas.StatusOK || res.Text != SimulatedText("whole", "", 30) || res.Usage.CompletionTokens != 30 ||
		res.Usage.PromptTokens != 12 || res.GPUSeconds != 0 || res.Reliability == nil || res.Reliability.ResumedTokens != 30 || !m.acked {
		t.Fatalf("result %+v (reliability %+v), acked %v", res, res.Reliability, m.acked)
	}
	after, err := readStreamed(ctx, env.JS, "acme", "whole")
	for deadline := time.Now().Add(5 * time.Second); err == nil && !after.done && time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		after, err = readStreamed(ctx, env.JS, "acme", "whole")
	}
	if err != nil || !after.done || after.seq != r.seq+1 {
		t.Fatalf("after the answer the stream reads %+v, %v: want the final marker at seq %d", after, err, r.seq+1)
	}
}
