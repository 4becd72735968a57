package placement

import (
	"github.com/switchyard-ai/switchyard/internal/core/fleet"
	"github.com/switchyard-ai/switchyard/internal/core/tokens"
)

// Axis: KV cache state (row AxisKV in axes.go).
//
// Why: a cached prefix skips its prefill, which dominates
// time-to-first-token for long agentic prompts, and a retry elsewhere pays
// it again.
//
// Reads: the prefix index (KV events' block hashes): how many of the
// request's leading blocks the worker already holds; the worker's block
// size; the request's block hashes and token counts.
//
// Term: prefill_s of the uncached part; saved_s reports the seconds the
// cache saved. The cached blocks also shrink the KV blocks the request
// needs (blocks), which the headroom axis checks. No filter.
//
// Trade-offs: the index is as fresh as the KV events the router has
// applied, so a block evicted since reads as cached until its event
// arrives (a gap forces a snapshot: see internal/core/fleet); only the longest
// leading run counts, not blocks held further in. The holders of a prefix
// are bounded one by one before any group, since a group's bound assumes
// no cache: a request matching thousands of workers would read them all.
//
// Disabled: no worker is credited with a cached prefix.

// kvPrepare matches the request's block hashes against the prefix index,
// once per placement: p.touched lists the workers holding a prefix and
// p.lens their lengths. With the axis off nothing matches.
func kvPrepare(p *Placer, f *fleet.Fleet, r *Request) {
	if p.on[axKV] {
		p.touched = f.Prefix().Match(r.BlockHashes, p.lens, p.touched)
	}
}

// kvMeasure is the axis's per-worker work: the prefill of the uncached
// part, and the blocks the request needs, which the headroom axis checks.
func kvMeasure(p *Placer, c *cand, r *Request) {
	kvTerm(p, c, r)
	kvBlocks(p, c, r)
}

func kvTerm(p *Placer, c *cand, r *Request) {
	cached := cachedTokens(p, c.h, c.i, r)
	full := c.c.prefillFull
	c.t.CachedTokens = cached
	c.t.PrefillSeconds = prefillSeconds(p, c.c, r, cached)
	if full > c.t.PrefillSeconds {
		c.t.SavedSeconds = full - c.t.PrefillSeconds
	}
}

// cachedTokens is how many of r's prompt tokens worker i holds in its KV
// cache.
func cachedTokens(p *Placer, h *hotRow, i int32, r *Request) int {
	if h.flags&rowTouched == 0 { // never set with the axis off
		return 0
	}
	cached := int(p.lens[i]) * tokens.BlockSize
	// The engine recomputes at least the last prompt token to produce the
	// first output token.
	return min(cached, r.PromptTokens-1)
}

// prefillSeconds is the prefill of r's prompt with cached tokens already
// in the worker's cache.
func prefillSeconds(p *Placer, cl *class, r *Request, cached int) float64 {
	if cached > 0 && p.rp.phase != takesDecode { // a decode leg's prefillFull is 0
		return p.prefillCached(cl, r, cached)
	}
	return cl.prefillFull
}

// kvBlocks sizes the KV blocks the request needs beyond its cached prefix.
// Only the headroom axis reads it; the lower bound does not.
func kvBlocks(_ *Placer, c *cand, r *Request) {
	cached := c.t.CachedTokens
	bs := c.row.blockSize
	if bs <= 0 {
		bs = tokens.BlockSize
	}
	need := (r.PromptTokens+r.OutputTokens+bs-1)/bs - cached/bs
	if need < 0 {
		need = 0
	}
	c.t.Blocks = need
}
