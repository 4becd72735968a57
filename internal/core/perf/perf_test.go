package perf

import (
	"math"
	"sync"
	"testing"

	"github.com/switchyard-ai/switchyard/internal/core/catalog"
	"github.com/switchyard-ai/switchyard/schemas"
)

func mustReplica(t testing.TB, gpu, model, dtype string, tp int) Replica {
	t.Helper()
	r, err := NewReplica(nil, gpu, model, dtype, tp)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func TestNewReplicaErrors(t *testing.T) {
	tests := []struct {
		gpu, model, dtype string
		tp                int
		ok                bool
	}{
		{"h100", "llama-3.1-8b", "bf16", 1, true},
		{"H100", "Llama-3.1-8B", "", 1, true},
		{"h100", "llama-3.1-8b", "fp8", 1, true},
		{"a100-80g", "llama-3.1-8b", "fp8", 1, false}, // Ampere has no FP8
		{"h100", "llama-3.1-70b", "bf16", 1, false},   // 141 GB of weights on 80 GB
		{"h100", "llama-3.1-70b", "bf16", 2, true},
		{"l4", "llama-3.1-8b", "bf16", 1, true},
		{"l4", "qwen2.5-7b", "bf16", 1, true},
		{"nope", "llama-3.1-8b", "bf16", 1, false},
		{"h100", "nope", "bf16", 1, false},
		{"h100", "llama-3.1-8b", "int3", 1, false},
		{"h100", "llama-3.1-8b", "bf16", 0, false},
		{"h100", "llama-3.1-8b", "bf16", 3, false}, // 32 heads not divisible by 3
	}
	for _, tc := range tests {
		_, err := NewReplica(catalog.Default(), tc.gpu, tc.model, tc.dtype, tc.tp)
		if (err == nil) != tc.ok {
			t.Errorf("NewReplica(%s,%s,%s,%d) err = %v, want ok=%v", tc.gpu, tc.model, tc.dtype, tc.tp, err, tc.ok)
		}
	}
}

func TestMonotonicity(t *testing.T) {
	for _, c := range []struct {
		gpu, model, dtype string
		tp                int
	}{{"h100", "llama-3.1-8b", "bf16", 1}, {"a100-80g", "llama-3.1-70b", "bf16", 4}, {"l4", "llama-3.2-1b", "bf16", 1}, {"h200", "llama-3.1-70b", "fp8", 1}} {
		r := mustReplica(t, c.gpu, c.model, c.dtype, c.tp)
		prevStep, prevTput := 0.0, 0.0
		for _, b := range []int{1, 2, 4, 8, 16, 32, 64, 128, 256} {
			s := r.DecodeStepSeconds(b, 1024)
			tput := float64(b) / s
			if s < prevStep || tput <= prevTput {
				t.Errorf("%v batch %d: step %.3g ms (prev %.3g), tput %.0f (prev %.0f)", c, b, s*1e3, prevStep*1e3, tput, prevTput)
			}
			prevStep, prevTput = s, tput
		}
		prev := 0.0
		for _, ctx := range []int{0, 512, 2048, 8192, 32768} {
			s := r.DecodeStepSeconds(32, ctx)
			if s < prev {
				t.Errorf("%v ctx %d: decode got faster (%.3g < %.3g ms)", c, ctx, s*1e3, prev*1e3)
			}
			prev = s
		}
		if long, short := r.DecodeStepSeconds(32, 32768), r.DecodeStepSeconds(32, 512); long <= short {
			t.Errorf("%v: 32k context not slower than 512", c)
		}
		prev = 0
		for _, n := range []int{16, 128, 1024, 4096} {
			s := r.PrefillSeconds(n, 0)
			if s <= prev && n > 128 {
				t.Errorf("%v prefill %d not slower", c, n)
			}
			prev = s
		}
		// A cached prefix must make the same prompt cheaper.
		if full, cached := r.PrefillSeconds(4096, 0), r.PrefillSeconds(512, 3584); cached >= full {
			t.Errorf("%v: cached prefill %.3g >= full %.3g", c, cached, full)
		}
	}
}

func TestFP8FasterOnHopper(t *testing.T) {
	for _, g := range []string{"h100", "h200"} {
		bf := mustReplica(t, g, "llama-3.1-8b", "bf16", 1)
		f8 := mustReplica(t, g, "llama-3.1-8b", "fp8", 1)
		if a, b := f8.PrefillSeconds(2048, 0), bf.PrefillSeconds(2048, 0); a >= b {
			t.Errorf("%s prefill fp8 %.3g >= bf16 %.3g", g, a, b)
		}
		if a, b := f8.DecodeStepSeconds(64, 1000), bf.DecodeStepSeconds(64, 1000); a >= b {
			t.Errorf("%s decode fp8 %.3g >= bf16 %.3g", g, a, b)
		}
		if f8.KVBlocks(16, 0.9) <= bf.KVBlocks(16, 0.9) {
			t.Errorf("%s: fp8 should hold more KV", g)
		}
	}
}

func TestKVAndLoad(t *testing.T) {
	r := mustReplica(t, "h100", "llama-3.1-8b", "bf16", 1)
	if got := r.KVBytesPerToken(); got != 128*1024 {
		t.Errorf("KVBytesPerToken = %v, want 128 KiB (gpu-model.md §4)", got)
	}
	// gpu-model.md §4: ≈ (72 − 16 − 2) GB / 128 KiB ≈ 410 k tokens.
	if toks := r.KVBlocks(16, 0.9) * 16; toks < 380_000 || toks > 460_000 {
		t.Errorf("KV tokens = %d, want ≈ 410k", toks)
	}
	if r.LoadSeconds(schemas.WeightHot) != 0 {
		t.Error("hot load should be 0")
	}
	s, c, a := r.LoadSeconds(schemas.WeightSleeping), r.LoadSeconds(schemas.WeightCold), r.LoadSeconds(schemas.WeightAbsent)
	if !(0 < s && s < 5 && s < c && c < a) {
		t.Errorf("load sleeping %.1f cold %.1f absent %.1f", s, c, a)
	}
	if !math.IsInf(r.LoadSeconds("bogus"), 1) {
		t.Error("unknown state should be +Inf")
	}
	if r2 := mustReplica(t, "h100", "llama-3.1-70b", "bf16", 4); r2.PricePerHour() != 12 {
		t.Errorf("price = %v", r2.PricePerHour())
	}
}

func TestPredictor(t *testing.T) {
	p := NewPredictor(nil)
	if v := p.PrefillSeconds("nope", "llama-3.1-8b", "bf16", 1, 100, 0); !math.IsInf(v, 1) {
		t.Errorf("unknown gpu = %v", v)
	}
	if v := p.DecodeSeconds("a100-80g", "llama-3.1-8b", "fp8", 1, 10, 1, 0); !math.IsInf(v, 1) {
		t.Errorf("fp8 on a100 = %v", v)
	}
	if v := p.PricePerHour("nope", 1); !math.IsInf(v, 1) {
		t.Errorf("unknown price = %v", v)
	}
	r := mustReplica(t, "h100", "llama-3.1-8b", "bf16", 1)
	if got, want := p.PrefillSeconds("H100", "llama-3.1-8b", "bf16", 1, 1000, 24), r.PrefillSeconds(1000, 24); got != want {
		t.Errorf("PrefillSeconds %v != %v", got, want)
	}
	if got := p.DecodeSeconds("h100", "llama-3.1-8b", "bf16", 1, 100, 8, 500); got < 100*r.DecodeStepSeconds(8, 500) {
		t.Errorf("DecodeSeconds %v too small", got)
	}
	if p.LoadSeconds("h100", "llama-3.1-8b", "bf16", 1, schemas.WeightCold) <= 0 {
		t.Error("cold load should cost")
	}
	if p.PricePerHour("H200", 2) != 7 {
		t.Error("price")
	}
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range 200 {
				p.PrefillSeconds("h100", "llama-3.1-8b", "bf16", 1, i*j+1, 0)
				p.DecodeSeconds("l4", "llama-3.2-1b", "bf16", 1, 10, j+1, 100)
			}
		}()
	}
	wg.Wait()
	p.PrefillSeconds("h100", "llama-3.1-8b", "bf16", 1, 10, 0)
	if n := testing.AllocsPerRun(100, func() {
		p.PrefillSeconds("h100", "llama-3.1-8b", "bf16", 1, 1000, 0)
		p.DecodeSeconds("h100", "llama-3.1-8b", "bf16", 1, 100, 8, 500)
		p.PrefillSeconds("nope", "llama-3.1-8b", "bf16", 1, 1000, 0)
	}); n != 0 {
		t.Errorf("hot path allocates %v times", n)
	}
}

func BenchmarkStepSeconds(b *testing.B) {
	r := mustReplica(b, "h100", "llama-3.1-8b", "bf16", 1)
	for i := 0; b.Loop(); i++ {
		r.StepSeconds(Batch{PrefillTokens: 512, PrefillContext: 100, DecodeSeqs: 64, DecodeContextTokens: 64 * 900})
	}
}

func TestPredictorLearnsFleetModels(t *testing.T) {
	cat := catalog.Default().Learning()
	p := NewPredictor(cat)
	if s := p.PrefillSeconds("h100", "tiny", "bf16", 1, 100, 0); !math.IsInf(s, 1) {
		t.Fatalf("unknown model prefill = %v, want +Inf", s)
	}
	if _, err := cat.Learn("tiny", schemas.ModelSpec{Params: 110_000, Layers: 2, Hidden: 64, Heads: 4, KVHeads: 2, HeadDim: 16,
		Intermediate: 128, Vocab: 354, MaxContext: 2048}); err != nil {
		t.Fatal(err)
	}
	s := p.PrefillSeconds("h100", "tiny", "bf16", 1, 100, 0)
	if math.IsInf(s, 0) || s <= 0 {
		t.Fatalf("learned model prefill = %v, want finite", s)
	}
	if l := p.LoadSeconds("h100", "tiny", "bf16", 1, schemas.WeightAbsent); !math.IsInf(l, 1) {
		t.Fatalf("a fleet-learned model loads from nowhere in %v s", l)
	}
	if l := p.LoadSeconds("h100", "tiny", "bf16", 1, schemas.WeightCold); math.IsInf(l, 0) {
		t.Fatal("a worker holding the weights on disk cannot load them")
	}
}

// Load times by tier come from the catalog the replica was built from:
// the states map onto tiers (sleeping → host, cold → disk, absent →
// remote), and an override of a tier moves its load.
func TestLoadSecondsByTier(t *testing.T) {
	r := mustReplica(t, "h100", "llama-3.1-8b", "bf16", 1)
	c := catalog.Default()
	w := r.WeightBytes()
	for _, tc := range []struct{ state, tier string }{
		{schemas.WeightSleeping, catalog.TierHost},
		{schemas.WeightCold, catalog.TierDisk},
		{schemas.WeightLoading, catalog.TierDisk},
		{schemas.WeightAbsent, catalog.TierRemote},
	} {
		if got, want := r.LoadSeconds(tc.state), c.TierLoadSeconds(tc.tier, w, 1); got != want {
			t.Errorf("%s: %.3f s, want the %s tier's %.3f", tc.state, got, tc.tier, want)
		}
	}
	// The cold load the controller's lead time is built on: 29.4 s.
	if got := r.LoadSeconds(schemas.WeightCold); math.Abs(got-29.35) > 0.05 {
		t.Errorf("cold load %.2f s, want 29.35", got)
	}
	if got := r.TierSeconds(catalog.TierPageCache); !(got > r.TierSeconds(catalog.TierHost) && got < r.TierSeconds(catalog.TierDisk)) {
		t.Errorf("page cache %.2f s is not between host and disk", got)
	}
	fast, err := catalog.Merge([]byte(`{"weight_tiers":{"host":{"gbps":50,"fixed_s":0}}}`))
	if err != nil {
		t.Fatal(err)
	}
	rf, err := NewReplica(fast, "h100", "llama-3.1-8b", "bf16", 1)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := rf.LoadSeconds(schemas.WeightSleeping), w/50e9; math.Abs(got-want) > 1e-9 {
		t.Errorf("override: wake %.3f s, want %.3f", got, want)
	}
}

// BenchmarkPredictorByName is the router's way in: a cost question by name,
// cycling over the kinds of a mixed fleet as a placement pass does.
func BenchmarkPredictorByName(b *testing.B) {
	p := NewPredictor(nil)
	kinds := []struct{ gpu, model string }{
		{"h100", "llama-3.1-8b"}, {"a100-80g", "llama-3.1-8b"}, {"l40s", "llama-3.1-8b"},
		{"h100", "qwen2.5-7b"}, {"a100-80g", "qwen2.5-7b"}, {"l4", "llama-3.2-1b"},
	}
	for i := 0; b.Loop(); i++ {
		k := kinds[i%len(kinds)]
		p.DecodeSeconds(k.gpu, k.model, "bf16", 1, 128, 32, 2000)
	}
}
