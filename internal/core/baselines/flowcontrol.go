package baselines

import (
	"fmt"
	"time"

	"github.com/switchyard-ai/switchyard/internal/core/fleet"
	"github.com/switchyard-ai/switchyard/internal/core/placement"
	"github.com/switchyard-ai/switchyard/internal/core/queue"
	"github.com/switchyard-ai/switchyard/schemas"
)

// Gatekeeper is a baseline's own router queue and flow control: the queue
// discipline its documentation describes and the gate a queued request
// passes before it is offered to placement. routing.Core keeps the queue
// and asks the gate, so a baseline runs with its own admission and
// queueing on the same path the Switchyard policy runs on, live and in the
// simulator. Comparing against a baseline that forwards everything at once
// would flatter Switchyard under overload, where the baselines' own flow
// control is what protects their latency.
type Gatekeeper interface {
	QueueDiscipline() queue.Discipline
	// Gate decides, for a request queued since enqueued, whether it may be
	// offered to placement now (the zero Verdict), must wait, or is
	// refused. bandDepth is how many requests of its class are queued.
	Gate(f *fleet.Fleet, req *placement.Request, enqueued time.Time, bandDepth int, now time.Time) Verdict
}

// Verdict is a gate's answer. Hold keeps the request queued; Reject
// answers it with the error (a baseline's 429 or 529).
type Verdict struct {
	Hold   bool
	Reject *schemas.Error
	Reason string
}

// forwardAll is the queue of a gateway that forwards every request on
// arrival, in arrival order, whatever its class, and never expires one:
// Kubernetes Services, round-robin and least-loaded balancers, and the
// SGLang router, none of which queue in front of the engines.
var forwardAll = queue.Discipline{OneBand: true, ArrivalOrder: true, NoExpiry: true}

// QueueDiscipline implements Gatekeeper for baselines without flow
// control of their own: forward everything in arrival order.
func (b *base) QueueDiscipline() queue.Discipline { return forwardAll }

// Gate implements Gatekeeper: a plain gateway holds nothing back.
func (b *base) Gate(*fleet.Fleet, *placement.Request, time.Time, int, time.Time) Verdict {
	return Verdict{}
}

// LLMDFlowControl is the llm-d router's flow control layer as its v0.10
// release ships it bounded by default (llm-d-router RELEASE-NOTES.md
// v0.10.0; PR #2180, #2123; pkg/epp/flowcontrol/README.md): priority bands
// served strictly highest first, first come first served inside a band; a
// request TTL after which a queued request is rejected; a per-band
// capacity beyond which new requests are rejected; and a saturation
// detector that, when the pool is saturated, holds the lower bands back
// while the top band still dispatches (#1956: the soft ceiling never gates
// the top band).
//
// Saturation is the utilization detector's rule (GIE
// pkg/epp/saturationdetector): an endpoint is saturated when its waiting
// queue reaches QueueDepthThreshold or its KV-cache use reaches
// KVCacheUtilThreshold, and the pool is saturated when every fresh
// endpoint is. The detector's defaults are 5 and 0.8.
type LLMDFlowControl struct {
	TTL                  time.Duration
	BandCapacity         int
	QueueDepthThreshold  int
	KVCacheUtilThreshold float64
}

// LLMDFlowDefaults are the documented defaults.
var LLMDFlowDefaults = LLMDFlowControl{TTL: 60 * time.Second, BandCapacity: 5000, QueueDepthThreshold: 5, KVCacheUtilThreshold: 0.8}

// QueueDiscipline implements Gatekeeper: strict priority bands, FCFS
// inside a band; requests leave by TTL, not by deadline.
func (p *LLMD) QueueDiscipline() queue.Discipline {
	return queue.Discipline{Strict: true, ArrivalOrder: true, NoExpiry: true}
}

// Gate implements Gatekeeper.
func (p *LLMD) Gate(f *fleet.Fleet, req *placement.Request, enqueued time.Time, bandDepth int, now time.Time) Verdict {
	return llmdFlowGate(p.flow, req, enqueued, bandDepth, now, func() []*fleet.Worker { return p.candidates(f, req.Model, p.gatePhase(req), now) })
}

// llmdFlowGate is llm-d's flow control, which both llm-d baselines run
// before scheduling: a request queued past the TTL or into a full band is
// shed; below the top band, one is held while every candidate endpoint is
// saturated. candidates is called only when saturation is checked.
func llmdFlowGate(fc LLMDFlowControl, req *placement.Request, enqueued time.Time, bandDepth int, now time.Time, candidates func() []*fleet.Worker) Verdict {
	if fc.TTL > 0 && now.Sub(enqueued) > fc.TTL {
		return Verdict{Reject: schemas.Errf(schemas.CodeShed, "", "llm-d flow control: queued longer than the %s request TTL", fc.TTL), Reason: "ttl"}
	}
	if fc.BandCapacity > 0 && bandDepth > fc.BandCapacity {
		return Verdict{Reject: schemas.Errf(schemas.CodeShed, "", "llm-d flow control: band %s holds more than %d requests", req.Priority, fc.BandCapacity), Reason: "band-full"}
	}
	if req.Priority == schemas.PriorityCritical {
		return Verdict{} // the top band is never gated
	}
	if llmdSaturated(fc, candidates()) {
		return Verdict{Hold: true, Reason: "pool saturated"}
	}
	return Verdict{}
}

// DynamoRejection is Dynamo's request rejection (docs.nvidia.com/dynamo,
// user-guides/fault-tolerance/request-rejection and knowledge-base/
// concepts/fault-tolerance/request-rejection-architecture): a worker is
// busy when it crosses a configured threshold, the push router excludes
// busy workers, and when every eligible worker is busy a new request gets
// HTTP 529 at once. The router queue is first come, first served (its
// default fcfs policy). Dynamo ships each threshold unset; the request
// rejection guide turns on the active-decode-blocks threshold, which is
// what is modelled here, at the share of KV blocks in use given below.
type DynamoRejection struct {
	// ActiveDecodeBlocksThreshold is the KV-block share in use above which
	// a worker is busy; 0 disables rejection.
	ActiveDecodeBlocksThreshold float64
}

// DynamoRejectionDefaults turns rejection on at 85 % of KV blocks in use.
// The threshold has no default in Dynamo; 0.85 is this project's choice,
// a share that leaves a worker room to finish what it runs.
var DynamoRejectionDefaults = DynamoRejection{ActiveDecodeBlocksThreshold: 0.85}

// QueueDiscipline implements Gatekeeper: one FCFS queue.
func (p *Dynamo) QueueDiscipline() queue.Discipline { return forwardAll }

// Gate implements Gatekeeper: 529 when every eligible worker is busy.
func (p *Dynamo) Gate(f *fleet.Fleet, req *placement.Request, _ time.Time, _ int, now time.Time) Verdict {
	th := p.reject.ActiveDecodeBlocksThreshold
	if th <= 0 {
		return Verdict{}
	}
	ws := p.candidates(f, req.Model, p.gatePhase(req), now)
	if len(ws) == 0 {
		return Verdict{}
	}
	for _, w := range ws {
		if w.KVBlocksTotal == 0 || 1-float64(w.FreeBlocks())/float64(w.KVBlocksTotal) < th {
			return Verdict{}
		}
	}
	return Verdict{Reject: schemas.Errf(schemas.CodeShed, "", "dynamo: all %d workers busy (active decode blocks over %.0f%%)", len(ws), 100*th), Reason: "all workers busy"}
}

// String names a verdict for events and logs.
func (v Verdict) String() string {
	switch {
	case v.Reject != nil:
		return fmt.Sprintf("reject (%s)", v.Reason)
	case v.Hold:
		return fmt.Sprintf("hold (%s)", v.Reason)
	}
	return "open"
}
