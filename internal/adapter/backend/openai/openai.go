// Package openai owns the worker backend that forwards requests to a real
// OpenAI-compatible inference server (vLLM, SGLang, TGI, llama.cpp's server,
// Ollama) instead of simulating one. Generation streams (SSE) so that time
// to first token is measured where it happens, each chunk is handed to a
// callback, and cancelling the context aborts the HTTP request (the server
// then stops the sequence). ScrapeMetrics reads the server's Prometheus
// /metrics (queue, KV cache, token counters) through
// internal/adapter/backend/enginemetrics. For Ollama, which has no /metrics, the
// native API (ollama.go) describes models, lists the loaded ones, and loads
// and unloads them, so weight warmth comes from the engine.
//
// What is verified where: internal/testkit/enginetest drives a real Ollama (llama.cpp
// inside) serving a generated tiny model through this package and the whole
// system; vLLM and SGLang are verified only against their recorded wire
// formats (openai_test.go). vLLM's ZMQ KV-event stream is read by
// internal/adapter/backend/vllmkv, which the worker runs beside this backend when
// given --vllm-kv-endpoint.
//
// Disaggregated prefill/decode (disagg.go): Prefill sends a prefill leg the
// way vLLM's NixlConnector expects it and returns the response's
// kv_transfer_params for the KV handle; DecodeParams turns a handle back
// into a decode leg's kv_transfer_params (Request.KVTransferParams), which
// Generate sends. ParseTransferParams and PrefillParams are the pieces.
// These are tested against vLLM's documented request and response shapes only
// (testdata/README.md), not against a live vLLM.
//
// vLLM's sleep mode (sleep.go): Sleep, Wake and IsSleeping drive its
// dev-mode /sleep, /wake_up, /collective_rpc and /is_sleeping endpoints,
// the weight tiers host (level 1) and page_cache (level 2) a vLLM engine
// offers in place; tested against the documented shapes only, not a live
// vLLM.
package openai

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/switchyard-ai/switchyard/internal/adapter/backend/enginemetrics"
	"github.com/switchyard-ai/switchyard/schemas"
)

// Client talks to one OpenAI-compatible server.
type Client struct {
	// BaseURL is the server root, e.g. http://127.0.0.1:8000 (without /v1).
	BaseURL string
	// Model is the served model name sent in requests.
	Model  string
	APIKey string
	HTTP   *http.Client
}

// New returns a Client for baseURL serving model.
func New(baseURL, model string) *Client {
	return &Client{BaseURL: strings.TrimRight(baseURL, "/"), Model: model, HTTP: &http.Client{}}
}

// Request is one generation. With Messages set it uses /v1/chat/completions,
// otherwise /v1/completions with Prompt.
type Request struct {
	// Model overrides the client's served model name for this request
	// (an engine serving several models).
	Model       string
	Messages    []schemas.Message
	Prompt      string
	MaxTokens   int
	Temperature *float64
	Seed        *int64
	// TopP and Stop go to either endpoint; ResponseFormat and Tools are
	// chat parameters (OpenAI's completions endpoint takes neither), sent
	// as the request gave them.
	TopP           *float64
	Stop           []string
	ResponseFormat map[string]any
	Tools          []map[string]any
	// KVTransferParams, when not nil, is sent as the body's
	// kv_transfer_params: vLLM's KV-connector parameters for one leg of
	// a disaggregated request (DecodeParams builds a decode leg's;
	// Prefill sets a prefill leg's itself). See disagg.go.
	KVTransferParams map[string]any
	// RequestID, when set, goes as the X-Request-Id header. vLLM takes
	// it as its own request id; the two legs of a disaggregated request
	// send the same one, as vLLM's P/D proxy does, because NixlConnector
	// versions without remote_request_id pair the legs by that id.
	RequestID string
}

// Result is a finished generation as measured by the client.
type Result struct {
	Text             string
	FinishReason     string
	PromptTokens     int
	CompletionTokens int
	// CachedTokens is the server's prefix-cache hit, when it reports one
	// (usage.prompt_tokens_details.cached_tokens).
	CachedTokens int
	// Chunks is how many content chunks arrived (≈ tokens for vLLM).
	Chunks int
	TTFT   time.Duration
	Total  time.Duration
}

type streamChunk struct {
	Choices []struct {
		Text  string `json:"text"`
		Delta struct {
			Content string `json:"content"`
		} `json:"delta"`
		FinishReason *string `json:"finish_reason"`
	} `json:"choices"`
	Usage *struct {
		PromptTokens        int `json:"prompt_tokens"`
		CompletionTokens    int `json:"completion_tokens"`
		PromptTokensDetails *struct {
			CachedTokens int `json:"cached_tokens"`
		} `json:"prompt_tokens_details"`
	} `json:"usage"`
	Error *struct {
		Message string `json:"message"`
	} `json:"error"`
}

// post sends body to path and returns the response once its status is
// 200; any other status is an error carrying the start of its body. what
// prefixes the errors ("openai", "openai: prefill").
func (c *Client) post(ctx context.Context, path string, body map[string]any, requestID, accept, what string) (*http.Response, error) {
	hreq, err := c.newPost(ctx, path, body, requestID)
	if err != nil {
		return nil, err
	}
	hreq.Header.Set("Accept", accept)
	resp, err := c.httpClient().Do(hreq)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	if resp.StatusCode != http.StatusOK {
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		resp.Body.Close()
		return nil, fmt.Errorf("%s: %s: %s", what, resp.Status, strings.TrimSpace(string(msg)))
	}
	return resp, nil
}

// Generate streams one request. onChunk, if not nil, gets each non-empty
// piece of text as it arrives. Cancelling ctx aborts the request.
func (c *Client) Generate(ctx context.Context, req Request, onChunk func(text string)) (Result, error) {
	path, body := c.body(req)
	body["stream"] = true
	body["stream_options"] = map[string]any{"include_usage": true}
	start := time.Now()
	resp, err := c.post(ctx, path, body, req.RequestID, "text/event-stream", "openai")
	if err != nil {
		return Result{}, err
	}
	defer resp.Body.Close()
	var res Result
	var text strings.Builder
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 4<<20)
	done := false
	for sc.Scan() {
		line := sc.Text()
		data, ok := strings.CutPrefix(line, "data:")
		if !ok {
			continue // blank separators, comments (": ping"), event: lines
		}
		data = strings.TrimSpace(data)
		if data == "[DONE]" {
			done = true
			break
		}
		var ch streamChunk
		if err := json.Unmarshal([]byte(data), &ch); err != nil {
			return res, fmt.Errorf("openai: bad stream chunk %q: %w", data, err)
		}
		if ch.Error != nil {
			return res, fmt.Errorf("openai: server error: %s", ch.Error.Message)
		}
		for _, c := range ch.Choices {
			piece := c.Delta.Content + c.Text
			if piece != "" {
				if res.Chunks == 0 {
					res.TTFT = time.Since(start)
				}
				res.Chunks++
				text.WriteString(piece)
				if onChunk != nil {
					onChunk(piece)
				}
			}
			if c.FinishReason != nil {
				res.FinishReason = *c.FinishReason
			}
		}
		if u := ch.Usage; u != nil {
			res.PromptTokens, res.CompletionTokens = u.PromptTokens, u.CompletionTokens
			if u.PromptTokensDetails != nil {
				res.CachedTokens = u.PromptTokensDetails.CachedTokens
			}
		}
	}
	res.Text, res.Total = text.String(), time.Since(start)
	if err := sc.Err(); err != nil {
		if ctx.Err() != nil {
			return res, ctx.Err()
		}
		return res, fmt.Errorf("openai: reading stream: %w", err)
	}
	if !done {
		if ctx.Err() != nil {
			return res, ctx.Err()
		}
		return res, errors.New("openai: stream ended without [DONE]")
	}
	if res.CompletionTokens == 0 {
		res.CompletionTokens = res.Chunks // server sent no usage block
	}
	return res, nil
}

// body builds the JSON body and endpoint for req, without the
// streaming fields: Generate streams, Prefill does not, and each sets its
// own. It is the one place a request parameter maps to a body field, so
// both legs of a disaggregated request send the same question.
func (c *Client) body(req Request) (path string, body map[string]any) {
	model := c.Model
	if req.Model != "" {
		model = req.Model
	}
	body = map[string]any{"model": model}
	if req.MaxTokens > 0 {
		body["max_tokens"] = req.MaxTokens
	}
	if req.Temperature != nil {
		body["temperature"] = *req.Temperature
	}
	if req.Seed != nil {
		body["seed"] = *req.Seed
	}
	if req.TopP != nil {
		body["top_p"] = *req.TopP
	}
	if len(req.Stop) > 0 {
		body["stop"] = req.Stop
	}
	path = "/v1/completions"
	if len(req.Messages) > 0 {
		path = "/v1/chat/completions"
		body["messages"] = req.Messages
		if req.ResponseFormat != nil {
			body["response_format"] = req.ResponseFormat
		}
		if len(req.Tools) > 0 {
			body["tools"] = req.Tools
		}
	} else {
		body["prompt"] = req.Prompt
	}
	if req.KVTransferParams != nil {
		body["kv_transfer_params"] = req.KVTransferParams
	}
	return path, body
}

// newPost marshals body into a POST to path with the client's headers.
func (c *Client) newPost(ctx context.Context, path string, body map[string]any, requestID string) (*http.Request, error) {
	buf, err := json.Marshal(body)
	if err != nil {
		return nil, fmt.Errorf("openai: encoding request: %w", err)
	}
	hreq, err := http.NewRequestWithContext(ctx, http.MethodPost, c.BaseURL+path, bytes.NewReader(buf))
	if err != nil {
		return nil, fmt.Errorf("openai: %w", err)
	}
	hreq.Header.Set("Content-Type", "application/json")
	if c.APIKey != "" {
		hreq.Header.Set("Authorization", "Bearer "+c.APIKey)
	}
	if requestID != "" {
		hreq.Header.Set("X-Request-Id", requestID)
	}
	return hreq, nil
}

func (c *Client) httpClient() *http.Client {
	if c.HTTP != nil {
		return c.HTTP
	}
	return http.DefaultClient
}

// ScrapeMetrics reads the server's Prometheus /metrics (vLLM, SGLang,
// llama-server --metrics) through enginemetrics.Scrape, the one reader of
// engine metrics; an enginemetrics.Tracker turns successive snapshots into
// a heartbeat's view.
func (c *Client) ScrapeMetrics(ctx context.Context) (enginemetrics.Snapshot, error) {
	return enginemetrics.Scrape(ctx, c.httpClient(), c.BaseURL+"/metrics")
}
