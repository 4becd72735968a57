package openai

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/switchyard-ai/switchyard/schemas"
)

// Ollama serves the OpenAI API and, beside it, its own: /api/version names
// the engine, /api/show describes a model from its GGUF metadata, /api/ps
// lists the models loaded in memory, and /api/generate with no prompt loads
// a model (keep_alive 0 unloads it). The worker uses these for what the
// OpenAI API cannot say: what a model is, whether it is warm, and how long
// loading it really takes.

// ErrNotOllama is returned by the Ollama calls when the server does not
// speak Ollama's API (vLLM, SGLang and llama.cpp's server do not).
var ErrNotOllama = errors.New("openai: the server does not speak Ollama's API")

// OllamaVersion returns the Ollama version the server reports, or
// ErrNotOllama.
func (c *Client) OllamaVersion(ctx context.Context) (string, error) {
	var v struct {
		Version string `json:"version"`
	}
	if err := c.getJSON(ctx, "/api/version", &v); err != nil {
		return "", err
	}
	if v.Version == "" {
		return "", ErrNotOllama
	}
	return v.Version, nil
}

// Describe reads model's architecture from Ollama's /api/show (the GGUF
// metadata, under the architecture's own key prefix), as the catalog's
// shape. Only Llama-style dense decoders map onto that shape; anything the
// metadata leaves out is an error naming the key.
func (c *Client) Describe(ctx context.Context, model string) (schemas.ModelSpec, error) {
	var show struct {
		ModelInfo map[string]any `json:"model_info"`
		Details   struct {
			Family string `json:"family"`
		} `json:"details"`
	}
	if err := c.postJSON(ctx, "/api/show", map[string]any{"model": model}, &show); err != nil {
		return schemas.ModelSpec{}, err
	}
	info := show.ModelInfo
	arch, _ := info["general.architecture"].(string)
	if arch == "" {
		return schemas.ModelSpec{}, fmt.Errorf("openai: ollama /api/show %s: no general.architecture", model)
	}
	var missing []string
	num := func(key string, required bool) int64 {
		v, ok := info[key].(float64)
		if !ok {
			if required {
				missing = append(missing, key)
			}
			return 0
		}
		return int64(v)
	}
	p := arch + "."
	s := schemas.ModelSpec{
		Family:       show.Details.Family,
		Params:       num("general.parameter_count", true),
		Layers:       int(num(p+"block_count", true)),
		Hidden:       int(num(p+"embedding_length", true)),
		Heads:        int(num(p+"attention.head_count", true)),
		KVHeads:      int(num(p+"attention.head_count_kv", false)),
		Intermediate: int(num(p+"feed_forward_length", true)),
		Vocab:        int(num(p+"vocab_size", false)),
		MaxContext:   int(num(p+"context_length", true)),
		Source:       "ollama /api/show (" + arch + " GGUF metadata)",
	}
	if len(missing) > 0 {
		return schemas.ModelSpec{}, fmt.Errorf("openai: ollama /api/show %s: model_info lacks %s", model, strings.Join(missing, ", "))
	}
	if s.KVHeads == 0 {
		s.KVHeads = s.Heads // no grouped-query attention
	}
	if s.Heads > 0 {
		s.HeadDim = s.Hidden / s.Heads
	}
	if kd := num(p+"attention.key_length", false); kd > 0 {
		s.HeadDim = int(kd)
	}
	if s.Vocab == 0 {
		if toks, ok := info["tokenizer.ggml.tokens"].([]any); ok {
			s.Vocab = len(toks)
		} else {
			s.Vocab = 1 // Ollama elides long arrays; the roofline barely needs it
		}
	}
	if s.Family == "" {
		s.Family = arch
	}
	return s, nil
}

// Loaded is one model in an Ollama server's memory (/api/ps).
type Loaded struct {
	Name      string    `json:"name"`
	Model     string    `json:"model"`
	Size      int64     `json:"size"`
	SizeVRAM  int64     `json:"size_vram"`
	ExpiresAt time.Time `json:"expires_at"`
}

// Running lists the models loaded in memory (/api/ps).
func (c *Client) Running(ctx context.Context) ([]Loaded, error) {
	var ps struct {
		Models []Loaded `json:"models"`
	}
	if err := c.getJSON(ctx, "/api/ps", &ps); err != nil {
		return nil, err
	}
	return ps.Models, nil
}

// Tag is one model an Ollama server has on disk (/api/tags): its name and
// the bytes of its files there, which is what a cold load reads.
type Tag struct {
	Name string `json:"name"`
	Size int64  `json:"size"`
}

// Tags lists the models the server has on disk with their sizes (/api/tags).
func (c *Client) Tags(ctx context.Context) ([]Tag, error) {
	var tags struct {
		Models []Tag `json:"models"`
	}
	if err := c.getJSON(ctx, "/api/tags", &tags); err != nil {
		return nil, err
	}
	return tags.Models, nil
}

// Available lists the models the server has on disk (/api/tags).
func (c *Client) Available(ctx context.Context) ([]string, error) {
	tags, err := c.Tags(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]string, 0, len(tags))
	for _, m := range tags {
		out = append(out, m.Name)
	}
	return out, nil
}

// SameModel reports whether two Ollama model names are the same model:
// "tiny" and "tiny:latest" are.
func SameModel(a, b string) bool {
	norm := func(s string) string {
		s = strings.ToLower(s)
		if !strings.Contains(s, ":") {
			s += ":latest"
		}
		return s
	}
	return norm(a) == norm(b)
}

// Load makes model resident and keeps it so for keepAlive (negative: until
// unloaded), returning how long the load took: the engine's load_duration
// when it reports one, else the call's own duration — Ollama answers a
// load-only request only once the model is loaded, and v0.6.5 reports no
// load_duration for it, so that is the load plus one loopback round trip.
// A model already resident loads in about one round trip.
func (c *Client) Load(ctx context.Context, model string, keepAlive time.Duration) (time.Duration, error) {
	var out struct {
		LoadDuration int64  `json:"load_duration"` // nanoseconds
		DoneReason   string `json:"done_reason"`
	}
	body := map[string]any{"model": model, "keep_alive": keepAliveValue(keepAlive), "stream": false}
	start := time.Now()
	if err := c.postJSON(ctx, "/api/generate", body, &out); err != nil {
		return 0, err
	}
	if out.LoadDuration > 0 {
		return time.Duration(out.LoadDuration), nil
	}
	return time.Since(start), nil
}

// Unload evicts model from memory now (keep_alive 0).
func (c *Client) Unload(ctx context.Context, model string) error {
	return c.postJSON(ctx, "/api/generate", map[string]any{"model": model, "keep_alive": 0, "stream": false}, nil)
}

// keepAliveValue is Ollama's keep_alive: seconds, or -1 for forever.
func keepAliveValue(d time.Duration) any {
	if d < 0 {
		return -1
	}
	return d.String()
}

func (c *Client) getJSON(ctx context.Context, path string, out any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.BaseURL+path, nil)
	if err != nil {
		return err
	}
	return c.doJSON(req, path, out)
}

func (c *Client) postJSON(ctx context.Context, path string, body, out any) error {
	buf, err := json.Marshal(body)
	if err != nil {
		return err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.BaseURL+path, bytes.NewReader(buf))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	return c.doJSON(req, path, out)
}

func (c *Client) doJSON(req *http.Request, path string, out any) error {
	if c.APIKey != "" {
		req.Header.Set("Authorization", "Bearer "+c.APIKey)
	}
	resp, err := c.httpClient().Do(req)
	if err != nil {
		return fmt.Errorf("openai: %s: %w", path, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode == http.StatusNotFound || resp.StatusCode == http.StatusMethodNotAllowed {
		io.Copy(io.Discard, io.LimitReader(resp.Body, 4096))
		return fmt.Errorf("%w (%s answered %s)", ErrNotOllama, path, resp.Status)
	}
	if resp.StatusCode != http.StatusOK {
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		return fmt.Errorf("openai: %s: %s: %s", path, resp.Status, strings.TrimSpace(string(msg)))
	}
	if out == nil {
		io.Copy(io.Discard, resp.Body)
		return nil
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, 16<<20)).Decode(out); err != nil {
		return fmt.Errorf("openai: %s: decoding the answer: %w", path, err)
	}
	return nil
}
