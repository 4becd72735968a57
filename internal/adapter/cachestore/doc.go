// Package cachestore keeps the response caches of internal/core/cache in a
// JetStream KV bucket (exact and semantic entries, one bucket TTL bounding
// both) and holds OpenAIEmbedder, the embedder that calls a remote
// /v1/embeddings endpoint. What may be cached, under which key and how alike
// two prompts must be are internal/core/cache's rules; this package only
// stores, scans and re-addresses what those rules allow.
package cachestore
