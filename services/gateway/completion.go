package gateway

import (
	"context"
	"errors"
	"net/http"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	gw "github.com/switchyard-ai/switchyard/internal/adapter/gateway"
	"github.com/switchyard-ai/switchyard/schemas"
	"github.com/switchyard-ai/switchyard/services/client"
	"github.com/switchyard-ai/switchyard/subjects"
)

type endpoint int

const (
	chatEndpoint endpoint = iota
	textEndpoint
)

// Cancel reasons the gateway publishes.
const (
	ReasonClientDisconnected = "client_disconnected"
	ReasonDeadlineExceeded   = "deadline_exceeded"
)

func (s *Server) chat(w http.ResponseWriter, r *http.Request)       { s.complete(w, r, chatEndpoint) }
func (s *Server) completion(w http.ResponseWriter, r *http.Request) { s.complete(w, r, textEndpoint) }

// parse turns the HTTP request into the bus request.
func (s *Server) parse(r *http.Request, data []byte, ep endpoint, id string) (schemas.Request, bool, *schemas.Error) {
	if ep == chatEndpoint {
		var b gw.ChatCompletionRequest
		if err := gw.DecodeJSON(data, &b); err != nil {
			return schemas.Request{}, false, err
		}
		rt, err := gw.ParseRouting(r.Header, b.Metadata)
		if err != nil {
			return schemas.Request{}, false, err
		}
		req, err := gw.ChatToRequest(id, b, rt, s.cfg.DefaultMaxTokens)
		return req, b.StreamOptions != nil && b.StreamOptions.IncludeUsage, err
	}
	var b gw.CompletionRequest
	if err := gw.DecodeJSON(data, &b); err != nil {
		return schemas.Request{}, false, err
	}
	rt, err := gw.ParseRouting(r.Header, b.Metadata)
	if err != nil {
		return schemas.Request{}, false, err
	}
	req, err := gw.CompletionToRequest(id, b, rt, s.cfg.DefaultMaxTokens)
	return req, b.StreamOptions != nil && b.StreamOptions.IncludeUsage, err
}

// complete serves one chat or text completion, streamed or not.
func (s *Server) complete(hw http.ResponseWriter, r *http.Request, ep endpoint) {
	tenant := tenantOf(r)
	rec := &statusRecorder{ResponseWriter: hw}
	var w http.ResponseWriter = rec
	obs := observation{tenant: tenant, start: s.cfg.Now()}
	defer func() {
		obs.status = rec.status
		switch {
		case r.Context().Err() != nil || obs.status == 0:
			obs.status = StatusClientClosed
		case obs.failed != 0:
			// A stream that failed after its 200 went out is counted by
			// the error it ended with, not as a success.
			obs.status = obs.failed
		}
		s.stats.record(obs, s.cfg.Now())
	}()
	data, aerr := s.readBody(w, r)
	if aerr != nil {
		writeError(w, *aerr)
		return
	}
	if s.busDown(w) {
		return
	}
	id := client.NewID()
	req, includeUsage, serr := s.parse(r, data, ep, id)
	obs.model = req.Model
	now := s.cfg.Now()
	if serr == nil {
		// The same checks the admitter makes, so a malformed request costs
		// no bus round trip; the model and tenant policy stay the
		// admitter's, whose catalog may carry operator overrides.
		serr = req.Validate(now, nil, schemas.Limits{})
	}
	if serr != nil {
		writeError(w, gw.FromError(serr))
		return
	}
	w.Header().Set(gw.HeaderRequestID, id)

	// Subscribe before submitting: token chunks are read as core NATS.
	// Both subscriptions feed one channel, which the connection's
	// read loop fills in the server's order, so the result can never
	// overtake the chunks published before it.
	ch := make(chan *nats.Msg, 1024)
	resSubj, tokSubj := subjects.Result(tenant, id), subjects.Tokens(tenant, id)
	subs := make([]*nats.Subscription, 0, 2)
	defer func() {
		for _, sub := range subs {
			sub.Unsubscribe()
		}
	}()
	for _, subj := range []string{resSubj, tokSubj} {
		if subj == tokSubj && !req.Stream {
			continue
		}
		sub, err := s.nc.ChanSubscribe(subj, ch)
		if err != nil {
			s.unavailable(w, "subscribe", err)
			return
		}
		subs = append(subs, sub)
	}

	submitCtx, cancelSubmit := context.WithTimeout(r.Context(), 10*time.Second)
	_, err := s.client.Submit(submitCtx, tenant, &req)
	cancelSubmit()
	if err != nil {
		if r.Context().Err() != nil {
			// The publish may have landed before the client left.
			s.publishCancel(tenant, id, ReasonClientDisconnected)
			return
		}
		if errors.Is(err, client.ErrPayloadTooLarge) {
			// Not a bus outage: the same bytes fail every time, so no 503.
			writeError(w, gw.FromError(schemas.Errf(schemas.CodePromptTooLarge, "messages", "%v", err)))
			return
		}
		s.unavailable(w, "submit", err)
		return
	}

	limit := s.cfg.MaxWait
	if req.DeadlineMs > 0 {
		limit = time.Duration(req.DeadlineMs)*time.Millisecond + s.cfg.DeadlineGrace
	}
	timer := time.NewTimer(limit - s.cfg.Now().Sub(now))
	defer timer.Stop()
	poll := time.NewTicker(s.cfg.PollInterval)
	defer poll.Stop()

	out := &responder{w: w, ep: ep, id: id, created: now.Unix(), model: req.Model, stream: req.Stream, includeUsage: includeUsage, now: s.cfg.Now}
	defer func() { obs.firstToken, obs.lastToken, obs.failed = out.firstToken, out.lastToken, out.failed }()
	var state gw.StreamState
	// A request that fails over mid-stream continues on another worker
	// after the last stored chunk; a chunk already relayed, or one from an
	// attempt older than one seen, never reaches the user twice.
	var seen client.StreamFilter
	for {
		select {
		case m := <-ch:
			if m.Subject == tokSubj {
				c, err := decodeChunk(m)
				if err != nil {
					s.log.Warn("undecodable token chunk", "id", id, "err", err)
					continue
				}
				if !seen.Admit(c) {
					continue
				}
				if text := state.Chunk(c); text != "" {
					if err := out.delta(text); err != nil {
						s.publishCancel(tenant, id, ReasonClientDisconnected)
						return
					}
				}
				continue
			}
			res, err := client.DecodeResult(m.Header, m.Data)
			if err != nil {
				s.log.Error("undecodable result", "id", id, "err", err)
				res = schemas.Result{ID: id, Status: schemas.StatusFailed, Error: schemas.Errf(schemas.CodeInternal, "", "undecodable result: %v", err)}
			}
			obs.result = &res
			out.finish(res, &state)
			return
		case <-poll.C:
			if res, ok := s.lookupResult(r.Context(), resSubj); ok {
				obs.result = &res
				out.finish(res, &state)
				return
			}
		case <-timer.C:
			s.publishCancel(tenant, id, ReasonDeadlineExceeded)
			out.fail(gw.FromError(schemas.Errf(schemas.CodeDeadlineExceeded, "", "no result within %s", limit.Round(time.Millisecond))))
			return
		case <-r.Context().Done():
			s.publishCancel(tenant, id, ReasonClientDisconnected)
			return
		}
	}
}

func (s *Server) unavailable(w http.ResponseWriter, what string, err error) {
	s.log.Error("bus unavailable", "op", what, "err", err)
	e := gw.NewError(http.StatusServiceUnavailable, gw.TypeServer, gw.CodeUnavailable, "", what+" on the bus failed; retry")
	e.RetryAfter = 1
	writeError(w, e)
}

func decodeChunk(m *nats.Msg) (schemas.TokenChunk, error) {
	f, err := schemas.FormatFromContentType(m.Header.Get(schemas.HeaderContentType))
	if err != nil {
		return schemas.TokenChunk{}, err
	}
	var c schemas.TokenChunk
	err = schemas.Unmarshal(f, m.Data, &c)
	return c, err
}

// lookupResult reads the last message on a result subject from RESULTS.
func (s *Server) lookupResult(ctx context.Context, subj string) (schemas.Result, bool) {
	s.resultsMu.Lock()
	st := s.results
	s.resultsMu.Unlock()
	if st == nil {
		var err error
		if st, err = s.js.Stream(ctx, subjects.StreamResults); err != nil {
			return schemas.Result{}, false
		}
		s.resultsMu.Lock()
		s.results = st
		s.resultsMu.Unlock()
	}
	m, err := st.GetLastMsgForSubject(ctx, subj)
	if err != nil {
		if !errors.Is(err, jetstream.ErrMsgNotFound) && ctx.Err() == nil {
			s.log.Warn("result lookup failed", "subject", subj, "err", err)
		}
		return schemas.Result{}, false
	}
	res, err := client.DecodeResult(m.Header, m.Data)
	return res, err == nil
}

// responder writes one completion's answer: a JSON body, or a stream of
// server-sent events whose headers are held back until the first event so
// that a request refused before any token (shed, quota, deadline) still
// gets its proper HTTP status.
type responder struct {
	w            http.ResponseWriter
	ep           endpoint
	id           string
	created      int64
	model        string
	stream       bool
	includeUsage bool
	started      bool
	now          func() time.Time
	// firstToken and lastToken date the first and last content relayed,
	// for the TTFT and inter-token latency metrics.
	firstToken, lastToken time.Time
	// failed is the status of the error a started stream ended with, 0
	// when it did not fail after its headers went out.
	failed int
}

func (o *responder) event(v any) error {
	b, err := gw.SSEEvent(v)
	if err != nil {
		return err
	}
	return o.write(b)
}

func (o *responder) write(b []byte) error {
	if !o.started {
		h := o.w.Header()
		h.Set("Content-Type", "text/event-stream")
		h.Set("Cache-Control", "no-cache")
		h.Set("Connection", "keep-alive")
		// Tell nginx-style proxies not to buffer the stream.
		h.Set("X-Accel-Buffering", "no")
		o.w.WriteHeader(http.StatusOK)
		o.started = true
	}
	if _, err := o.w.Write(b); err != nil {
		return err
	}
	return http.NewResponseController(o.w).Flush()
}

func (o *responder) delta(text string) error {
	var err error
	if o.ep == chatEndpoint {
		role := ""
		if !o.started {
			role = "assistant"
		}
		err = o.event(gw.ChatChunk(o.id, o.created, o.model, role, text))
	} else {
		err = o.event(gw.TextChunk(o.id, o.created, o.model, text))
	}
	if err == nil && text != "" && o.now != nil {
		t := o.now()
		if o.firstToken.IsZero() {
			o.firstToken = t
		}
		o.lastToken = t
	}
	return err
}

func (o *responder) fail(e gw.APIError) {
	if !o.started {
		writeError(o.w, e)
		return
	}
	o.failed = e.Status
	// OpenAI clients raise an error event as an API error mid-stream.
	if o.event(e.Body) == nil {
		o.write([]byte(gw.SSEDone))
	}
}

func (o *responder) finish(res schemas.Result, state *gw.StreamState) {
	if e, isErr := gw.FromResult(res); isErr {
		o.fail(e)
		return
	}
	if !o.stream {
		if o.ep == chatEndpoint {
			writeJSON(o.w, http.StatusOK, gw.ChatResponse(o.id, o.created, o.model, res))
		} else {
			writeJSON(o.w, http.StatusOK, gw.CompletionResponse(o.id, o.created, o.model, res))
		}
		return
	}
	if res.Model != "" {
		o.model = res.Model
	}
	if rest, _ := state.Final(res.Text); rest != "" || !o.started {
		if o.delta(rest) != nil {
			return
		}
	}
	// As OpenAI streams: the finish chunk carries no usage, and with
	// stream_options.include_usage exactly one more chunk, with empty
	// choices, carries it.
	u := gw.UsageOf(res.Usage)
	finish := gw.FinishReason(res)
	var err error
	if o.ep == chatEndpoint {
		err = o.event(gw.ChatFinalChunk(o.id, o.created, o.model, finish))
		if err == nil && o.includeUsage {
			err = o.event(gw.ChatUsageChunk(o.id, o.created, o.model, u))
		}
	} else {
		err = o.event(gw.TextFinalChunk(o.id, o.created, o.model, finish))
		if err == nil && o.includeUsage {
			err = o.event(gw.TextUsageChunk(o.id, o.created, o.model, u))
		}
	}
	if err == nil {
		o.write([]byte(gw.SSEDone))
	}
}
