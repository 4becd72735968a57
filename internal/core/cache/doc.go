// Package cache owns Switchyard's response caches, the "Avoid" quadrant:
// work that is not done at all because its answer is already known.
//
// This package holds the caches' pure rules — keys, eligibility, policy,
// similarity and the offline embedder; internal/adapter/cachestore keeps the
// entries in a JetStream KV bucket and calls remote embedders.
//
// Two caches share one JetStream KV bucket whose TTL bounds every entry:
//
//   - Exact: keyed by tenant, model, a hash of the whitespace-normalised
//     prompt and every generation parameter that can change the answer
//     (max_tokens, temperature, top_p, seed, stop, response_format,
//     tools). A hit is the answer the model would have given.
//   - Semantic: near-duplicate prompts, found by cosine similarity of
//     embeddings above the tenant's threshold, searched only inside one
//     scope: tenant, model, the same generation parameters, embedder,
//     system prompt, conversation history, workflow id and tool state, and
//     session id.
//
// Both serve only deterministic requests (temperature 0 or a fixed seed)
// unless the tenant sets Policy.AllowSampled: a sampled request asked for
// a fresh draw, and a replay is not one (Cacheable).
//
// Both are strictly per tenant: the tenant is part of every key and every
// entry records its tenant, which is checked again on read, so no answer
// can cross tenants even through a hash collision.
//
// Agentic safety rule. Semantic caches replay stale answers in multi-turn
// and tool-using traffic: the same question after a different tool result
// needs a different answer. So by default a semantic hit is only possible
// for a single-turn request (a prompt, or system messages plus one user
// message) with no workflow and no session. A tenant may opt in
// (Policy.SemanticMultiTurn); even then the scope includes the whole
// conversation before the last user message, the workflow's tool state and
// the session, so only the final question may vary.
//
// Embedders. OpenAIEmbedder calls any OpenAI-compatible /v1/embeddings
// endpoint and measures semantic similarity as well as that model does.
// The offline default, NGramEmbedder, needs no network or model: it hashes
// character trigrams and word uni/bigrams into a fixed-size vector. It
// measures LEXICAL similarity — shared spelling and wording — not meaning:
// "How do I reset my password?" and "how do i reset my password" match,
// but "cancel my subscription" and "end my plan" do not, and two prompts
// that differ in one crucial word ("is" / "isn't") can still score high.
// Use a high threshold (the default 0.92) with it, or a real embedder.
package cache
