package openai

// Disaggregated legs: the two requests of one prefill/decode split, as
// vLLM's NixlConnector (and the P/D proxies vLLM ships) carries them.
//
//   - The prefill leg goes to the prefill instance without streaming, with
//     max_tokens 1 and kv_transfer_params {"do_remote_decode": true,
//     "do_remote_prefill": false, "remote_*": null} (PrefillParams). Prefill
//     sends it and reads the response's top-level kv_transfer_params
//     (ParseTransferParams): the engine id, block ids, side-channel host and
//     port the decode instance pulls from, and whatever else the engine's
//     version adds (tp_size, remote_request_id, ...), kept verbatim.
//   - Those params travel in schemas.KVHandle.Engine. The decode leg is the
//     same request sent to the decode instance with them as its
//     kv_transfer_params (DecodeParams, Request.KVTransferParams), streamed
//     through Generate as any request is.
//
// The decode instance's output is the whole answer from its first token:
// vLLM's decode recomputes the prompt's last position from the pulled KV and
// samples the first token itself (vLLM's proxy drops the prefill's token and
// streams only the decode's). Prefilled.Text is that one prefill token, good
// for the handle and for timing, but a client that already saw it would see
// it twice, and with temperature > 0 the decode may sample another one.
//
// What is verified: the request bodies and responses against the shapes
// vLLM documents (testdata/README.md says which page each fixture follows),
// with httptest servers playing the prefill and decode instances. This is
// untested against a live vLLM: none runs where these tests run.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"time"

	"github.com/switchyard-ai/switchyard/schemas"
)

var (
	// ErrNoTransferParams: a prefill response carried no kv_transfer_params,
	// which is what a vLLM started without a KV connector answers.
	ErrNoTransferParams = errors.New(`the engine returned no kv_transfer_params: start the prefill and decode instances with a KV connector, e.g. vllm serve ... --kv-transfer-config '{"kv_connector":"NixlConnector","kv_role":"kv_both"}'`)
	// ErrNoEngineParams: a decode leg's handle has no usable engine
	// parameters, so a real engine has no KV to pull.
	ErrNoEngineParams = errors.New("the handoff carries no engine kv_transfer_params a vLLM decode instance can pull from")
)

// PrefillParams is the kv_transfer_params of a prefill leg, as vLLM's P/D
// proxy sends it: decode happens elsewhere, so the instance keeps the KV
// after its one token and answers where it is. A fresh map each call, since
// the request body owns it.
func PrefillParams() map[string]any {
	return map[string]any{
		"do_remote_decode":  true,
		"do_remote_prefill": false,
		"remote_engine_id":  nil,
		"remote_block_ids":  nil,
		"remote_host":       nil,
		"remote_port":       nil,
	}
}

// DecodeParams is the kv_transfer_params of a decode leg: the prefill
// response's, as the handle carries them in Engine. It refuses a handle
// without them (a simulated prefill worker's handle reaching a real decode
// worker) and params that do not ask for a remote prefill, since vLLM would
// then quietly recompute the whole prompt and the split would cost twice.
// The map is a copy: the request body must not alias the handle.
func DecodeParams(h *schemas.KVHandle) (map[string]any, error) {
	if h == nil {
		return nil, fmt.Errorf("openai: decode leg without a handoff: %w", ErrNoEngineParams)
	}
	if len(h.Engine) == 0 {
		return nil, fmt.Errorf("openai: handoff of %s from worker %s: its prefill did not run on a vLLM with a KV connector (a simulated prefill worker?): %w",
			h.RequestID, h.Worker, ErrNoEngineParams)
	}
	if v, _ := h.Engine["do_remote_prefill"].(bool); !v {
		return nil, fmt.Errorf("openai: handoff of %s from worker %s: do_remote_prefill is %v, not true, so the decode instance would prefill the prompt again: %w",
			h.RequestID, h.Worker, h.Engine["do_remote_prefill"], ErrNoEngineParams)
	}
	out := make(map[string]any, len(h.Engine))
	for k, v := range h.Engine {
		out[k] = v
	}
	return out, nil
}

// ParseTransferParams reads a non-streaming completion response's top-level
// kv_transfer_params (where vLLM puts it, for /v1/completions and
// /v1/chat/completions alike) into the map that fills KVHandle.Engine, and
// remote_block_ids into KVHandle.BlockIDs when it is a flat list of
// integers (nil otherwise: a list of per-group lists, as some connector
// versions send for hybrid KV caches, passes through in the map only).
// Numbers decode as float64, as they do again when the handle crosses the
// bus; ids and ports are far below 2^53, so they survive exactly.
func ParseTransferParams(body []byte) (map[string]any, []int, error) {
	var top struct {
		KV json.RawMessage `json:"kv_transfer_params"`
	}
	if err := json.Unmarshal(body, &top); err != nil {
		return nil, nil, fmt.Errorf("openai: prefill response is not a JSON object: %w", err)
	}
	if len(top.KV) == 0 || string(top.KV) == "null" {
		return nil, nil, fmt.Errorf("openai: %w", ErrNoTransferParams)
	}
	var params map[string]any
	if err := json.Unmarshal(top.KV, &params); err != nil {
		return nil, nil, fmt.Errorf("openai: kv_transfer_params is not an object: %w", err)
	}
	if len(params) == 0 {
		// vLLM's proxy treats {} as absent too: nothing to pull.
		return nil, nil, fmt.Errorf("openai: kv_transfer_params is empty: %w", ErrNoTransferParams)
	}
	return params, blockIDs(params["remote_block_ids"]), nil
}

// blockIDs is v as []int when it is a non-empty JSON list of non-negative
// integers, else nil.
func blockIDs(v any) []int {
	list, ok := v.([]any)
	if !ok || len(list) == 0 {
		return nil
	}
	ids := make([]int, len(list))
	for i, x := range list {
		f, ok := x.(float64)
		if !ok || f < 0 || f != math.Trunc(f) || f > 1<<53 {
			return nil
		}
		ids[i] = int(f)
	}
	return ids
}

// Prefilled is a prefill leg's outcome.
type Prefilled struct {
	// Result is the one token the prefill instance produced (Text), its
	// usage and timing (TTFT = Total: the answer comes whole).
	Result
	// Engine is the response's kv_transfer_params verbatim, for
	// KVHandle.Engine; BlockIDs its remote_block_ids when they are ints,
	// for KVHandle.BlockIDs.
	Engine   map[string]any
	BlockIDs []int
	// Done says the request ended inside the prefill: its one token was a
	// stop (EOS or a stop string, finish_reason "stop"), so there is
	// nothing to hand off (vLLM keeps no KV for it) and Result is the
	// whole answer.
	Done bool
}

// completionResponse is the non-streaming body of either endpoint: text
// for completions, message.content for chat.
type completionResponse struct {
	Choices []struct {
		Text    string `json:"text"`
		Message struct {
			Content string `json:"content"`
		} `json:"message"`
		FinishReason string `json:"finish_reason"`
	} `json:"choices"`
	Usage *struct {
		PromptTokens        int `json:"prompt_tokens"`
		CompletionTokens    int `json:"completion_tokens"`
		PromptTokensDetails *struct {
			CachedTokens int `json:"cached_tokens"`
		} `json:"prompt_tokens_details"`
	} `json:"usage"`
}

// maxPrefillResponse bounds the body read: remote_block_ids of a very long
// prompt run to tens of KB, prompt logprobs to more; 64 MiB is far past
// either and still bounded.
const maxPrefillResponse = 64 << 20

// Prefill runs req as the prefill leg of a disaggregated request: the same
// body Generate would send (the decode leg must ask the same question, or
// the pulled KV is for another prompt), not streamed, with max_tokens 1 and
// PrefillParams as its kv_transfer_params (req.KVTransferParams instead
// when set, for a connector that wants more). Send the decode leg with the
// same req.RequestID. A response without kv_transfer_params is an error
// wrapping ErrNoTransferParams, unless the request finished in the prefill
// (Done).
func (c *Client) Prefill(ctx context.Context, req Request) (Prefilled, error) {
	path, body := c.body(req)
	body["stream"] = false
	body["max_tokens"] = 1
	if req.KVTransferParams == nil {
		body["kv_transfer_params"] = PrefillParams()
	}
	start := time.Now()
	resp, err := c.post(ctx, path, body, req.RequestID, "application/json", "openai: prefill")
	if err != nil {
		return Prefilled{}, err
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, maxPrefillResponse))
	if err != nil {
		if ctx.Err() != nil {
			return Prefilled{}, ctx.Err()
		}
		return Prefilled{}, fmt.Errorf("openai: prefill: reading response: %w", err)
	}
	var out Prefilled
	out.Total = time.Since(start)
	out.TTFT = out.Total
	var cr completionResponse
	if err := json.Unmarshal(raw, &cr); err != nil {
		return out, fmt.Errorf("openai: prefill: bad response %.200q: %w", raw, err)
	}
	if len(cr.Choices) > 0 {
		ch := cr.Choices[0]
		out.Text, out.FinishReason = ch.Text+ch.Message.Content, ch.FinishReason
	}
	if out.Text != "" {
		out.Chunks = 1
	}
	if u := cr.Usage; u != nil {
		out.PromptTokens, out.CompletionTokens = u.PromptTokens, u.CompletionTokens
		if u.PromptTokensDetails != nil {
			out.CachedTokens = u.PromptTokensDetails.CachedTokens
		}
	}
	if out.CompletionTokens == 0 {
		out.CompletionTokens = out.Chunks
	}
	out.Engine, out.BlockIDs, err = ParseTransferParams(raw)
	if out.FinishReason == "stop" {
		// NixlConnector hands off only a length-capped prefill; one
		// that stopped is finished, with or without params.
		out.Done = true
		return out, nil
	}
	if err != nil {
		return out, fmt.Errorf("%w (finish_reason %q)", err, out.FinishReason)
	}
	return out, nil
}
