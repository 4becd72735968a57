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
