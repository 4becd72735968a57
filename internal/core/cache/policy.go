package cache

import (
	"fmt"
	"time"
)

// Cache modes, per tenant.
const (
	ModeOff      = "off"
	ModeExact    = "exact"
	ModeSemantic = "semantic" // exact for deterministic requests, plus semantic
)

// DefaultThreshold is the cosine similarity a semantic hit needs by
// default: high, because a wrong replay costs more than a miss.
const DefaultThreshold = 0.92

// Policy is a tenant's cache policy (the "cache" object of a tenant
// profile).
type Policy struct {
	Mode string `json:"mode"`
	// Threshold is the minimum cosine similarity of a semantic hit, in
	// (0, 1]; 0 means DefaultThreshold.
	Threshold float64 `json:"similarity_threshold,omitempty"`
	// TTLSeconds bounds the age of an entry this tenant may be served;
	// the bucket TTL is the ceiling. 0 means the bucket TTL.
	TTLSeconds int64 `json:"ttl_s,omitempty"`
	// SemanticMultiTurn opts in to semantic hits for multi-turn, session
	// and workflow requests, still scoped by conversation and tool state.
	SemanticMultiTurn bool `json:"semantic_multi_turn,omitempty"`
	// AllowSampled lets either cache answer sampled requests (temperature
	// above 0 or unset, no seed) with an earlier draw for the same prompt
	// and parameters. Off by default: a caller who samples asked for a
	// fresh draw, and a replay is not one.
	AllowSampled bool `json:"allow_sampled,omitempty"`
}

// Validate reports a policy that cannot be applied.
func (p Policy) Validate() error {
	switch p.Mode {
	case "", ModeOff, ModeExact, ModeSemantic:
	default:
		return fmt.Errorf("cache mode %q: use off, exact or semantic", p.Mode)
	}
	if p.Threshold < 0 || p.Threshold > 1 {
		return fmt.Errorf("similarity_threshold %g must be in (0, 1]", p.Threshold)
	}
	if p.TTLSeconds < 0 {
		return fmt.Errorf("ttl_s %d must be >= 0", p.TTLSeconds)
	}
	return nil
}

// Enabled reports whether any caching applies.
func (p Policy) Enabled() bool { return p.Mode == ModeExact || p.Mode == ModeSemantic }

// EffectiveThreshold is the semantic similarity a hit needs: the policy's,
// or DefaultThreshold when it sets none.
func (p Policy) EffectiveThreshold() float64 {
	if p.Threshold <= 0 {
		return DefaultThreshold
	}
	return p.Threshold
}

// TTL is the policy's maximum entry age, 0 for "the bucket's".
func (p Policy) TTL() time.Duration { return time.Duration(p.TTLSeconds) * time.Second }
