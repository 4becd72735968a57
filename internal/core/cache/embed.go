package cache

import (
	"context"
	"fmt"
	"hash/fnv"
	"math"
	"strings"
	"unicode"
)

// Embedder turns texts into vectors whose cosine similarity says how alike
// the texts are. ID names the embedder and its settings: vectors from
// different embedders are not comparable, so the ID is part of the
// semantic cache scope.
type Embedder interface {
	ID() string
	Embed(ctx context.Context, texts []string) ([][]float32, error)
}

// NGramEmbedder is the offline default embedder: feature hashing of
// lower-cased character trigrams and word unigrams and bigrams into Dim
// signed buckets, L2-normalised. It is deterministic, needs no model or
// network, and measures lexical overlap, not meaning (see the package doc).
type NGramEmbedder struct {
	// Dim is the vector size; 0 means 1024.
	Dim int
}

func (e NGramEmbedder) dim() int {
	if e.Dim <= 0 {
		return 1024
	}
	return e.Dim
}

// ID implements Embedder.
func (e NGramEmbedder) ID() string { return fmt.Sprintf("ngram-v1-d%d", e.dim()) }

// Embed implements Embedder.
func (e NGramEmbedder) Embed(_ context.Context, texts []string) ([][]float32, error) {
	out := make([][]float32, len(texts))
	for i, t := range texts {
		out[i] = e.vector(t)
	}
	return out, nil
}

func (e NGramEmbedder) vector(text string) []float32 {
	d := e.dim()
	v := make([]float32, d)
	add := func(feature string, w float32) {
		h := fnv.New64a()
		h.Write([]byte(feature))
		x := h.Sum64()
		// The sign bit from the hash keeps collisions from only adding up
		// (the "hashing trick" of Weinberger et al.).
		if x>>63 == 1 {
			w = -w
		}
		v[x%uint64(d)] += w
	}
	words := strings.FieldsFunc(strings.ToLower(text), func(r rune) bool {
		return !unicode.IsLetter(r) && !unicode.IsDigit(r)
	})
	for i, w := range words {
		add("w:"+w, 1)
		if i > 0 {
			add("b:"+words[i-1]+" "+w, 1)
		}
	}
	// Trigrams over the joined words catch spelling variants and plurals.
	r := []rune(" " + strings.Join(words, " ") + " ")
	for i := 0; i+3 <= len(r); i++ {
		add("c:"+string(r[i:i+3]), 0.5)
	}
	var n float64
	for _, x := range v {
		n += float64(x) * float64(x)
	}
	if n > 0 {
		inv := float32(1 / math.Sqrt(n))
		for i := range v {
			v[i] *= inv
		}
	}
	return v
}
