package stack

import (
	"context"
	"testing"
	"time"

	"github.com/switchyard-ai/switchyard/internal/adapter/bus"
	"github.com/switchyard-ai/switchyard/internal/adapter/cachestore"
	"github.com/switchyard-ai/switchyard/internal/core/cache"
	"github.com/switchyard-ai/switchyard/schemas"
)

// TestAdmissionCacheHonoursTheRequest is issue 31's report through the
// whole system: after a 16-token answer for a tenant with the semantic
// cache, the same prompt with max_tokens 3, at temperature 1.0, as a
// stream with max_tokens 5, or with a stop sequence is computed by a
// worker, not served the stored answer; the same request again, and a
// rewording of it with the same parameters, are served from the cache.
func TestAdmissionCacheHonoursTheRequest(t *testing.T) {
	_, nc, cl := admissionStack(t, `{"tenants":{
		"acme":{"priority":"interactive","cache":{"mode":"semantic"}}}}`, Config{Workers: 1})
	zero, one := 0.0, 1.0
	base := schemas.Request{Model: "llama-3.1-8b", Prompt: "Write a haiku about the sea.", MaxTokens: 16, Temperature: &zero}
	first := do(t, cl, "acme", base)
	if first.Status != schemas.StatusOK || first.FromCache != "" || first.Usage.CompletionTokens != 16 {
		t.Fatalf("first answer should be 16 tokens computed by a worker: %+v", first)
	}
	// The cache is filled from RESULTS asynchronously: wait for the entry.
	js, err := bus.JetStream(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	kv, err := js.KeyValue(ctx, cachestore.DefaultBucket)
	if err != nil {
		t.Fatal(err)
	}
	for key := cache.AnswerKey("acme", base.Model, &base); ; time.Sleep(50 * time.Millisecond) {
		if _, err := kv.Get(ctx, key); err == nil {
			break
		}
		if ctx.Err() != nil {
			t.Fatal("cache entry never stored")
		}
	}
	cases := []struct {
		name      string
		mut       func(r *schemas.Request)
		fromCache string
		maxOut    int
	}{
		{"max_tokens 3", func(r *schemas.Request) { r.MaxTokens = 3 }, "", 3},
		{"temperature 1.0", func(r *schemas.Request) { r.Temperature = &one }, "", 16},
		{"stream, max_tokens 5", func(r *schemas.Request) { r.Stream = true; r.MaxTokens = 5 }, "", 5},
		{"stop", func(r *schemas.Request) { r.Stop = []string{"\n"} }, "", 16},
		{"the same request", func(r *schemas.Request) {}, cache.KindExact, 16},
		{"reworded", func(r *schemas.Request) { r.Prompt = "write a haiku about the sea" }, cache.KindSemantic, 16},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := base
			c.mut(&r)
			res := do(t, cl, "acme", r)
			if res.Status != schemas.StatusOK || res.FromCache != c.fromCache || res.Usage.CompletionTokens > c.maxOut {
				t.Fatalf("from_cache %q, %d completion tokens, status %s; want from_cache %q and at most %d tokens",
					res.FromCache, res.Usage.CompletionTokens, res.Status, c.fromCache, c.maxOut)
			}
			if c.fromCache == "" && res.WorkerID == "" {
				t.Fatalf("not computed by a worker: %+v", res)
			}
		})
	}
}
