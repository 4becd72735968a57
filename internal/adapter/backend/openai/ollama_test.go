package openai

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// showTiny is Ollama v0.6.5's /api/show answer for internal/adapter/gguf's tiny
// model, as recorded (long token arrays elided as Ollama itself does).
const showTiny = `{"template":"{{ .Prompt }}","details":{"parent_model":"","format":"gguf","family":"llama","families":["llama"],"parameter_size":"119K","quantization_level":"unknown"},
"model_info":{"general.alignment":32,"general.architecture":"llama","general.file_type":0,"general.parameter_count":119360,"llama.attention.head_count":4,
"llama.attention.head_count_kv":2,"llama.attention.layer_norm_rms_epsilon":0.00001,"llama.block_count":2,"llama.context_length":2048,"llama.embedding_length":64,
"llama.feed_forward_length":128,"llama.rope.dimension_count":16,"llama.rope.freq_base":10000,"llama.vocab_size":354,"tokenizer.ggml.model":"llama"}}`

func fakeOllama(t *testing.T) *httptest.Server {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/api/version":
			fmt.Fprint(w, `{"version":"0.6.5"}`)
		case "/api/show":
			fmt.Fprint(w, showTiny)
		case "/api/ps":
			fmt.Fprint(w, `{"models":[{"name":"tiny:latest","model":"tiny:latest","size":88092928,"expires_at":"2026-12-01T09:47:35.211252709Z","size_vram":0}]}`)
		case "/api/tags":
			fmt.Fprint(w, `{"models":[{"name":"tiny:latest","size":487104},{"name":"other:latest"}]}`)
		case "/api/generate":
			time.Sleep(5 * time.Millisecond)
			fmt.Fprint(w, `{"model":"tiny","response":"","done":true,"done_reason":"load"}`)
		default:
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(srv.Close)
	return srv
}

func TestOllamaAPI(t *testing.T) {
	c := New(fakeOllama(t).URL, "tiny")
	ctx := context.Background()
	if v, err := c.OllamaVersion(ctx); err != nil || v != "0.6.5" {
		t.Fatalf("version %q %v", v, err)
	}
	s, err := c.Describe(ctx, "tiny")
	if err != nil {
		t.Fatal(err)
	}
	if s.Params != 119360 || s.Layers != 2 || s.Hidden != 64 || s.Heads != 4 || s.KVHeads != 2 || s.HeadDim != 16 ||
		s.Intermediate != 128 || s.Vocab != 354 || s.MaxContext != 2048 || s.Family != "llama" {
		t.Fatalf("spec %+v", s)
	}
	ps, err := c.Running(ctx)
	if err != nil || len(ps) != 1 || !SameModel(ps[0].Name, "tiny") || SameModel(ps[0].Name, "tiny:q4") {
		t.Fatalf("ps %+v %v", ps, err)
	}
	tags, err := c.Available(ctx)
	if err != nil || len(tags) != 2 {
		t.Fatalf("tags %v %v", tags, err)
	}
	// The size on disk is what a cold load of the model reads.
	sized, err := c.Tags(ctx)
	if err != nil || len(sized) != 2 || sized[0].Size != 487104 || sized[1].Size != 0 {
		t.Fatalf("sized tags %+v %v", sized, err)
	}
	// No load_duration in the answer: the call's own time stands in.
	if d, err := c.Load(ctx, "tiny", time.Minute); err != nil || d < 5*time.Millisecond {
		t.Fatalf("load %v %v", d, err)
	}
}

func TestNotOllama(t *testing.T) {
	srv := httptest.NewServer(http.NotFoundHandler()) // vLLM has none of these paths
	defer srv.Close()
	c := New(srv.URL, "m")
	if _, err := c.OllamaVersion(context.Background()); !errors.Is(err, ErrNotOllama) {
		t.Fatalf("err = %v, want ErrNotOllama", err)
	}
	if _, err := c.Describe(context.Background(), "m"); !errors.Is(err, ErrNotOllama) {
		t.Fatalf("describe err = %v", err)
	}
}

func TestDescribeNamesMissingKeys(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, `{"model_info":{"general.architecture":"mamba","general.parameter_count":5}}`)
	}))
	defer srv.Close()
	_, err := New(srv.URL, "m").Describe(context.Background(), "m")
	if err == nil || !strings.Contains(err.Error(), "mamba.block_count") {
		t.Fatalf("err = %v", err)
	}
}
