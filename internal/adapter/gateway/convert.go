package gateway

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/switchyard-ai/switchyard/schemas"
)

// Object names of OpenAI responses.
const (
	ObjectChatCompletion = "chat.completion"
	ObjectChatChunk      = "chat.completion.chunk"
	ObjectTextCompletion = "text_completion"
	ObjectList           = "list"
	ObjectModel          = "model"
)

// DefaultMaxTokens is used when a request sets no max_tokens. OpenAI's
// default is "the rest of the context", which would make every request
// look as expensive as possible to admission and placement; a bounded
// default keeps predictions honest. The gateway's --max-tokens overrides it.
const DefaultMaxTokens = 1024

// DecodeJSON decodes an HTTP body into v, naming the failure as a
// Switchyard malformed error so it maps to a 400.
func DecodeJSON(data []byte, v any) *schemas.Error {
	if len(bytes.TrimSpace(data)) == 0 {
		return schemas.Errf(schemas.CodeMalformed, "", "request body is empty; expected a JSON object")
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(v); err != nil {
		return schemas.Errf(schemas.CodeMalformed, "", "request body is not valid JSON for this endpoint: %s", schemas.DecodeErrorText(err))
	}
	if dec.More() {
		return schemas.Errf(schemas.CodeMalformed, "", "trailing data after the JSON object")
	}
	return nil
}

func maxTokens(fields ...*int) (int, bool) {
	for _, f := range fields {
		if f != nil {
			return *f, true
		}
	}
	return 0, false
}

func checkN(n *int) *schemas.Error {
	if n != nil && *n != 1 {
		return schemas.Errf(schemas.CodeMalformed, "n", "only n=1 is supported, got %d", *n)
	}
	return nil
}

func apply(req *schemas.Request, rt Routing, user string) {
	req.Priority = rt.Priority
	req.DeadlineMs = rt.DeadlineMs
	req.Workflow = rt.Workflow
	req.SessionID = rt.SessionID
	if req.SessionID == "" {
		// OpenAI's `user` names the end user, which is the best available
		// affinity key for prefix reuse when no session is given.
		req.SessionID = user
	}
	req.Metadata = rt.Metadata
}

// ChatToRequest turns a chat completion body into the Switchyard request
// the gateway submits. id is the request id on the bus. Validation beyond
// shape (model known, limits) is left to schemas.Request.Validate and the
// admitter, so the HTTP and NATS doors reject the same things the same way.
func ChatToRequest(id string, b ChatCompletionRequest, rt Routing, defMax int) (schemas.Request, *schemas.Error) {
	if err := checkN(b.N); err != nil {
		return schemas.Request{}, err
	}
	if t := bytes.TrimSpace(b.Tools); len(t) > 0 && !bytes.Equal(t, []byte("null")) && !bytes.Equal(t, []byte("[]")) {
		return schemas.Request{}, schemas.Errf(schemas.CodeMalformed, "tools", "tool calling is not supported by this gateway")
	}
	if len(b.Messages) == 0 {
		return schemas.Request{}, schemas.Errf(schemas.CodeMissingPrompt, "messages", "messages must be a non-empty array")
	}
	msgs := make([]schemas.Message, len(b.Messages))
	for i, m := range b.Messages {
		text, err := messageText(m.Content)
		if err != nil {
			return schemas.Request{}, schemas.Errf(schemas.CodeInvalidMessage, fmt.Sprintf("messages[%d].content", i), "%v", err)
		}
		msgs[i] = schemas.Message{Role: m.Role, Content: text}
	}
	mt, ok := maxTokens(b.MaxCompletionTokens, b.MaxTokens)
	if !ok {
		mt = defMax
	}
	stop, serr := stopList(b.Stop)
	if serr != nil {
		return schemas.Request{}, serr
	}
	req := schemas.Request{
		V: schemas.Version, ID: id, Model: b.Model, Messages: msgs, MaxTokens: mt,
		Temperature: b.Temperature, TopP: b.TopP, Seed: b.Seed, Stop: stop, ResponseFormat: b.ResponseFormat, Stream: b.Stream,
	}
	apply(&req, rt, b.User)
	return req, nil
}

// CompletionToRequest turns a /v1/completions body into a request.
func CompletionToRequest(id string, b CompletionRequest, rt Routing, defMax int) (schemas.Request, *schemas.Error) {
	if err := checkN(b.N); err != nil {
		return schemas.Request{}, err
	}
	if b.Echo {
		return schemas.Request{}, schemas.Errf(schemas.CodeMalformed, "echo", "echo is not supported")
	}
	prompt, err := promptText(b.Prompt)
	if err != nil {
		return schemas.Request{}, err
	}
	mt, ok := maxTokens(b.MaxTokens)
	if !ok {
		mt = defMax
	}
	stop, serr := stopList(b.Stop)
	if serr != nil {
		return schemas.Request{}, serr
	}
	req := schemas.Request{
		V: schemas.Version, ID: id, Model: b.Model, Prompt: prompt, MaxTokens: mt,
		Temperature: b.Temperature, TopP: b.TopP, Seed: b.Seed, Stop: stop, Stream: b.Stream,
	}
	apply(&req, rt, b.User)
	return req, nil
}

// stopList reads OpenAI's stop, a string or an array of strings, into the
// request's list: carried, not dropped, because it changes the answer and
// so the cache key.
func stopList(raw json.RawMessage) ([]string, *schemas.Error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || bytes.Equal(raw, []byte("null")) {
		return nil, nil
	}
	if raw[0] == '"' {
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return nil, schemas.Errf(schemas.CodeMalformed, "stop", "stop must be a string or an array of strings")
		}
		return []string{s}, nil
	}
	var list []string
	if err := json.Unmarshal(raw, &list); err != nil {
		return nil, schemas.Errf(schemas.CodeMalformed, "stop", "stop must be a string or an array of strings")
	}
	return list, nil
}

func promptText(raw json.RawMessage) (string, *schemas.Error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || bytes.Equal(raw, []byte("null")) {
		return "", schemas.Errf(schemas.CodeMissingPrompt, "prompt", "prompt is required")
	}
	var s string
	if raw[0] == '"' {
		if err := json.Unmarshal(raw, &s); err != nil {
			return "", schemas.Errf(schemas.CodeMalformed, "prompt", "prompt: %s", schemas.DecodeErrorText(err))
		}
		return s, nil
	}
	var arr []string
	if err := json.Unmarshal(raw, &arr); err != nil {
		return "", schemas.Errf(schemas.CodeMalformed, "prompt", "prompt must be a string or an array of one string (token arrays are not supported)")
	}
	if len(arr) != 1 {
		return "", schemas.Errf(schemas.CodeMalformed, "prompt", "exactly one prompt per request is supported, got %d", len(arr))
	}
	return arr[0], nil
}

// UsageOf converts Switchyard usage to OpenAI usage.
func UsageOf(u schemas.Usage) Usage {
	out := Usage{PromptTokens: u.PromptTokens, CompletionTokens: u.CompletionTokens, TotalTokens: u.PromptTokens + u.CompletionTokens}
	out.PromptTokensDetails = &PromptTokensDetails{CachedTokens: u.CachedTokens}
	return out
}

// FinishReason is the result's finish reason, "stop" when it gave none.
func FinishReason(r schemas.Result) string {
	if r.FinishReason == "" {
		return "stop"
	}
	return r.FinishReason
}

// ModelName is the model that answered, or the one asked for.
func ModelName(r schemas.Result, asked string) string {
	if r.Model != "" {
		return r.Model
	}
	return asked
}

// Fingerprint names the worker's hardware for system_fingerprint, which
// OpenAI documents as "the backend configuration the model ran with".
func Fingerprint(r schemas.Result) string {
	var parts []string
	if r.GPU != "" {
		parts = append(parts, r.GPU)
	}
	if r.Simulated {
		parts = append(parts, "simulated")
	}
	if r.FromCache != "" {
		parts = append(parts, "cache-"+r.FromCache)
	}
	if len(parts) == 0 {
		return ""
	}
	return "sy-" + strings.Join(parts, "-")
}

// ChatResponse is the non-streaming answer for an ok result.
func ChatResponse(id string, created int64, asked string, r schemas.Result) ChatCompletion {
	return ChatCompletion{
		ID: "chatcmpl-" + id, Object: ObjectChatCompletion, Created: created, Model: ModelName(r, asked),
		Choices: []ChatChoice{{Message: AssistantMessage{Role: "assistant", Content: r.Text}, FinishReason: FinishReason(r)}},
		Usage:   UsageOf(r.Usage), SystemFingerprint: Fingerprint(r),
	}
}

// CompletionResponse is the non-streaming /v1/completions answer.
func CompletionResponse(id string, created int64, asked string, r schemas.Result) Completion {
	fr := FinishReason(r)
	u := UsageOf(r.Usage)
	return Completion{
		ID: "cmpl-" + id, Object: ObjectTextCompletion, Created: created, Model: ModelName(r, asked),
		Choices: []CompletionChoice{{Text: r.Text, FinishReason: &fr}}, Usage: &u,
		SystemFingerprint: Fingerprint(r),
	}
}

// StreamState decides which text of a request's token chunks reaches the
// client. Chunks are core NATS: at most once, in order from one publisher.
// Relaying stops at the first gap or repeat (a lost chunk, or a retry on
// another worker starting again at Seq 1), and the final result, which is
// authoritative, supplies whatever the client has not seen yet.
type StreamState struct {
	next    uint64
	sent    strings.Builder
	stalled bool
}

// Chunk returns the text to relay for c, "" for none.
func (s *StreamState) Chunk(c schemas.TokenChunk) string {
	if s.next == 0 {
		s.next = 1
	}
	if s.stalled || c.Seq != s.next {
		s.stalled = true
		return ""
	}
	s.next++
	if c.Text == "" {
		return ""
	}
	s.sent.WriteString(c.Text)
	return c.Text
}

// Final returns the part of the final text the client has not seen. When
// what was relayed is not a prefix of the final text (a retry produced a
// different answer), nothing more can be said truthfully in a stream, so
// it returns "" and ok false.
func (s *StreamState) Final(text string) (rest string, ok bool) {
	sent := s.sent.String()
	if !strings.HasPrefix(text, sent) {
		return "", false
	}
	return text[len(sent):], true
}

func strptr(s string) *string { return &s }

// ChatChunk is one content delta; role is set on the first.
func ChatChunk(id string, created int64, model, role, text string) ChatCompletionChunk {
	return ChatCompletionChunk{
		ID: "chatcmpl-" + id, Object: ObjectChatChunk, Created: created, Model: model,
		Choices: []ChatChunkChoice{{Delta: ChunkDelta{Role: role, Content: strptr(text)}}},
	}
}

// ChatFinalChunk carries the finish reason. Usage is not in it: OpenAI
// sends usage only in the trailing ChatUsageChunk, and only when asked, so
// a client summing usage over chunks counts it once.
func ChatFinalChunk(id string, created int64, model, finish string) ChatCompletionChunk {
	return ChatCompletionChunk{
		ID: "chatcmpl-" + id, Object: ObjectChatChunk, Created: created, Model: model,
		Choices: []ChatChunkChoice{{Delta: ChunkDelta{}, FinishReason: strptr(finish)}},
	}
}

// ChatUsageChunk is the trailing chunk with empty choices that OpenAI sends
// when stream_options.include_usage is set.
func ChatUsageChunk(id string, created int64, model string, u Usage) ChatCompletionChunk {
	return ChatCompletionChunk{ID: "chatcmpl-" + id, Object: ObjectChatChunk, Created: created, Model: model, Choices: []ChatChunkChoice{}, Usage: &u}
}

// TextChunk is one streamed /v1/completions delta.
func TextChunk(id string, created int64, model, text string) Completion {
	return Completion{ID: "cmpl-" + id, Object: ObjectTextCompletion, Created: created, Model: model, Choices: []CompletionChoice{{Text: text}}}
}

// TextFinalChunk carries the finish reason of a streamed completion.
func TextFinalChunk(id string, created int64, model, finish string) Completion {
	return Completion{ID: "cmpl-" + id, Object: ObjectTextCompletion, Created: created, Model: model, Choices: []CompletionChoice{{FinishReason: strptr(finish)}}}
}

// TextUsageChunk is the trailing chunk with empty choices that carries a
// streamed completion's usage when stream_options.include_usage is set.
func TextUsageChunk(id string, created int64, model string, u Usage) Completion {
	return Completion{ID: "cmpl-" + id, Object: ObjectTextCompletion, Created: created, Model: model, Choices: []CompletionChoice{}, Usage: &u}
}
