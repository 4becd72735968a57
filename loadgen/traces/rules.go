package traces

import (
	"encoding/binary"
	"fmt"
	"hash/fnv"
	"time"

	"github.com/switchyard-ai/switchyard/schemas"
)

// Tenant is one synthetic tenant of the assignment rules.
type Tenant struct {
	Name     string
	Priority string
	// Share is the tenant's fraction of sessions.
	Share float64
}

// ClassSLO is the latency target of one priority class. A request's TTFT
// target grows with its prompt, because a 100k-token prompt cannot start as
// fast as a 1k-token one on any GPU: TTFT ≤ TTFTBase + PerPromptToken·prompt.
type ClassSLO struct {
	TTFTBase       time.Duration
	PerPromptToken time.Duration
	TPOT           time.Duration
}

// DefaultTenants are the tenants the rules assign. Class shares: critical
// 10 %, interactive 50 %, standard 25 %, batch 15 % of sessions.
var DefaultTenants = []Tenant{
	{"support-bot", schemas.PriorityCritical, 0.10},
	{"search-assist", schemas.PriorityInteractive, 0.30},
	{"ide-copilot", schemas.PriorityInteractive, 0.20},
	{"docs-qa", schemas.PriorityStandard, 0.15},
	{"analytics", schemas.PriorityStandard, 0.10},
	{"eval-batch", schemas.PriorityBatch, 0.15},
}

// DefaultSLOs are the per-class targets. The per-token TTFT slack is 4-20×
// an H100's uncached prefill rate for an 8B model (~40k tokens/s), so a
// request misses only when it queued or was placed badly, not because it
// is long. TPOT targets follow common interactive-chat objectives.
var DefaultSLOs = map[string]ClassSLO{
	schemas.PriorityCritical:    {TTFTBase: 1 * time.Second, PerPromptToken: 100 * time.Microsecond, TPOT: 50 * time.Millisecond},
	schemas.PriorityInteractive: {TTFTBase: 2 * time.Second, PerPromptToken: 100 * time.Microsecond, TPOT: 75 * time.Millisecond},
	schemas.PriorityStandard:    {TTFTBase: 5 * time.Second, PerPromptToken: 200 * time.Microsecond, TPOT: 100 * time.Millisecond},
	schemas.PriorityBatch:       {TTFTBase: 30 * time.Second, PerPromptToken: 500 * time.Microsecond, TPOT: 200 * time.Millisecond},
}

// SetSLO fills r's TTFT and TPOT targets and its end-to-end deadline
// (TTFT target plus TPOT for every further output token) from its class.
func SetSLO(r *Request) {
	c, ok := DefaultSLOs[r.Priority]
	if !ok {
		c = DefaultSLOs[schemas.PriorityStandard]
	}
	r.TTFTTarget = c.TTFTBase + time.Duration(r.PromptTokens)*c.PerPromptToken
	r.TPOTTarget = c.TPOT
	r.Deadline = r.TTFTTarget + time.Duration(max(r.OutputTokens-1, 0))*c.TPOT
}

// Unit maps (seed, key) to a deterministic uniform number in [0, 1): the
// seeded draw behind tenant assignment, here and in the simulator's
// scenarios, so one seed gives one assignment wherever it is made.
func Unit(seed int64, key uint64) float64 {
	h := fnv.New64a()
	var b [16]byte
	binary.LittleEndian.PutUint64(b[:8], uint64(seed))
	binary.LittleEndian.PutUint64(b[8:], key)
	h.Write(b[:])
	return float64(h.Sum64()>>11) / (1 << 53)
}

// pickTenant picks a tenant by share from a uniform u.
func pickTenant(u float64) Tenant {
	acc := 0.0
	for _, t := range DefaultTenants {
		acc += t.Share
		if u < acc {
			return t
		}
	}
	return DefaultTenants[len(DefaultTenants)-1]
}

// AssignBySession gives each request a tenant, class and SLO. The tenant is
// a seeded hash of the request's session key, so every turn of one
// conversation (the same key) lands on the same tenant, with tenants drawn
// by DefaultTenants' shares.
func AssignBySession(t *Trace, seed int64, key func(i int) uint64) {
	for i := range t.Requests {
		r := &t.Requests[i]
		tn := pickTenant(Unit(seed, key(i)))
		r.Tenant, r.Priority = tn.Name, tn.Priority
		SetSLO(r)
	}
	t.Rules = append(t.Rules, RulesText(seed)...)
}

// RulesText is the printed form of the assignment rules.
func RulesText(seed int64) []string {
	out := []string{fmt.Sprintf("tenants (seed %d): a seeded hash of each request's session key picks the tenant by share; the tenant fixes the priority class:", seed)}
	for _, t := range DefaultTenants {
		out = append(out, fmt.Sprintf("  %-14s %-12s %3.0f %% of sessions", t.Name, t.Priority, t.Share*100))
	}
	out = append(out, "SLO per class: TTFT ≤ base + per-token × prompt tokens; mean time per output token ≤ TPOT; deadline = TTFT target + (output-1) × TPOT:")
	for _, p := range schemas.Priorities {
		c := DefaultSLOs[p]
		out = append(out, fmt.Sprintf("  %-12s TTFT %v + %v/token, TPOT %v", p, c.TTFTBase, c.PerPromptToken, c.TPOT))
	}
	return out
}
