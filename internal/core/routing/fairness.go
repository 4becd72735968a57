package routing

import (
	"github.com/switchyard-ai/switchyard/internal/core/queue"
	"github.com/switchyard-ai/switchyard/schemas"
)

// InFairShare carries a peer router's fairness report (active-active
// routing): what it placed per class and per tenant since it started, and
// what it holds queued. The queue adds the peer's increases to the
// counters its class weights and tenant shares act on, and leaves
// capacity to a peer holding work further behind (internal/core/queue,
// fair.go), so the shares hold fleet-wide whichever router pulled a
// request. In is the peer's name; Fair the report. Journaled like every
// input, so replay reproduces the order it led to.
const InFairShare = "fair_share"

// OutputTokenWeight is what one output token counts against its tenant's
// share, against a prompt token's 1: VTC's weighting (Sheng et al.,
// OSDI'24, after the output/input price ratio of hosted APIs). Output is
// counted at placement as the request's max_tokens, the most it may
// generate, since no router sees the tokens generated.
const OutputTokenWeight = 2

// FairCost is what serving a counts against its tenant's share in its
// class: prompt tokens plus OutputTokenWeight per output token.
func FairCost(a *schemas.Admitted) int64 {
	return int64(max(a.PromptTokens, 0)) + OutputTokenWeight*int64(max(a.Request.MaxTokens, 0))
}

// FairReport is this router's fairness report for its peers (nil for a
// baseline's queue, which shares nothing).
func (c *Core) FairReport() *queue.Report { return c.q.Report() }

// FairState is how much fairness state the queue holds: tenant counters
// over its classes, peers remembered, and tenant totals kept of them —
// what forgetting idle tenants and dead peers bounds (queue/forget.go).
func (c *Core) FairState() (tenants, peers, peerTenants int) {
	return c.q.TenantCount(), c.q.PeerCount(), c.q.PeerTenantCount()
}

// HeldBack counts the placement passes that left queued work for a peer
// holding work further behind its share.
func (c *Core) HeldBack() int64 { return c.q.HeldBack() }

// fairShare applies a peer's report; work it held back may go now.
func (c *Core) fairShare(in Input) {
	if in.Fair == nil || in.ID == "" {
		return
	}
	c.q.ApplyPeer(in.ID, in.Fair, in.At)
	c.placeReady(in.At)
}
