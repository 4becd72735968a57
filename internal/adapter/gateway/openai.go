// Package gateway owns the pure half of Switchyard's OpenAI-compatible HTTP
// front door: the OpenAI request, response, stream-chunk and error shapes;
// the mapping between them and Switchyard's wire types (schemas.Request,
// schemas.Result, schemas.TokenChunk); the parsing of priority, deadline and
// workflow context from headers or the body's metadata; the mapping of
// Switchyard error codes to HTTP statuses; and loading the API key → tenant
// map. Nothing here does I/O beyond reading the tenant file: the HTTP shell
// in services/gateway only moves bytes between net/http and NATS.
package gateway

import (
	"bytes"
	"encoding/json"
	"fmt"

	"github.com/switchyard-ai/switchyard/schemas"
)

// ChatMessage is one chat message as OpenAI clients send it. Content is a
// string or an array of content parts; only text parts are understood.
type ChatMessage struct {
	Role    string          `json:"role"`
	Content json.RawMessage `json:"content"`
	Name    string          `json:"name,omitempty"`
}

// StreamOptions is OpenAI's stream_options.
type StreamOptions struct {
	IncludeUsage bool `json:"include_usage"`
}

// ChatCompletionRequest is the body of POST /v1/chat/completions. Fields
// Switchyard does not act on are accepted and ignored, as OpenAI-compatible
// servers do, except where ignoring them would change the answer's meaning
// (n > 1, tools), which is a 400.
type ChatCompletionRequest struct {
	Model               string            `json:"model"`
	Messages            []ChatMessage     `json:"messages"`
	MaxTokens           *int              `json:"max_tokens,omitempty"`
	MaxCompletionTokens *int              `json:"max_completion_tokens,omitempty"`
	Temperature         *float64          `json:"temperature,omitempty"`
	TopP                *float64          `json:"top_p,omitempty"`
	Seed                *int64            `json:"seed,omitempty"`
	Stop                json.RawMessage   `json:"stop,omitempty"`
	ResponseFormat      map[string]any    `json:"response_format,omitempty"`
	N                   *int              `json:"n,omitempty"`
	Stream              bool              `json:"stream,omitempty"`
	StreamOptions       *StreamOptions    `json:"stream_options,omitempty"`
	User                string            `json:"user,omitempty"`
	Metadata            map[string]string `json:"metadata,omitempty"`
	Tools               json.RawMessage   `json:"tools,omitempty"`
}

// CompletionRequest is the body of POST /v1/completions. Prompt is a
// string or an array holding exactly one string.
type CompletionRequest struct {
	Model         string            `json:"model"`
	Prompt        json.RawMessage   `json:"prompt"`
	MaxTokens     *int              `json:"max_tokens,omitempty"`
	Temperature   *float64          `json:"temperature,omitempty"`
	TopP          *float64          `json:"top_p,omitempty"`
	Seed          *int64            `json:"seed,omitempty"`
	Stop          json.RawMessage   `json:"stop,omitempty"`
	N             *int              `json:"n,omitempty"`
	Stream        bool              `json:"stream,omitempty"`
	StreamOptions *StreamOptions    `json:"stream_options,omitempty"`
	User          string            `json:"user,omitempty"`
	Metadata      map[string]string `json:"metadata,omitempty"`
	Echo          bool              `json:"echo,omitempty"`
}

// PromptTokensDetails is OpenAI's usage.prompt_tokens_details.
type PromptTokensDetails struct {
	CachedTokens int `json:"cached_tokens"`
}

// Usage is OpenAI's usage object.
type Usage struct {
	PromptTokens        int                  `json:"prompt_tokens"`
	CompletionTokens    int                  `json:"completion_tokens"`
	TotalTokens         int                  `json:"total_tokens"`
	PromptTokensDetails *PromptTokensDetails `json:"prompt_tokens_details,omitempty"`
}

// AssistantMessage is the message of a chat choice.
type AssistantMessage struct {
	Role    string `json:"role"`
	Content string `json:"content"`
}

// ChatChoice is one choice of a chat completion.
type ChatChoice struct {
	Index        int              `json:"index"`
	Message      AssistantMessage `json:"message"`
	FinishReason string           `json:"finish_reason"`
	Logprobs     *struct{}        `json:"logprobs"`
}

// ChatCompletion is the non-streaming chat response.
type ChatCompletion struct {
	ID                string       `json:"id"`
	Object            string       `json:"object"`
	Created           int64        `json:"created"`
	Model             string       `json:"model"`
	Choices           []ChatChoice `json:"choices"`
	Usage             Usage        `json:"usage"`
	SystemFingerprint string       `json:"system_fingerprint,omitempty"`
}

// ChunkDelta is the delta of a streamed chat choice.
type ChunkDelta struct {
	Role    string  `json:"role,omitempty"`
	Content *string `json:"content,omitempty"`
}

// ChatChunkChoice is one choice of a chat.completion.chunk.
type ChatChunkChoice struct {
	Index        int        `json:"index"`
	Delta        ChunkDelta `json:"delta"`
	FinishReason *string    `json:"finish_reason"`
	Logprobs     *struct{}  `json:"logprobs"`
}

// ChatCompletionChunk is one server-sent event of a streamed chat answer.
type ChatCompletionChunk struct {
	ID      string            `json:"id"`
	Object  string            `json:"object"`
	Created int64             `json:"created"`
	Model   string            `json:"model"`
	Choices []ChatChunkChoice `json:"choices"`
	Usage   *Usage            `json:"usage,omitempty"`
}

// CompletionChoice is one choice of a text completion (and of its chunks).
type CompletionChoice struct {
	Index        int       `json:"index"`
	Text         string    `json:"text"`
	FinishReason *string   `json:"finish_reason"`
	Logprobs     *struct{} `json:"logprobs"`
}

// Completion is the response of /v1/completions and, with Object
// "text_completion" too, each of its streamed chunks (OpenAI uses one shape
// for both).
type Completion struct {
	ID      string             `json:"id"`
	Object  string             `json:"object"`
	Created int64              `json:"created"`
	Model   string             `json:"model"`
	Choices []CompletionChoice `json:"choices"`
	Usage   *Usage             `json:"usage,omitempty"`
	// SystemFingerprint is set on the final answer only, as on a chat
	// completion (Fingerprint), so both endpoints name the backend alike.
	SystemFingerprint string `json:"system_fingerprint,omitempty"`
}

// ModelObject is one entry of GET /v1/models.
type ModelObject struct {
	ID      string `json:"id"`
	Object  string `json:"object"`
	Created int64  `json:"created"`
	OwnedBy string `json:"owned_by"`
	// MaxContext is a Switchyard extension: the model's context window.
	MaxContext int `json:"max_context,omitempty"`
}

// ModelList is the body of GET /v1/models.
type ModelList struct {
	Object string        `json:"object"`
	Data   []ModelObject `json:"data"`
}

// messageText flattens a message's content: a JSON string, null, or an
// array of parts of which only {"type":"text","text":...} are understood.
func messageText(raw json.RawMessage) (string, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || bytes.Equal(raw, []byte("null")) {
		return "", nil
	}
	if raw[0] == '"' {
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return "", fmt.Errorf("content: %s", schemas.DecodeErrorText(err))
		}
		return s, nil
	}
	var parts []struct {
		Type string `json:"type"`
		Text string `json:"text"`
	}
	if err := json.Unmarshal(raw, &parts); err != nil {
		return "", fmt.Errorf("content must be a string or an array of parts")
	}
	var b bytes.Buffer
	for i, p := range parts {
		if p.Type != "text" {
			return "", fmt.Errorf("content part %d has type %q; only text parts are supported", i, p.Type)
		}
		b.WriteString(p.Text)
	}
	return b.String(), nil
}
