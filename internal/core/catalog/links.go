package catalog

import (
	"fmt"
	"sort"
	"strings"
)

// Link is a network path for moving KV cache between workers in
// disaggregated serving (issue 28): a prefill worker's KV is pulled by a
// decode worker over it, layer by layer, as vLLM's NixlConnector and
// Mooncake's transfer engine do.
//
// GBps is the published bandwidth one GPU gets in one direction, in GB/s
// (1e9 bytes): NVLink's per-GPU figure halved (NVIDIA quotes it
// bidirectional), a NIC's line rate divided by 8 for one NIC per GPU (the
// rail-optimised layout of DGX H100 and DGX A100). A NIC shared by several
// GPUs gives each its share: override gbps, or name a slower link.
//
// LatencySeconds is the fixed cost of one transfer: the wire and switch
// latency (a few µs on RDMA, more through a kernel TCP stack) plus the
// software setup of a request (descriptor preparation, posting, the
// completion notification). Each default's Source splits it into the two
// and says which part is assumed.
//
// NodeLocal links (NVLink) reach only GPUs in the same NVLink domain (one
// server): a worker names one only when its KV peers share its node, which
// the catalog cannot check.
type Link struct {
	Name           string  `json:"-"`
	GBps           float64 `json:"gbps"`
	LatencySeconds float64 `json:"latency_s"`
	NodeLocal      bool    `json:"node_local,omitempty"`
	Source         string  `json:"source,omitempty"`
}

func (l Link) validate() error {
	switch {
	case l.GBps <= 0:
		return fmt.Errorf("gbps must be > 0")
	case l.LatencySeconds < 0:
		return fmt.Errorf("latency_s must be >= 0")
	}
	return nil
}

// Link looks a KV-transfer link up by name, case-insensitively; an empty
// name is never a link (a worker that names none takes no split leg).
func (c *Catalog) Link(name string) (Link, bool) {
	if name == "" {
		return Link{}, false
	}
	l, ok := c.links[name]
	if !ok {
		l, ok = c.links[strings.ToLower(name)]
	}
	return l, ok
}

// LinkNames returns the catalog's link names, sorted.
func (c *Catalog) LinkNames() []string {
	out := make([]string, 0, len(c.links))
	for n := range c.links {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// EffectiveLink is the link a KV transfer between a worker on link a and
// one on link b runs at: the slower of the two, since a transfer is
// limited by its narrower end (a 400 Gb/s NIC sending to a 100 Gb/s one
// runs at 100 Gb/s). Slower means lower bandwidth; on a tie the one with
// the larger fixed latency, so the result does not depend on the order of
// a and b. Not ok when either name is empty or unknown.
//
// Two NodeLocal links of the same name give that link: the caller vouches
// that the two workers share a node (see Link). A NodeLocal link paired
// with a different link gives the other one: a transfer leaving the node
// cannot use NVLink, it goes over the peer's network link. (Two different
// node-local links have no path and give not ok.)
func (c *Catalog) EffectiveLink(a, b string) (Link, bool) {
	la, ok := c.Link(a)
	if !ok {
		return Link{}, false
	}
	lb, ok := c.Link(b)
	if !ok {
		return Link{}, false
	}
	switch {
	case la.NodeLocal && lb.NodeLocal:
		if la.Name != lb.Name {
			return Link{}, false
		}
		return la, true
	case la.NodeLocal:
		return lb, true
	case lb.NodeLocal:
		return la, true
	}
	if lb.GBps < la.GBps || (lb.GBps == la.GBps && lb.LatencySeconds > la.LatencySeconds) {
		return lb, true
	}
	return la, true
}

// LinkNamed looks a link up in the default catalog (Default().Link).
func LinkNamed(name string) (Link, bool) { return defaultCatalog.Link(name) }

// LinkNames lists the default catalog's link names, sorted.
func LinkNames() []string { return defaultCatalog.LinkNames() }
