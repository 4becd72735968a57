package cache

import (
	"context"
	"testing"
)

func TestNGramEmbedderIsLexical(t *testing.T) {
	e := NGramEmbedder{}
	cases := []struct {
		a, b     string
		min, max float64
	}{
		{"How do I reset my password?", "how do i reset my password", 0.99, 1.01},
		{"How do I reset my password?", "How can I reset my passwords?", 0.6, 0.99},
		// Same meaning, different words: lexical similarity stays low. This
		// is the documented limit of the offline embedder.
		{"cancel my subscription", "end my plan", -1, 0.5},
		{"What is the capital of France?", "Write a sorting function in Go.", -1, 0.3},
	}
	for _, c := range cases {
		v, _ := e.Embed(context.Background(), []string{c.a, c.b})
		if sim := Cosine(v[0], v[1]); sim < c.min || sim > c.max {
			t.Errorf("cos(%q, %q) = %.3f, want in [%.2f, %.2f]", c.a, c.b, sim, c.min, c.max)
		}
	}
}
