package cachestore

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/switchyard-ai/switchyard/internal/core/cache"
	"github.com/switchyard-ai/switchyard/internal/testkit/bustest"
	"github.com/switchyard-ai/switchyard/schemas"
)

var t0 = time.Date(2025, 1, 1, 12, 0, 0, 0, time.UTC)

func startJS(t *testing.T) jetstream.JetStream {
	t.Helper()
	return bustest.Start(t).JS
}

func openStore(t *testing.T, js jetstream.JetStream, ttl time.Duration) *Store {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, err := Open(ctx, js, Config{TTL: ttl})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func f64(v float64) *float64 { return &v }

func det(id, prompt string) *schemas.Request {
	return &schemas.Request{ID: id, Model: "llama-3.1-8b", Prompt: prompt, MaxTokens: 64, Temperature: f64(0)}
}

func answer(text string) schemas.Result {
	return schemas.Result{ID: "orig", Tenant: "acme", Status: schemas.StatusOK, Model: "llama-3.1-8b", Text: text,
		Usage: schemas.Usage{PromptTokens: 10, CompletionTokens: 5}, GPUSeconds: 0.4, CostUSD: 0.001, WorkerID: "w1", Simulated: true}
}

var exactPol = cache.Policy{Mode: cache.ModeExact}
var semPol = cache.Policy{Mode: cache.ModeSemantic}

func TestExactHitAndCrossTenantMiss(t *testing.T) {
	s := openStore(t, startJS(t), time.Hour)
	ctx := context.Background()
	stored, err := s.Put(ctx, "acme", "llama-3.1-8b", det("r1", "Translate 'cat' to French."), exactPol, answer("chat"), t0)
	if err != nil || len(stored) != 1 || stored[0] != cache.KindExact {
		t.Fatalf("put: %v %v", stored, err)
	}
	// Whitespace differences normalise to the same key.
	h, err := s.Lookup(ctx, "acme", "llama-3.1-8b", det("r2", "  Translate 'cat'   to French.\n"), exactPol, t0.Add(time.Second))
	if err != nil || h == nil {
		t.Fatalf("expected an exact hit, got %v %v", h, err)
	}
	if h.Kind != cache.KindExact || h.Result.FromCache != "exact" || h.Result.ID != "r2" || h.Result.Text != "chat" || h.Result.GPUSeconds != 0 {
		t.Fatalf("hit %+v", h.Result)
	}
	// The same request from another tenant must miss.
	if h, err := s.Lookup(ctx, "globex", "llama-3.1-8b", det("r3", "Translate 'cat' to French."), exactPol, t0.Add(time.Second)); err != nil || h != nil {
		t.Fatalf("cross-tenant lookup returned %+v %v", h, err)
	}
	// Another model, max_tokens or seed is another answer.
	other := det("r4", "Translate 'cat' to French.")
	other.MaxTokens = 65
	if h, _ := s.Lookup(ctx, "acme", "llama-3.1-8b", other, exactPol, t0); h != nil {
		t.Fatal("different max_tokens hit")
	}
	if h, _ := s.Lookup(ctx, "acme", "llama-3.1-70b", det("r5", "Translate 'cat' to French."), exactPol, t0); h != nil {
		t.Fatal("different model hit")
	}
}

func TestExactSkipsNonDeterministicAndFailures(t *testing.T) {
	s := openStore(t, startJS(t), time.Hour)
	ctx := context.Background()
	sampled := &schemas.Request{ID: "r1", Model: "m", Prompt: "a poem", MaxTokens: 10, Temperature: f64(0.8)}
	if st, _ := s.Put(ctx, "acme", "m", sampled, exactPol, answer("roses"), t0); len(st) != 0 {
		t.Fatalf("sampled request stored: %v", st)
	}
	failed := answer("")
	failed.Status = schemas.StatusFailed
	if st, _ := s.Put(ctx, "acme", "m", det("r2", "q"), exactPol, failed, t0); len(st) != 0 {
		t.Fatalf("failed result stored: %v", st)
	}
	if st, _ := s.Put(ctx, "acme", "m", det("r3", "q"), cache.Policy{Mode: cache.ModeOff}, answer("x"), t0); len(st) != 0 {
		t.Fatalf("cache off but stored: %v", st)
	}
}

func TestSemanticHitMissAndTenantIsolation(t *testing.T) {
	s := openStore(t, startJS(t), time.Hour)
	ctx := context.Background()
	q := &schemas.Request{ID: "r1", Model: "llama-3.1-8b", Prompt: "How do I reset my password on the portal?", MaxTokens: 100, Temperature: f64(0)}
	if st, err := s.Put(ctx, "acme", "llama-3.1-8b", q, semPol, answer("Click 'forgot password'."), t0); err != nil || !slices.Contains(st, cache.KindSemantic) {
		t.Fatalf("put %v %v", st, err)
	}
	near := &schemas.Request{ID: "r2", Model: "llama-3.1-8b", Prompt: "how do I reset my password on the portal", MaxTokens: 100, Temperature: f64(0)}
	h, err := s.Lookup(ctx, "acme", "llama-3.1-8b", near, semPol, t0.Add(time.Second))
	if err != nil || h == nil || h.Kind != cache.KindSemantic || h.Result.FromCache != "semantic" || h.Similarity < cache.DefaultThreshold {
		t.Fatalf("expected a semantic hit, got %+v %v", h, err)
	}
	far := &schemas.Request{ID: "r3", Model: "llama-3.1-8b", Prompt: "Summarise the quarterly revenue report.", MaxTokens: 100, Temperature: f64(0)}
	if h, _ := s.Lookup(ctx, "acme", "llama-3.1-8b", far, semPol, t0); h != nil {
		t.Fatalf("unrelated prompt hit with %.3f", h.Similarity)
	}
	if h, _ := s.Lookup(ctx, "globex", "llama-3.1-8b", near, semPol, t0); h != nil {
		t.Fatal("semantic lookup crossed tenants")
	}
}

// The agentic safety rule: by default no semantic answer for workflow,
// session or multi-turn traffic; with the opt-in, only within the same
// conversation and tool state.
func TestSemanticAgenticSafety(t *testing.T) {
	s := openStore(t, startJS(t), time.Hour)
	ctx := context.Background()
	step := func(id, tool string) *schemas.Request {
		return &schemas.Request{ID: id, Model: "m", MaxTokens: 50, Temperature: f64(0), Prompt: "Given the search results, which flight is cheapest?",
			Workflow: &schemas.Workflow{ID: "wf1", Step: 2, Of: 3, ToolState: tool}}
	}
	// The exact cache may keep it (the same prompt and parameters at
	// temperature 0 are the same answer whatever the tool state); the
	// semantic one may not.
	if st, _ := s.Put(ctx, "acme", "m", step("a", "tool-v1"), semPol, answer("LH400"), t0); slices.Contains(st, cache.KindSemantic) {
		t.Fatalf("workflow step stored without opt-in: %v", st)
	}
	multi := &schemas.Request{ID: "b", Model: "m", MaxTokens: 50, Temperature: f64(0), Messages: []schemas.Message{
		{Role: "user", Content: "hi"}, {Role: "assistant", Content: "hello"}, {Role: "user", Content: "and now?"}}}
	if ok, why := cache.SemanticEligible(multi, semPol); ok || why == "" {
		t.Fatal("multi-turn request eligible without opt-in")
	}
	optIn := cache.Policy{Mode: cache.ModeSemantic, SemanticMultiTurn: true}
	if st, _ := s.Put(ctx, "acme", "m", step("c", "tool-v1"), optIn, answer("LH400"), t0); !slices.Contains(st, cache.KindSemantic) {
		t.Fatalf("opted-in workflow step not stored: %v", st)
	}
	// Reworded, so only the semantic cache can answer.
	reworded := func(id, tool string) *schemas.Request {
		r := step(id, tool)
		r.Prompt = "given the search results: which flight is cheapest"
		return r
	}
	if h, _ := s.Lookup(ctx, "acme", "m", reworded("d", "tool-v1"), optIn, t0); h == nil || h.Kind != cache.KindSemantic {
		t.Fatalf("same tool state should hit the semantic cache when opted in: %+v", h)
	}
	if h, _ := s.Lookup(ctx, "acme", "m", reworded("e", "tool-v2"), optIn, t0); h != nil {
		t.Fatal("a changed tool result replayed a stale answer")
	}
}

func TestTTL(t *testing.T) {
	js := startJS(t)
	ctx := context.Background()
	s := openStore(t, js, time.Second)
	st, err := s.kv.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.TTL() != time.Second {
		t.Fatalf("bucket TTL %v, want 1s", st.TTL())
	}
	// The tenant's own TTL applies under the bucket's (pure clock check).
	pol := cache.Policy{Mode: cache.ModeExact, TTLSeconds: 60}
	long := openStore(t, js, time.Hour) // same bucket name: reconfigures TTL to 1h
	if _, err := long.Put(ctx, "acme", "m", det("r1", "q"), pol, answer("a"), t0); err != nil {
		t.Fatal(err)
	}
	if h, _ := long.Lookup(ctx, "acme", "m", det("r2", "q"), pol, t0.Add(59*time.Second)); h == nil {
		t.Fatal("entry within the tenant TTL missed")
	}
	if h, _ := long.Lookup(ctx, "acme", "m", det("r3", "q"), pol, t0.Add(61*time.Second)); h != nil {
		t.Fatal("entry past the tenant TTL hit")
	}
	// And the bucket TTL really expires entries in JetStream.
	short, err := Open(ctx, js, Config{Bucket: "sy_cache_short", TTL: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	if _, err := short.Put(ctx, "acme", "m", det("r4", "q"), exactPol, answer("a"), now); err != nil {
		t.Fatal(err)
	}
	key := cache.AnswerKey("acme", "m", det("x", "q"))
	if _, err := short.kv.Get(ctx, key); err != nil {
		t.Fatalf("just-stored entry missing: %v", err)
	}
	deadline := time.Now().Add(8 * time.Second)
	for {
		if _, err := short.kv.Get(ctx, key); err != nil {
			break // expired by the server
		}
		if time.Now().After(deadline) {
			t.Fatal("entry did not expire within 8s of a 1s bucket TTL")
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// Issue 31's report, against a real bucket: after an answer for one
// request, the same prompt with anything that changes the answer —
// max_tokens, sampling, stop, tools, top_p, response_format, or a stream
// with another max_tokens — is computed, not served the stored answer,
// by either cache; the same request again is served.
func TestCacheHonoursTheRequest(t *testing.T) {
	s := openStore(t, startJS(t), time.Hour)
	ctx := context.Background()
	q := func(id string) *schemas.Request {
		return &schemas.Request{ID: id, Model: "m", Prompt: "Write a haiku about the sea.", MaxTokens: 16, Temperature: f64(0)}
	}
	if st, err := s.Put(ctx, "acme", "m", q("r0"), semPol, answer("sixteen tokens of sea"), t0); err != nil || len(st) != 2 {
		t.Fatalf("put: %v %v", st, err)
	}
	seed := int64(3)
	cases := []struct {
		name string
		mut  func(r *schemas.Request)
		hit  bool
	}{
		{"same request", func(r *schemas.Request) {}, true},
		{"same request as a stream", func(r *schemas.Request) { r.Stream = true }, true},
		{"reworded", func(r *schemas.Request) { r.Prompt = "write a haiku about the sea" }, true},
		{"max_tokens 3", func(r *schemas.Request) { r.MaxTokens = 3 }, false},
		{"stream, max_tokens 5", func(r *schemas.Request) { r.Stream = true; r.MaxTokens = 5 }, false},
		{"temperature 1.0", func(r *schemas.Request) { r.Temperature = f64(1) }, false},
		{"temperature unset", func(r *schemas.Request) { r.Temperature = nil }, false},
		{"temperature 1.0, seeded", func(r *schemas.Request) { r.Temperature = f64(1); r.Seed = &seed }, false},
		{"top_p", func(r *schemas.Request) { r.TopP = f64(0.9) }, false},
		{"stop", func(r *schemas.Request) { r.Stop = []string{"\n"} }, false},
		{"tools", func(r *schemas.Request) {
			r.Tools = []map[string]any{{"type": "function", "function": map[string]any{"name": "tide_table"}}}
		}, false},
		{"response_format", func(r *schemas.Request) { r.ResponseFormat = map[string]any{"type": "json_object"} }, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := q("r1")
			c.mut(r)
			h, err := s.Lookup(ctx, "acme", "m", r, semPol, t0.Add(time.Second))
			if err != nil {
				t.Fatal(err)
			}
			if (h != nil) != c.hit {
				t.Fatalf("hit = %+v, want a hit: %v", h, c.hit)
			}
		})
	}
}

// A sampled request is neither stored nor served unless the tenant sets
// cache.allow_sampled; with it, the same sampled request is served the
// earlier draw, and a deterministic one is still not served a draw.
func TestSampledOnlyWhenTheTenantAsks(t *testing.T) {
	s := openStore(t, startJS(t), time.Hour)
	ctx := context.Background()
	sampled := func(id string) *schemas.Request {
		return &schemas.Request{ID: id, Model: "m", Prompt: "Tell me a story.", MaxTokens: 32, Temperature: f64(0.9)}
	}
	if st, err := s.Put(ctx, "acme", "m", sampled("r1"), semPol, answer("once"), t0); err != nil || len(st) != 0 {
		t.Fatalf("sampled answer stored without allow_sampled: %v %v", st, err)
	}
	allow := cache.Policy{Mode: cache.ModeSemantic, AllowSampled: true}
	if st, err := s.Put(ctx, "acme", "m", sampled("r2"), allow, answer("once"), t0); err != nil || len(st) != 2 {
		t.Fatalf("sampled answer not stored with allow_sampled: %v %v", st, err)
	}
	if h, _ := s.Lookup(ctx, "acme", "m", sampled("r3"), semPol, t0); h != nil {
		t.Fatalf("sampled request served from cache without allow_sampled: %+v", h)
	}
	if h, _ := s.Lookup(ctx, "acme", "m", sampled("r4"), allow, t0); h == nil || h.Kind != cache.KindExact || h.Result.Text != "once" {
		t.Fatalf("sampled request with allow_sampled missed: %+v", h)
	}
	greedy := sampled("r5")
	greedy.Temperature = f64(0)
	if h, _ := s.Lookup(ctx, "acme", "m", greedy, allow, t0); h != nil {
		t.Fatalf("a temperature-0 request was served a sampled draw: %+v", h)
	}
}
