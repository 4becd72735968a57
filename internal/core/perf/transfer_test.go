package perf

import (
	"math"
	"testing"

	"github.com/switchyard-ai/switchyard/internal/core/catalog"
)

func link(t *testing.T, name string) catalog.Link {
	t.Helper()
	l, ok := catalog.LinkNamed(name)
	if !ok {
		t.Fatalf("link %s missing", name)
	}
	return l
}

func TestKVTransferSecondsOverlap(t *testing.T) {
	// 1 GB over 50 GB/s: W = 20 ms; 10 layers, so one layer's share is 2 ms.
	l := catalog.Link{Name: "test", GBps: 50, LatencySeconds: 1e-3}
	const bytes, layers = 1e9, 10
	for _, tc := range []struct {
		name    string
		prefill float64
		want    float64 // exposed, without the latency
	}{
		{"after the prefill: nothing hidden", 0, 20e-3},
		{"negative prefill reads as none", -1, 20e-3},
		// Transfer-bound: the link starts at the first layer (P/L) and
		// runs W, so W − P·(L−1)/L is exposed.
		{"short prefill", 10e-3, 20e-3 - 9e-3},
		{"prefill as long as the wire", 20e-3, 20e-3 - 18e-3},
		// Compute-bound: only the last layer's share shows.
		{"long prefill", 1, 2e-3},
		{"very long prefill", 100, 2e-3},
	} {
		got := KVTransferSeconds(bytes, layers, tc.prefill, l)
		if want := 1e-3 + tc.want; math.Abs(got-want) > 1e-12 {
			t.Errorf("%s: %.6f s, want %.6f", tc.name, got, want)
		}
	}
	if got := KVTransferSeconds(0, layers, 0, l); got != l.LatencySeconds {
		t.Errorf("no bytes: %g, want the latency alone", got)
	}
	if got := KVTransferSeconds(bytes, 0, 0, l); math.Abs(got-21e-3) > 1e-12 {
		t.Errorf("layers 0 reads as 1: %g", got)
	}
	if got := KVTransferSeconds(bytes, layers, 0, catalog.Link{}); !math.IsInf(got, 1) {
		t.Errorf("no link: %g, want +Inf", got)
	}
}

func TestPredictorKVTransferSeconds(t *testing.T) {
	p := NewPredictor(nil)
	// Llama-3.1-8B in BF16: 2 · 32 layers · 8 KV heads · 128 · 2 B =
	// 128 KiB a token, so 10k tokens are 1.31 GB.
	const tokens = 10_000
	const bytes = 131072.0 * tokens
	ndr, nv := link(t, "ib-ndr"), link(t, "nvlink4")
	wireNDR, wireNV := bytes/50e9, bytes/450e9
	prefill := p.PrefillSeconds("h100", "llama-3.1-8b", "bf16", 1, tokens, 0)
	t.Logf("8B, 10k tokens (%.2f GB), H100 prefill %.0f ms: ib-ndr wire %.1f ms, nvlink4 %.2f ms", bytes/1e9, prefill*1e3, wireNDR*1e3, wireNV*1e3)
	for _, tc := range []struct {
		name     string
		gpu      string
		tp       int
		prefill  float64
		from, to string
		want     float64
	}{
		{"ib-ndr after the prefill", "h100", 1, 0, "ib-ndr", "ib-ndr", ndr.LatencySeconds + wireNDR},
		{"nvlink4 after the prefill", "h100", 1, 0, "nvlink4", "nvlink4", nv.LatencySeconds + wireNV},
		// A 10k-token prefill takes far longer than the wire: one layer's
		// share is all that shows.
		{"ib-ndr overlapped", "h100", 1, prefill, "ib-ndr", "ib-ndr", ndr.LatencySeconds + wireNDR/32},
		{"nvlink4 overlapped", "h100", 1, prefill, "nvlink4", "nvlink4", nv.LatencySeconds + wireNV/32},
		// The slower end sets the rate.
		{"ndr to 100 GbE", "h100", 1, 0, "ib-ndr", "eth-100", link(t, "eth-100").LatencySeconds + bytes/12.5e9},
		// TP 2: each rank sends its 4 KV heads over its own link.
		{"tp 2 over ib-ndr", "h100", 2, 0, "ib-ndr", "ib-ndr", ndr.LatencySeconds + wireNDR/2},
		// The sender's replica sets the bytes, whatever the GPU.
		{"from an a100", "a100-80g", 1, 0, "ib-hdr", "ib-ndr", link(t, "ib-hdr").LatencySeconds + bytes/25e9},
		{"unknown link", "h100", 1, 0, "ib-ndr", "token-ring", math.Inf(1)},
		{"unnamed link", "h100", 1, 0, "", "ib-ndr", math.Inf(1)},
		{"unknown gpu", "tpu-v9", 1, 0, "ib-ndr", "ib-ndr", math.Inf(1)},
	} {
		got := p.KVTransferSeconds(tc.gpu, "llama-3.1-8b", "bf16", tc.tp, tokens, tc.prefill, tc.from, tc.to)
		if math.IsInf(tc.want, 1) {
			if !math.IsInf(got, 1) {
				t.Errorf("%s: %g, want +Inf", tc.name, got)
			}
			continue
		}
		if math.Abs(got-tc.want) > 1e-9 {
			t.Errorf("%s: %.4f ms, want %.4f ms", tc.name, got*1e3, tc.want*1e3)
		}
	}
	// FP8 halves the KV (the cache is quantised with the weights).
	bf := p.KVTransferSeconds("h100", "llama-3.1-8b", "bf16", 1, tokens, 0, "ib-ndr", "ib-ndr")
	f8 := p.KVTransferSeconds("h100", "llama-3.1-8b", "fp8", 1, tokens, 0, "ib-ndr", "ib-ndr")
	if want := ndr.LatencySeconds + wireNDR/2; math.Abs(f8-want) > 1e-9 || f8 >= bf {
		t.Errorf("fp8: %.4f ms, want %.4f ms (bf16 %.4f)", f8*1e3, want*1e3, bf*1e3)
	}
}

func TestKVTransferBytes(t *testing.T) {
	r1 := mustReplica(t, "h100", "llama-3.1-70b", "bf16", 2)
	r8 := mustReplica(t, "h100", "llama-3.1-70b", "bf16", 8)
	// 70B: 2 · 80 · 8 · 128 · 2 B = 320 KiB a token; 8 KV heads split
	// over up to 8 ranks.
	if got, want := r1.KVTransferBytes(1000), 327680.0*1000/2; got != want {
		t.Errorf("tp 2: %g, want %g", got, want)
	}
	if got, want := r8.KVTransferBytes(1000), 327680.0*1000/8; got != want {
		t.Errorf("tp 8: %g, want %g", got, want)
	}
	if r8.KVTransferBytes(0) != 0 || r8.KVTransferBytes(-3) != 0 {
		t.Error("no tokens should move no bytes")
	}
}
