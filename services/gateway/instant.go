package gateway

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/switchyard-ai/switchyard/schemas"
	"github.com/switchyard-ai/switchyard/subjects"
)

// InstantConfig configures an InstantBackend.
type InstantConfig struct {
	// TokenDelay is the pause before each token chunk; zero answers at
	// once, which is what the overhead benchmark needs.
	TokenDelay time.Duration
	// Capacity, when > 0, sheds every request that arrives while Capacity
	// are in flight: a real overload, induced by concurrency, for the
	// tests of 429 handling.
	Capacity int
	Logger   *slog.Logger
}

// InstantBackend stands in for admitter + router + workers with zero
// compute: a plain NATS subscriber on sy.submit.* and sy.batch.* that publishes the
// request's token chunks on sy.tok.<tenant>.<id> when it asked to stream,
// then its one final Result into RESULTS (Nats-Msg-Id = request id), and
// aborts on a Cancel as a worker does. It measures the gateway's own cost
// (`switchyard bench gateway`) and drives its tests. The answer echoes the
// prompt; a prompt that ends in a directive steers it:
//
//	!shed      final result shed (as the admitter under load)
//	!quota     rejected with quota_exceeded
//	!deadline  failed with deadline_exceeded
//	!hang      streams two chunks, then waits for a Cancel and answers cancelled
type InstantBackend struct {
	cfg     InstantConfig
	nc      *nats.Conn
	js      jetstream.JetStream
	subs    []*nats.Subscription
	cancels chan schemas.Cancel

	mu       sync.Mutex
	inflight int
	seen     map[string]schemas.Request
	aborts   map[string]chan struct{}
	wg       sync.WaitGroup
	stopped  chan struct{}
}

// StartInstant subscribes the backend on nc.
func StartInstant(nc *nats.Conn, cfg InstantConfig) (*InstantBackend, error) {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, fmt.Errorf("instant backend jetstream: %w", err)
	}
	b := &InstantBackend{cfg: cfg, nc: nc, js: js, cancels: make(chan schemas.Cancel, 64),
		seen: map[string]schemas.Request{}, aborts: map[string]chan struct{}{}, stopped: make(chan struct{})}
	for _, lane := range []string{subjects.SubmitAll, subjects.BatchSubmitAll} {
		sub, err := nc.Subscribe(lane, b.onSubmit)
		if err != nil {
			b.Stop()
			return nil, fmt.Errorf("instant backend subscribe: %w", err)
		}
		b.subs = append(b.subs, sub)
	}
	sub, err := nc.Subscribe(subjects.CancelAll, b.onCancel)
	if err != nil {
		b.Stop()
		return nil, fmt.Errorf("instant backend subscribe: %w", err)
	}
	b.subs = append(b.subs, sub)
	// The subscriptions must be live on the server before anyone submits.
	if err := nc.Flush(); err != nil {
		b.Stop()
		return nil, fmt.Errorf("instant backend flush: %w", err)
	}
	return b, nil
}

// Stop unsubscribes and waits for answers in progress.
func (b *InstantBackend) Stop() {
	for _, s := range b.subs {
		s.Unsubscribe()
	}
	b.mu.Lock()
	select {
	case <-b.stopped:
	default:
		close(b.stopped)
	}
	b.mu.Unlock()
	b.wg.Wait()
}

func (b *InstantBackend) onCancel(m *nats.Msg) {
	var c schemas.Cancel
	f, err := schemas.FormatFromContentType(m.Header.Get(schemas.HeaderContentType))
	if err != nil || schemas.Unmarshal(f, m.Data, &c) != nil {
		return
	}
	b.mu.Lock()
	if ch, ok := b.aborts[c.RequestID]; ok {
		close(ch)
		delete(b.aborts, c.RequestID)
	}
	b.mu.Unlock()
	select {
	case b.cancels <- c:
	default:
	}
}

func (b *InstantBackend) onSubmit(m *nats.Msg) {
	tenant, _, err := subjects.ParseIntake(m.Subject)
	if err != nil {
		return
	}
	f, err := schemas.FormatFromContentType(m.Header.Get(schemas.HeaderContentType))
	var req schemas.Request
	if err == nil {
		err = schemas.Unmarshal(f, m.Data, &req)
	}
	if err != nil || req.ID == "" {
		b.cfg.Logger.Warn("instant backend: undecodable request", "subject", m.Subject, "err", err)
		return
	}
	b.mu.Lock()
	if _, dup := b.seen[req.ID]; dup {
		// JetStream dedupes by Nats-Msg-Id; a core subscriber sees a
		// redelivered publish and must not answer twice.
		b.mu.Unlock()
		return
	}
	b.seen[req.ID] = req
	shed := b.cfg.Capacity > 0 && b.inflight >= b.cfg.Capacity
	if !shed {
		b.inflight++
	}
	abort := make(chan struct{})
	b.aborts[req.ID] = abort
	b.wg.Add(1)
	b.mu.Unlock()
	go func() {
		defer b.wg.Done()
		defer func() {
			b.mu.Lock()
			if !shed {
				b.inflight--
			}
			delete(b.aborts, req.ID)
			b.mu.Unlock()
		}()
		if shed {
			b.finish(tenant, req, schemas.StatusShed, schemas.Errf(schemas.CodeShed, "", "instant backend at capacity %d", b.cfg.Capacity), "")
			return
		}
		b.answer(tenant, req, abort)
	}()
}

func (b *InstantBackend) answer(tenant string, req schemas.Request, abort chan struct{}) {
	prompt := req.PromptText()
	if len(req.Messages) > 0 {
		prompt = req.Messages[len(req.Messages)-1].Content
	}
	directive := ""
	if i := strings.LastIndexByte(prompt, '!'); i >= 0 {
		directive = strings.TrimSpace(prompt[i:])
	}
	switch directive {
	case "!shed":
		b.finish(tenant, req, schemas.StatusShed, schemas.Errf(schemas.CodeShed, "", "predicted to miss its deadline"), "")
		return
	case "!quota":
		b.finish(tenant, req, schemas.StatusRejected, schemas.Errf(schemas.CodeQuotaExceeded, "", "tenant %s is over its request rate", tenant), "")
		return
	case "!deadline":
		b.finish(tenant, req, schemas.StatusFailed, schemas.Errf(schemas.CodeDeadlineExceeded, "", "deadline passed in queue"), "")
		return
	}
	words := strings.Fields(prompt)
	if len(words) > req.MaxTokens {
		words = words[:req.MaxTokens]
	}
	tokens := make([]string, 0, len(words)+1)
	tokens = append(tokens, "echo:")
	for _, w := range words {
		tokens = append(tokens, " "+w)
	}
	if directive == "!hang" {
		tokens = tokens[:min(2, len(tokens))]
	}
	var text strings.Builder
	for i, tok := range tokens {
		if b.cfg.TokenDelay > 0 {
			select {
			case <-time.After(b.cfg.TokenDelay):
			case <-abort:
				b.finish(tenant, req, schemas.StatusFailed, schemas.Errf(schemas.CodeCancelled, "", "cancelled"), text.String())
				return
			case <-b.stopped:
				return
			}
		}
		text.WriteString(tok)
		if req.Stream {
			c := schemas.TokenChunk{V: schemas.Version, ID: req.ID, Seq: uint64(i + 1), Text: tok, At: time.Now().UTC()}
			msg := nats.NewMsg(subjects.Tokens(tenant, req.ID))
			msg.Data = schemas.MustMarshal(schemas.JSON, c)
			msg.Header.Set(schemas.HeaderContentType, schemas.ContentJSON)
			b.nc.PublishMsg(msg)
		}
	}
	if directive == "!hang" {
		select {
		case <-abort:
			b.finish(tenant, req, schemas.StatusFailed, schemas.Errf(schemas.CodeCancelled, "", "cancelled"), text.String())
		case <-b.stopped:
		}
		return
	}
	b.finish(tenant, req, schemas.StatusOK, nil, text.String())
}

func (b *InstantBackend) finish(tenant string, req schemas.Request, status string, e *schemas.Error, text string) {
	res := schemas.Result{
		V: schemas.Version, ID: req.ID, Tenant: tenant, Status: status, Error: e, Model: req.Model, Text: text,
		Usage:    schemas.Usage{PromptTokens: len(strings.Fields(req.PromptText())), CompletionTokens: len(strings.Fields(text))},
		WorkerID: "instant", Simulated: true, Priority: req.Priority, SLOMet: status == schemas.StatusOK,
		FinishReason: "stop", FinishedAt: time.Now().UTC(),
	}
	if status != schemas.StatusOK {
		res.FinishReason = ""
	}
	msg := nats.NewMsg(subjects.Final(tenant, req.ID))
	msg.Data = schemas.MustMarshal(schemas.JSON, res)
	msg.Header.Set(schemas.HeaderContentType, schemas.ContentJSON)
	msg.Header.Set(schemas.HeaderMsgID, req.ID)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := b.js.PublishMsg(ctx, msg); err != nil {
		b.cfg.Logger.Warn("instant backend: result publish failed", "id", req.ID, "err", err)
	}
}
