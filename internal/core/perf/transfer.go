package perf

import (
	"math"

	"github.com/switchyard-ai/switchyard/internal/core/catalog"
)

// KV transfer between a prefill and a decode worker (disaggregated
// serving, issue 28). The decode leg waits, before its first decode step,
//
//	link latency + the part of the wire time the prefill did not hide.
//
// The KV is sent layer by layer while the prefill runs, as Splitwise
// (ISCA'24, "layer-wise KV-cache transfer" overlapped with the prompt
// computation) and Mooncake's layer-wise prefill do: layer i's KV can go
// once the prefill has computed layer i. With L layers, a prefill of P
// seconds (c = P/L a layer) and a wire time W (w = W/L a layer), the last
// layer leaves at P and takes w when the link keeps up (w ≤ c); when it
// does not, the link is busy from the first layer on (c) and ends at
// c + W. So the time exposed after the prefill is
//
//	max(W/L, W − P·(L−1)/L)
//
// — never less than one layer's share, never more than W. Assumed: the
// layers are equal in size and cost (true of a dense decoder), the prefill
// spreads evenly over them, the link runs at its published rate from the
// first byte, and one transfer has it to itself. A connector that pulls
// only after the prefill ends (vLLM's NixlConnector reads the blocks once
// the prefill response names them) overlaps nothing: pass a prefill time
// of 0 and the whole W is exposed.

// KVTransferSeconds is the time to move bytes of KV cache of a layers-deep
// model over link, sent layer by layer during a prefill of prefillSeconds
// (0: after it), counted from the end of the prefill: the link's latency
// plus max(W/layers, W − prefillSeconds·(layers−1)/layers) with W =
// bytes ÷ bandwidth. bytes is what the one link carries; for a
// tensor-parallel replica, whose ranks each send their own shard over
// their own link, that is one rank's share (Replica.KVTransferBytes).
// +Inf for a link without bandwidth (the zero Link: none named).
func KVTransferSeconds(bytes float64, layers int, prefillSeconds float64, link catalog.Link) float64 {
	if link.GBps <= 0 {
		return math.Inf(1)
	}
	if bytes <= 0 {
		return link.LatencySeconds
	}
	l := float64(max(layers, 1))
	wire := bytes / (link.GBps * 1e9)
	hidden := max(prefillSeconds, 0) * (l - 1) / l
	return link.LatencySeconds + max(wire/l, wire-hidden)
}

// KVTransferBytes is the KV one link carries to move tokens of this
// replica's cache: all layers, K and V, in the replica's KV dtype, split
// over the ranks that hold distinct KV heads. Each rank of a
// tensor-parallel replica sends its own heads over its own link at once
// (vLLM's NixlConnector transfers rank to rank; DGX H100 and A100 give
// each GPU its own NIC), so a TP-2 replica moves its KV in half the time
// of a TP-1 one; ranks that hold replicated heads (TP > kv_heads) each
// send a copy, which takes no longer.
func (r Replica) KVTransferBytes(tokens int) float64 {
	if tokens <= 0 {
		return 0
	}
	return r.KVBytesPerToken() * float64(tokens) / r.kvShards()
}

// KVTransferSeconds is the package KVTransferSeconds for tokens of this
// replica's KV, sent from it over link during a prefill of
// prefillSeconds.
func (r Replica) KVTransferSeconds(tokens int, prefillSeconds float64, link catalog.Link) float64 {
	return KVTransferSeconds(r.KVTransferBytes(tokens), r.Model.Layers, prefillSeconds, link)
}

// KVTransferSeconds is the time the decode worker waits, after a prefill
// of prefillSeconds on the sending replica (gpu, model, dtype, tp), to
// receive tokens of its KV cache — the tokens it does not already cache —
// over the slower of the two workers' links (catalog.EffectiveLink): the
// link latency plus the wire time the layer-by-layer overlap with the
// prefill did not hide (see the package KVTransferSeconds). +Inf when the
// replica is unknown or invalid or either link unknown or unnamed, so a
// cost-minimising router never splits over a link it cannot price.
func (p *Predictor) KVTransferSeconds(gpu, model, dtype string, tp, tokens int, prefillSeconds float64, fromLink, toLink string) float64 {
	e := p.replica(gpu, model, dtype, tp)
	if !e.ok {
		return math.Inf(1)
	}
	l, ok := p.cat.EffectiveLink(fromLink, toLink)
	if !ok {
		return math.Inf(1)
	}
	return e.r.KVTransferSeconds(tokens, prefillSeconds, l)
}
