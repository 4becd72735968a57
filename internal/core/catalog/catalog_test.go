package catalog

import (
	"math"
	"strings"
	"testing"
)

func TestDefaultsCoverRequiredEntries(t *testing.T) {
	c := Default()
	for _, name := range []string{"a100-40g", "a100-80g", "h100", "h200", "b200", "l4", "l40s", "mi300x"} {
		g, ok := c.GPU(name)
		if !ok {
			t.Errorf("gpu %s missing", name)
			continue
		}
		if g.Source == "" || g.Arch == "" || g.PricePerHour <= 0 {
			t.Errorf("gpu %s: incomplete %+v", name, g)
		}
	}
	for _, name := range []string{"llama-3.2-1b", "qwen2.5-1.5b", "llama-3.2-3b", "qwen2.5-7b", "llama-2-7b", "llama-3.1-8b", "llama-3.1-70b"} {
		m, ok := c.Model(name)
		if !ok {
			t.Errorf("model %s missing", name)
			continue
		}
		if m.Source == "" || m.Family == "" {
			t.Errorf("model %s: incomplete %+v", name, m)
		}
	}
}

// The architecture shapes must reproduce each model's published parameter
// count; a typo in a shape would silently skew every prediction.
func TestShapesMatchParamCounts(t *testing.T) {
	for _, m := range Default().Models() {
		emb := float64(m.Vocab * m.Hidden)
		if !m.TiedEmbeddings {
			emb *= 2
		}
		got := float64(m.Layers)*m.LinearParamsPerLayer() + emb
		if rel := math.Abs(got-float64(m.Params)) / float64(m.Params); rel > 0.02 {
			t.Errorf("%s: shapes give %.3gB params, config says %.3gB (%.1f%% off)", m.Name, got/1e9, float64(m.Params)/1e9, rel*100)
		}
	}
}

func TestCaseInsensitiveAndSorted(t *testing.T) {
	c := Default()
	if _, ok := c.GPU("H100"); !ok {
		t.Error("GPU(H100) not found")
	}
	if _, ok := c.Model("Llama-3.1-8B"); !ok {
		t.Error("Model(Llama-3.1-8B) not found")
	}
	gs := c.GPUs()
	for i := 1; i < len(gs); i++ {
		if gs[i-1].Name >= gs[i].Name {
			t.Fatalf("GPUs not sorted: %s before %s", gs[i-1].Name, gs[i].Name)
		}
	}
	ms := c.Models()
	for i := 1; i < len(ms); i++ {
		if ms[i-1].Name >= ms[i].Name {
			t.Fatalf("Models not sorted")
		}
	}
}

func TestMerge(t *testing.T) {
	tests := []struct {
		name    string
		json    string
		wantErr string
		check   func(t *testing.T, c *Catalog)
	}{
		{"override price only", `{"gpus":{"H100":{"price_per_hour":2.1}}}`, "", func(t *testing.T, c *Catalog) {
			g, _ := c.GPU("h100")
			if g.PricePerHour != 2.1 || g.BF16TFLOPS != 989 {
				t.Errorf("got %+v", g)
			}
			if d, _ := Default().GPU("h100"); d.PricePerHour != 3.0 {
				t.Errorf("Merge mutated the defaults: %v", d.PricePerHour)
			}
		}},
		{"add model", `{"models":{"tiny":{"family":"x","tier":0,"params":1000,"layers":1,"hidden":8,"heads":2,"kv_heads":1,"head_dim":4,"intermediate":16,"vocab":10,"max_context":128}}}`, "", func(t *testing.T, c *Catalog) {
			if _, ok := c.Model("TINY"); !ok {
				t.Error("tiny not added")
			}
		}},
		{"typo rejected", `{"gpus":{"h100":{"price_per_hr":2}}}`, "unknown field", nil},
		{"incomplete new gpu", `{"gpus":{"x1":{"bf16_tflops":1}}}`, "hbm_gib", nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c, err := Merge([]byte(tc.json))
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			tc.check(t, c)
		})
	}
	if c, err := Merge(nil); err != nil || c != Default() {
		t.Errorf("Merge(nil) = %v, %v", c, err)
	}
}

// The weight tiers' load times come from the catalog and order hottest
// first; an override file changes them (a loading-optimised format read
// at ServerlessLLM's speed-up).
func TestWeightTiers(t *testing.T) {
	c := Default()
	const gb16 = 16.06e9 // llama-3.1-8b in bf16
	want := map[string]float64{
		TierHBM: 0, TierHost: 0.3 + gb16/20e9, TierPageCache: 24 + gb16/4e9,
		TierDisk: 24 + gb16/3e9, TierRemote: gb16/1.5e9 + 24 + gb16/3e9, "nowhere": math.Inf(1),
	}
	for tier, w := range want {
		if got := c.TierLoadSeconds(tier, gb16, 1); math.Abs(got-w) > 1e-9 && !(math.IsInf(w, 1) && math.IsInf(got, 1)) {
			t.Errorf("%s: %.3f s, want %.3f", tier, got, w)
		}
		if tr, ok := c.Tier(tier); ok && tr.Source == "" {
			t.Errorf("%s: no source", tier)
		}
	}
	// Each GPU of a TP-4 replica wakes its own shard.
	if got, w := c.TierLoadSeconds(TierHost, gb16, 4), 0.3+gb16/4/20e9; math.Abs(got-w) > 1e-9 {
		t.Errorf("host tp4: %.3f, want %.3f", got, w)
	}
	prev := -1.0
	for _, tr := range c.Tiers() {
		s := c.TierLoadSeconds(tr.Name, gb16, 1)
		if s <= prev {
			t.Errorf("tier %s loads in %.2f s, no slower than the tier before it (%.2f)", tr.Name, s, prev)
		}
		prev = s
	}
	if h, _ := c.Tier(TierHost); !h.GPUHeld {
		t.Error("a sleeping replica must hold its GPU")
	}
	if d, _ := c.Tier(TierDisk); d.GPUHeld {
		t.Error("weights on disk hold no GPU")
	}
	o, err := Merge([]byte(`{"weight_tiers":{"disk":{"gbps":15}}}`))
	if err != nil {
		t.Fatal(err)
	}
	if got, w := o.TierLoadSeconds(TierDisk, gb16, 1), 24+gb16/15e9; math.Abs(got-w) > 1e-9 {
		t.Errorf("override: disk %.3f, want %.3f", got, w)
	}
	if _, err := Merge([]byte(`{"weight_tiers":{"disk":{"gbs":15}}}`)); err == nil {
		t.Error("a misspelt tier field was accepted")
	}
}
