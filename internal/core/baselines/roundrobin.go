package baselines

import (
	"time"

	"github.com/switchyard-ai/switchyard/internal/core/fleet"
	"github.com/switchyard-ai/switchyard/internal/core/placement"
)

// RoundRobin is a Kubernetes Service in front of the replicas. Source:
// kubernetes.io/docs/reference/networking/virtual-ips ("kube-proxy in
// IPVS mode": the default scheduler rr, round-robin over ready endpoints;
// iptables mode picks uniformly at random, see Random). Defaults: every
// ready endpoint, no session affinity (sessionAffinity: None).
type RoundRobin struct {
	base
	next int
}

// NewRoundRobin returns a round-robin policy.
func NewRoundRobin() *RoundRobin { return &RoundRobin{base: newBase("round-robin")} }

// Place implements placement.Policy.
func (p *RoundRobin) Place(f *fleet.Fleet, req *placement.Request, now time.Time) *placement.Decision {
	c := p.candidates(f, req.Model, req.Phase, now)
	if len(c) == 0 {
		return p.decide(req, nil)
	}
	w := c[p.next%len(c)]
	p.next++
	return p.decide(req, w)
}

// Random is kube-proxy's iptables mode (the default): each new connection
// goes to a uniformly random ready endpoint (same document as RoundRobin),
// and llm-d's "random-scheduling" control group.
type Random struct{ base }

// NewRandom returns a uniformly random policy seeded with seed.
func NewRandom(seed uint64) *Random {
	return &Random{base: newBaseSeed("random", seed)}
}

// Place implements placement.Policy.
func (p *Random) Place(f *fleet.Fleet, req *placement.Request, now time.Time) *placement.Decision {
	c := p.candidates(f, req.Model, req.Phase, now)
	if len(c) == 0 {
		return p.decide(req, nil)
	}
	return p.decide(req, c[p.rng.IntN(len(c))])
}

// LeastLoaded sends each request to the endpoint with the fewest
// outstanding requests. Source: Envoy's LEAST_REQUEST load balancer
// (envoyproxy.io/docs/envoy/latest/intro/arch_overview/upstream/load_balancing/load_balancers,
// "Weighted least request"); with equal weights Envoy samples
// choice_count = 2 hosts (power of two choices). Here every ready endpoint is
// compared (the "full scan" variant), which is at least as good as two
// choices at 16 replicas. Outstanding requests are the router's own count:
// dispatched and not yet finished, exact and immediate like Envoy's.
type LeastLoaded struct{ base }

// NewLeastLoaded returns a least-outstanding-requests policy.
func NewLeastLoaded() *LeastLoaded { return &LeastLoaded{base: newBase("least-loaded")} }

// Place implements placement.Policy.
func (p *LeastLoaded) Place(f *fleet.Fleet, req *placement.Request, now time.Time) *placement.Decision {
	c := p.candidates(f, req.Model, req.Phase, now)
	var best *fleet.Worker
	bestN, ties := 0, 0
	for _, w := range c {
		n := p.outstanding[w.ID]
		switch {
		case best == nil || n < bestN:
			best, bestN, ties = w, n, 1
		case n == bestN:
			// Reservoir sampling: a uniform pick among the tied.
			ties++
			if p.rng.IntN(ties) == 0 {
				best = w
			}
		}
	}
	return p.decide(req, best)
}
