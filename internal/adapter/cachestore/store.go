package cachestore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/switchyard-ai/switchyard/internal/adapter/bus"
	"github.com/switchyard-ai/switchyard/internal/core/cache"
	"github.com/switchyard-ai/switchyard/schemas"
)

// DefaultBucket is the KV bucket of both caches.
const DefaultBucket = "sy_cache"

// Config configures a Store.
type Config struct {
	Bucket string
	// TTL is the bucket TTL: the longest any entry lives, whatever a
	// tenant's policy says. 0 means one hour.
	TTL      time.Duration
	Replicas int
	Storage  jetstream.StorageType
	// Embedder for the semantic cache; nil means NGramEmbedder{}.
	Embedder cache.Embedder
	// MaxScan bounds how many entries of one semantic scope a lookup
	// compares (the newest ones); 0 means 256. It keeps the lookup cost
	// bounded on a hot scope, at the price of missing older near-duplicates.
	MaxScan int
}

// Store is the exact + semantic response cache on a JetStream KV bucket.
type Store struct {
	kv      jetstream.KeyValue
	emb     cache.Embedder
	maxScan int
	ttl     time.Duration
}

// Open creates or binds the cache bucket.
func Open(ctx context.Context, js jetstream.JetStream, cfg Config) (*Store, error) {
	if cfg.Bucket == "" {
		cfg.Bucket = DefaultBucket
	}
	if cfg.TTL == 0 {
		cfg.TTL = time.Hour
	}
	if cfg.Replicas == 0 {
		cfg.Replicas = 1
	}
	if cfg.Embedder == nil {
		cfg.Embedder = cache.NGramEmbedder{}
	}
	if cfg.MaxScan <= 0 {
		cfg.MaxScan = 256
	}
	kv, err := bus.OpenKV(ctx, js, jetstream.KeyValueConfig{
		Bucket:      cfg.Bucket,
		Description: "exact and semantic response caches, per tenant",
		TTL:         cfg.TTL,
		Replicas:    cfg.Replicas,
		Storage:     cfg.Storage,
	}, bus.KVUpdate)
	if err != nil {
		return nil, fmt.Errorf("cache: %w", err)
	}
	return &Store{kv: kv, emb: cfg.Embedder, maxScan: cfg.MaxScan, ttl: cfg.TTL}, nil
}

// entry is what one cache key holds.
type entry struct {
	Tenant   string         `json:"tenant"`
	Model    string         `json:"model"`
	Kind     string         `json:"kind"`
	Text     string         `json:"text,omitempty"` // the normalised embedded text, semantic only
	Vector   []float32      `json:"vector,omitempty"`
	StoredAt time.Time      `json:"stored_at"`
	Result   schemas.Result `json:"result"`
}

// Lookup finds a cached answer for tenant's request under policy p, the
// exact cache first (a sure answer), then the semantic one. model is the
// model the request asked for (before any Move: an answer for "auto" is
// an answer for "auto"). A miss returns nil, nil.
func (s *Store) Lookup(ctx context.Context, tenant, model string, r *schemas.Request, p cache.Policy, now time.Time) (*cache.Hit, error) {
	if ok, _ := cache.Cacheable(r, p); !ok {
		return nil, nil
	}
	key := cache.AnswerKey(tenant, model, r)
	e, err := s.read(ctx, key)
	if err != nil {
		return nil, err
	}
	if e != nil && s.usable(e, tenant, model, p, now) {
		return s.hit(e, key, cache.KindExact, 1, r, tenant, now), nil
	}
	if ok, _ := cache.SemanticEligible(r, p); !ok {
		return nil, nil
	}
	text, scope := cache.SemanticParts(tenant, model, s.emb.ID(), r)
	vecs, err := s.emb.Embed(ctx, []string{text})
	if err != nil {
		return nil, fmt.Errorf("cache embed: %w", err)
	}
	keys, err := s.scopeKeys(ctx, scope)
	if err != nil {
		return nil, err
	}
	var best *entry
	bestKey, bestSim := "", 0.0
	for _, k := range keys {
		e, err := s.read(ctx, k)
		if err != nil {
			return nil, err
		}
		if e == nil || e.Kind != cache.KindSemantic || !s.usable(e, tenant, model, p, now) {
			continue
		}
		if sim := cache.Cosine(vecs[0], e.Vector); sim > bestSim {
			best, bestKey, bestSim = e, k, sim
		}
	}
	if best == nil || bestSim < p.EffectiveThreshold() {
		return nil, nil
	}
	return s.hit(best, bestKey, cache.KindSemantic, bestSim, r, tenant, now), nil
}

// usable re-checks what the key already implies — tenant and model — so a
// hash collision or a bug in key building can never serve another
// tenant's answer, and applies the tenant's own TTL under the bucket's.
func (s *Store) usable(e *entry, tenant, model string, p cache.Policy, now time.Time) bool {
	if e.Tenant != tenant || e.Model != model {
		return false
	}
	if ttl := p.TTL(); ttl > 0 && now.Sub(e.StoredAt) > ttl {
		return false
	}
	return now.Sub(e.StoredAt) <= s.ttl
}

func (s *Store) hit(e *entry, key, kind string, sim float64, r *schemas.Request, tenant string, now time.Time) *cache.Hit {
	res := e.Result
	res.ID = r.ID
	res.Tenant = tenant
	res.Status = schemas.StatusOK
	res.Error = nil
	res.FromCache = kind
	res.Timing = schemas.Timing{}
	res.Usage.CachedTokens = res.Usage.PromptTokens
	// A replay costs no GPU time; the worker fields describe the original
	// computation and would mislead accounting, so they are cleared.
	res.GPUSeconds, res.CostUSD, res.WorkerID, res.GPU, res.Attempt = 0, 0, "", "", 0
	res.Priority = r.Priority
	res.FinishedAt = now
	res.SLOMet = true
	res.Deadline = nil
	reason := fmt.Sprintf("%s cache hit, stored %s ago", kind, now.Sub(e.StoredAt).Round(time.Millisecond))
	if kind == cache.KindSemantic {
		reason = fmt.Sprintf("semantic cache hit, cosine %.3f by %s, stored %s ago", sim, s.emb.ID(), now.Sub(e.StoredAt).Round(time.Millisecond))
	}
	return &cache.Hit{Kind: kind, Key: key, Similarity: sim, StoredAt: e.StoredAt, Result: res, Reason: reason}
}

// Put stores a successful result for tenant's request under policy p: in
// the exact cache when the request may be cached at all (cache.Cacheable:
// deterministic, or sampled with the tenant's allow_sampled), in the
// semantic cache when it is eligible. It reports what it stored. Failed
// results and results that themselves came from the cache are never
// stored.
func (s *Store) Put(ctx context.Context, tenant, model string, r *schemas.Request, p cache.Policy, res schemas.Result, now time.Time) (stored []string, err error) {
	if ok, _ := cache.Cacheable(r, p); !ok || res.Status != schemas.StatusOK || res.FromCache != "" {
		return nil, nil
	}
	key := cache.AnswerKey(tenant, model, r)
	if err := s.write(ctx, key, entry{Tenant: tenant, Model: model, Kind: cache.KindExact, StoredAt: now, Result: res}); err != nil {
		return stored, err
	}
	stored = append(stored, cache.KindExact)
	if ok, _ := cache.SemanticEligible(r, p); ok {
		text, scope := cache.SemanticParts(tenant, model, s.emb.ID(), r)
		vecs, err := s.emb.Embed(ctx, []string{text})
		if err != nil {
			return stored, fmt.Errorf("cache embed: %w", err)
		}
		key := scope + "." + cache.Digest(text)[:24]
		if err := s.write(ctx, key, entry{Tenant: tenant, Model: model, Kind: cache.KindSemantic, Text: text, Vector: vecs[0], StoredAt: now, Result: res}); err != nil {
			return stored, err
		}
		stored = append(stored, cache.KindSemantic)
	}
	return stored, nil
}

func (s *Store) write(ctx context.Context, key string, e entry) error {
	b, err := json.Marshal(e)
	if err != nil {
		return fmt.Errorf("cache encode: %w", err)
	}
	if _, err := s.kv.Put(ctx, key, b); err != nil {
		return fmt.Errorf("cache put %s: %w", key, err)
	}
	return nil
}

func (s *Store) read(ctx context.Context, key string) (*entry, error) {
	kve, err := s.kv.Get(ctx, key)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("cache get %s: %w", key, err)
	}
	var e entry
	if err := json.Unmarshal(kve.Value(), &e); err != nil {
		// A corrupt entry is a miss, not an outage.
		return nil, nil
	}
	return &e, nil
}

// scopeKeys lists a semantic scope's keys, newest last, keeping the newest
// MaxScan.
func (s *Store) scopeKeys(ctx context.Context, scope string) ([]string, error) {
	lister, err := s.kv.ListKeysFiltered(ctx, scope+".*")
	if err != nil {
		if errors.Is(err, jetstream.ErrNoKeysFound) {
			return nil, nil
		}
		return nil, fmt.Errorf("cache list %s: %w", scope, err)
	}
	defer lister.Stop()
	var keys []string
	for k := range lister.Keys() {
		keys = append(keys, k)
	}
	if len(keys) > s.maxScan {
		keys = keys[len(keys)-s.maxScan:]
	}
	return keys, nil
}
