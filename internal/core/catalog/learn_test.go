package catalog

import (
	"strings"
	"testing"

	"github.com/switchyard-ai/switchyard/schemas"
)

var tinySpec = schemas.ModelSpec{Family: "llama", Params: 110_000, Layers: 2, Hidden: 64, Heads: 4, KVHeads: 2, HeadDim: 16,
	Intermediate: 128, Vocab: 354, MaxContext: 2048, Source: "ollama /api/show"}

func TestLearn(t *testing.T) {
	if _, err := Default().Learn("tiny", tinySpec); err == nil {
		t.Fatal("the shared default catalog learned a model")
	}
	c := Default().Learning()
	if _, ok := c.Model("tiny"); ok {
		t.Fatal("tiny known before learning")
	}
	g0 := c.Generation()
	added, err := c.Learn("Tiny", tinySpec)
	if err != nil || !added {
		t.Fatalf("Learn = %v, %v", added, err)
	}
	m, ok := c.Model("TINY")
	if !ok || !m.FromFleet || m.Params != 110_000 || m.Tier != -1 || m.Source != "ollama /api/show" {
		t.Fatalf("learned model = %+v, %v", m, ok)
	}
	if c.Generation() == g0 {
		t.Fatal("generation did not change")
	}
	if _, ok := Default().Model("tiny"); ok {
		t.Fatal("learning leaked into the default catalog")
	}
	// The first description wins; configuration beats any heartbeat.
	other := tinySpec
	other.Params = 1
	if added, err := c.Learn("tiny", other); err != nil || added {
		t.Fatalf("relearn = %v, %v", added, err)
	}
	if m, _ := c.Model("tiny"); m.Params != 110_000 {
		t.Fatal("a second description replaced the first")
	}
	if added, err := c.Learn("llama-3.1-8b", tinySpec); err != nil || added {
		t.Fatalf("learning over a configured model = %v, %v", added, err)
	}
	if m, _ := c.Model("llama-3.1-8b"); m.FromFleet {
		t.Fatal("a heartbeat replaced a configured model")
	}
	found := false
	for _, m := range c.Models() {
		found = found || m.Name == "tiny"
	}
	if !found {
		t.Fatal("Models() omits the learned model")
	}
	if c2 := c.Learning(); !func() bool { _, ok := c2.Model("tiny"); return ok }() {
		t.Fatal("a copy of a learning catalog forgot what it learned")
	}
}

func TestLearnRejects(t *testing.T) {
	c := Default().Learning()
	for _, tc := range []struct {
		name string
		spec schemas.ModelSpec
		want string
	}{
		{"", tinySpec, "empty model name"},
		{"bad", schemas.ModelSpec{Params: 1}, "must be > 0"},
		{"gqa", func() schemas.ModelSpec { s := tinySpec; s.KVHeads = 3; return s }(), "multiple of kv_heads"},
	} {
		if _, err := c.Learn(tc.name, tc.spec); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Learn(%q) err = %v, want %q", tc.name, err, tc.want)
		}
	}
}

func TestSpecRoundTrip(t *testing.T) {
	m, _ := Default().Model("llama-3.1-8b")
	back := ModelFromSpec(m.Name, m.Spec())
	if back.Params != m.Params || back.Layers != m.Layers || back.KVHeads != m.KVHeads || back.MaxContext != m.MaxContext {
		t.Fatalf("spec round trip: %+v vs %+v", back, m)
	}
}
