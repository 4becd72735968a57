package cachestore

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/switchyard-ai/switchyard/internal/core/cache"
	"github.com/switchyard-ai/switchyard/schemas"
)

// meaningServer is an OpenAI-compatible /v1/embeddings server whose
// vectors stand for meaning, not spelling: texts about ending a
// subscription share one direction, everything else another. It records
// each request body and the Authorization header it came with.
type meaningServer struct {
	mu   sync.Mutex
	reqs []embedRequest
	auth []string
	fail bool
}

func (m *meaningServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var req embedRequest
	if r.Method != http.MethodPost || r.URL.Path != "/v1/embeddings" || r.Header.Get("Content-Type") != "application/json" ||
		json.NewDecoder(r.Body).Decode(&req) != nil {
		http.Error(w, `{"error":{"message":"want a JSON POST to /v1/embeddings"}}`, http.StatusBadRequest)
		return
	}
	m.mu.Lock()
	m.reqs, m.auth = append(m.reqs, req), append(m.auth, r.Header.Get("Authorization"))
	fail := m.fail
	m.mu.Unlock()
	if fail {
		w.WriteHeader(http.StatusServiceUnavailable)
		w.Write([]byte(`{"error":{"message":"model loading"}}`))
		return
	}
	type datum struct {
		Object    string    `json:"object"`
		Index     int       `json:"index"`
		Embedding []float32 `json:"embedding"`
	}
	out := struct {
		Object string  `json:"object"`
		Data   []datum `json:"data"`
		Model  string  `json:"model"`
	}{Object: "list", Model: req.Model}
	for i, text := range req.Input {
		v := []float32{0, 1, 0}
		if t := strings.ToLower(text); strings.Contains(t, "subscription") || strings.Contains(t, "plan") {
			v = []float32{1, 0.05, 0}
		}
		out.Data = append(out.Data, datum{Object: "embedding", Index: i, Embedding: v})
	}
	json.NewEncoder(w).Encode(out)
}

// With the OpenAI-compatible embedder configured (the admitter's
// --cache-embed-url and --cache-embed-model), a rephrasing that shares no
// wording hits the semantic cache — the built-in n-gram embedder misses it —
// each embedding request carries the model and the prompt, the hit names
// the embedder, and an embedder outage is an error the admitter logs as a
// miss, never a wrong answer.
func TestSemanticHitThroughOpenAIEmbedder(t *testing.T) {
	srv := &meaningServer{}
	hs := httptest.NewServer(srv)
	defer hs.Close()
	js := startJS(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, err := Open(ctx, js, Config{Bucket: "cache-openai", Embedder: &OpenAIEmbedder{BaseURL: hs.URL, Model: "bge", APIKey: "sk-test"}})
	if err != nil {
		t.Fatal(err)
	}
	lexical, err := Open(ctx, js, Config{Bucket: "cache-ngram"})
	if err != nil {
		t.Fatal(err)
	}
	req := func(id, prompt string) *schemas.Request {
		return &schemas.Request{ID: id, Model: "llama-3.1-8b", Prompt: prompt, MaxTokens: 64, Temperature: f64(0)}
	}
	stored := req("r1", "How do I cancel my subscription?")
	rephrased := req("r2", "End my plan, please")
	for _, st := range []*Store{s, lexical} {
		if kinds, err := st.Put(ctx, "acme", "llama-3.1-8b", stored, semPol, answer("Settings, then Billing."), t0); err != nil || len(kinds) == 0 {
			t.Fatalf("put: %v %v", kinds, err)
		}
	}
	if h, err := lexical.Lookup(ctx, "acme", "llama-3.1-8b", rephrased, semPol, t0.Add(time.Second)); err != nil || h != nil {
		t.Fatalf("the n-gram embedder matched a rephrasing with no shared words (%+v, %v): the test shows nothing", h, err)
	}
	h, err := s.Lookup(ctx, "acme", "llama-3.1-8b", rephrased, semPol, t0.Add(time.Second))
	if err != nil || h == nil || h.Kind != cache.KindSemantic || h.Result.Text != "Settings, then Billing." {
		t.Fatalf("lookup through the embedder: %+v %v, want a semantic hit", h, err)
	}
	if !strings.Contains(h.Reason, "openai:bge") {
		t.Errorf("hit reason %q does not name the embedder", h.Reason)
	}
	if h, err := s.Lookup(ctx, "acme", "llama-3.1-8b", req("r3", "Summarise the quarterly revenue report."), semPol, t0.Add(time.Second)); err != nil || h != nil {
		t.Fatalf("an unrelated prompt: %+v %v, want a miss", h, err)
	}
	srv.mu.Lock()
	reqs, auth := srv.reqs, srv.auth
	srv.mu.Unlock()
	if len(reqs) != 3 {
		t.Fatalf("%d embedding requests, want 3 (one put, two lookups)", len(reqs))
	}
	for i, want := range []string{stored.Prompt, rephrased.Prompt, "Summarise the quarterly revenue report."} {
		if reqs[i].Model != "bge" || len(reqs[i].Input) != 1 || reqs[i].Input[0] != want || auth[i] != "Bearer sk-test" {
			t.Errorf("request %d: model %q input %q auth %q; want bge, [%q], Bearer sk-test", i, reqs[i].Model, reqs[i].Input, auth[i], want)
		}
	}
	srv.mu.Lock()
	srv.fail = true
	srv.mu.Unlock()
	if h, err := s.Lookup(ctx, "acme", "llama-3.1-8b", rephrased, semPol, t0.Add(time.Second)); err == nil || h != nil ||
		!strings.Contains(err.Error(), "HTTP 503: model loading") {
		t.Fatalf("embedder down: %+v %v, want no hit and the server's error", h, err)
	}
}
