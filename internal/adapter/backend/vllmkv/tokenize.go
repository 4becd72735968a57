package vllmkv

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"strings"

	"github.com/switchyard-ai/switchyard/internal/core/tokens"
	"github.com/switchyard-ai/switchyard/schemas"
)

// Tokenizer asks a vLLM server's /tokenize endpoint for a prompt's token
// ids exactly as the engine will see them — the model's own tokenizer, and
// for chat messages the model's chat template with the generation prompt,
// as /v1/chat/completions applies them — so that the block hashes computed
// from them (tokens.BlockHashes) equal the ones the Translator stores for
// the engine's cached blocks. Switchyard's built-in tokenizer
// (tokens.Tokenize) is an approximation whose hashes never equal a real
// engine's; the admitter tokenizes a model's prompts with this, or with
// the model's tokenizer.json (hftokenizer), when `--tokenizer` names one
// (admitter.LoadTokenizers).
type Tokenizer struct {
	// BaseURL is the server root, e.g. http://127.0.0.1:8000 (without /v1).
	BaseURL string
	// Model is the served model name.
	Model string
	HTTP  *http.Client
}

type tokenizeResponse struct {
	Count       int   `json:"count"`
	MaxModelLen int   `json:"max_model_len"`
	Tokens      []int `json:"tokens"`
}

// maxTokenizeResponse bounds the answer (a 1M-token prompt's ids as JSON
// are about 8 MB).
const maxTokenizeResponse = 32 << 20

// Tokenize returns the token ids of a completion prompt, or of chat
// messages when any are given.
func (t *Tokenizer) Tokenize(ctx context.Context, prompt string, messages []schemas.Message) ([]uint32, error) {
	body := map[string]any{"model": t.Model}
	if len(messages) > 0 {
		// vLLM's TokenizeChatRequest defaults match the chat endpoint's:
		// the template with the generation prompt, no extra special tokens.
		body["messages"] = messages
		body["add_generation_prompt"] = true
	} else {
		body["prompt"] = prompt
		body["add_special_tokens"] = true
	}
	buf, err := json.Marshal(body)
	if err != nil {
		return nil, fmt.Errorf("vllmkv: tokenize: %w", err)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, strings.TrimRight(t.BaseURL, "/")+"/tokenize", bytes.NewReader(buf))
	if err != nil {
		return nil, fmt.Errorf("vllmkv: tokenize: %w", err)
	}
	req.Header.Set("Content-Type", "application/json")
	client := t.HTTP
	if client == nil {
		client = http.DefaultClient
	}
	resp, err := client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("vllmkv: tokenize: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		return nil, fmt.Errorf("vllmkv: tokenize: %s: %s", resp.Status, strings.TrimSpace(string(msg)))
	}
	var tr tokenizeResponse
	if err := json.NewDecoder(io.LimitReader(resp.Body, maxTokenizeResponse)).Decode(&tr); err != nil {
		return nil, fmt.Errorf("vllmkv: tokenize: undecodable answer: %w", err)
	}
	if tr.Count != len(tr.Tokens) {
		return nil, fmt.Errorf("vllmkv: tokenize: answer counts %d tokens but lists %d", tr.Count, len(tr.Tokens))
	}
	out := make([]uint32, len(tr.Tokens))
	for i, id := range tr.Tokens {
		if id < 0 || id > math.MaxUint32 {
			return nil, fmt.Errorf("vllmkv: tokenize: token %d is %d, not a token id", i, id)
		}
		out[i] = uint32(id)
	}
	return out, nil
}

// BlockHashes tokenizes the prompt with the engine and returns its token
// count and chained block hashes: the Admitted envelope's PromptTokens and
// BlockHashes for precise prefix routing on vLLM.
func (t *Tokenizer) BlockHashes(ctx context.Context, prompt string, messages []schemas.Message) (int, []uint64, error) {
	toks, err := t.Tokenize(ctx, prompt, messages)
	if err != nil {
		return 0, nil, err
	}
	return len(toks), tokens.BlockHashes(toks), nil
}
