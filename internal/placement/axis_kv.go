package placement

import "github.com/switchyard-ai/switchyard/internal/tokens"

// Axis: KV cache state.
//
// Reads the prefix index (KV events): how many of the request's leading
// blocks the worker already holds. Why: a cached prefix skips its prefill,
// which dominates time-to-first-token for long agentic prompts, and a retry
// elsewhere pays it again. The term is the prefill time of the uncached
// part; saved_s reports the seconds the cache saved. The cached blocks also
// shrink the KV blocks the request needs, which the headroom axis checks.
//
// Disabled: no worker is credited with a cached prefix.

func kvTerm(p *Placer, c *cand, r *Request) {
	cached := 0
	if p.on[axKV] {
		cached = int(p.lens[c.w.Idx]) * tokens.BlockSize
		// The engine recomputes at least the last prompt token to produce
		// the first output token.
		if cached > r.PromptTokens-1 {
			cached = r.PromptTokens - 1
		}
	}
	full := c.c.prefillFull
	c.t.CachedTokens = cached
	c.t.PrefillSeconds = full
	if cached > 0 {
		s := p.prefillCached(c.c, r, cached)
		c.t.PrefillSeconds = s
		if full > s {
			c.t.SavedSeconds = full - s
		}
	}
	bs := c.w.BlockSize
	if bs <= 0 {
		bs = tokens.BlockSize
	}
	need := (r.PromptTokens+r.OutputTokens+bs-1)/bs - cached/bs
	if need < 0 {
		need = 0
	}
	c.t.Blocks = need
}
