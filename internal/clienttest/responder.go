// Package clienttest proves that clients other than the Go one can use
// Switchyard: its tests drive the real `nats` CLI (natscli) and a Node.js
// script using the npm `nats` package against a real JetStream server, each
// publishing a JSON request on sy.submit.<tenant> and reading its result
// from sy.result.<tenant>.<id>. It also holds Responder, the smallest
// stand-in for the admitter-router-worker pipeline, used where a test is
// about the client side of the subject contract rather than scheduling.
package clienttest

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/switchyard-ai/switchyard/schemas"
	"github.com/switchyard-ai/switchyard/subjects"
)

// Responder answers every submission with a final result, honouring the
// same contract as the real services: tenant from the subject, invalid
// requests rejected with a named error, one result per id on
// sy.result.<tenant>.<id> deduplicated by Nats-Msg-Id, JSON by default.
type Responder struct {
	cc jetstream.ConsumeContext
}

// StartResponder consumes the SUBMIT stream (which must be provisioned)
// from its start until Stop.
func StartResponder(ctx context.Context, js jetstream.JetStream) (*Responder, error) {
	cons, err := js.OrderedConsumer(ctx, subjects.StreamSubmit, jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{subjects.SubmitAll},
	})
	if err != nil {
		return nil, fmt.Errorf("responder consumer: %w", err)
	}
	cc, err := cons.Consume(func(m jetstream.Msg) {
		if err := respond(ctx, js, m); err != nil {
			slog.Warn("responder", "subject", m.Subject(), "err", err)
		}
	})
	if err != nil {
		return nil, fmt.Errorf("responder consume: %w", err)
	}
	return &Responder{cc: cc}, nil
}

// Stop ends consumption.
func (r *Responder) Stop() { r.cc.Stop() }

func respond(ctx context.Context, js jetstream.JetStream, m jetstream.Msg) error {
	tenant, err := subjects.ParseSubmit(m.Subject())
	if err != nil {
		return err
	}
	res := Answer(tenant, m.Headers(), m.Data(), time.Now())
	if res.ID == "" {
		return fmt.Errorf("submission without an id cannot be answered")
	}
	out := nats.NewMsg(subjects.Result(tenant, res.ID))
	out.Data = schemas.MustMarshal(schemas.JSON, res)
	out.Header.Set(schemas.HeaderContentType, schemas.ContentJSON)
	out.Header.Set(schemas.HeaderMsgID, res.ID)
	if _, err := js.PublishMsg(ctx, out); err != nil {
		return fmt.Errorf("publish result %s: %w", res.ID, err)
	}
	return nil
}

// Answer is the responder's pure decision: a rejected result for a request
// that does not decode or validate, otherwise an ok result that echoes the
// first words of the prompt (or of the last message), with usage counted
// in whitespace-separated words.
func Answer(tenant string, h nats.Header, data []byte, now time.Time) schemas.Result {
	res := schemas.Result{Tenant: tenant, FinishedAt: now.UTC(), Simulated: true, WorkerID: "clienttest-responder"}
	res.ID = h.Get(schemas.HeaderMsgID)
	f, ferr := schemas.FormatFromContentType(h.Get(schemas.HeaderContentType))
	var req schemas.Request
	if ferr != nil {
		res.Status, res.Error = schemas.StatusRejected, ferr.(*schemas.Error)
		return res
	}
	if err := schemas.Unmarshal(f, data, &req); err != nil {
		res.Status, res.Error = schemas.StatusRejected, schemas.Errf(schemas.CodeMalformed, "", "%v", err)
		return res
	}
	if req.ID != "" {
		res.ID = req.ID
	}
	res.Model, res.Priority = req.Model, req.Priority
	if verr := req.Validate(now, nil, schemas.Limits{}); verr != nil {
		res.Status, res.Error = schemas.StatusRejected, verr
		return res
	}
	text := req.Prompt
	if len(req.Messages) > 0 {
		text = req.Messages[len(req.Messages)-1].Content
	}
	words := strings.Fields(text)
	n := min(len(words), req.MaxTokens)
	res.Status, res.SLOMet, res.FinishReason = schemas.StatusOK, true, "stop"
	if n < len(words) {
		res.FinishReason = "length"
	}
	res.Text = "echo: " + strings.Join(words[:n], " ")
	res.Usage = schemas.Usage{PromptTokens: len(words), CompletionTokens: n}
	return res
}
