package gguf

import (
	"fmt"
	"math"
	"math/rand/v2"
)

// TinyOptions shape a TinyLlama model. Zero fields take the defaults in
// parentheses; the defaults give a ~110 k-parameter model of about 440 KB.
type TinyOptions struct {
	Name    string // general.name ("switchyard-tiny")
	Seed    uint64 // weights are a pure function of the options
	Layers  int    // transformer blocks (2)
	Embed   int    // hidden size (64)
	Heads   int    // attention heads (4)
	KVHeads int    // key/value heads, grouped-query attention (2)
	FF      int    // feed-forward size (128)
	Context int    // llama.context_length (2048)
}

func (o TinyOptions) withDefaults() TinyOptions {
	def := func(v *int, d int) {
		if *v <= 0 {
			*v = d
		}
	}
	if o.Name == "" {
		o.Name = "switchyard-tiny"
	}
	def(&o.Layers, 2)
	def(&o.Embed, 64)
	def(&o.Heads, 4)
	def(&o.KVHeads, 2)
	def(&o.FF, 128)
	def(&o.Context, 2048)
	return o
}

// Token types (llama.cpp's llama_token_type).
const (
	tokenNormal  int32 = 1
	tokenUnknown int32 = 2
	tokenControl int32 = 3
	tokenByte    int32 = 6
)

// TinyVocab is the tiny model's SentencePiece-style vocabulary: <unk>,
// <s>, </s>, the word-boundary mark "▁", the 94 printable ASCII characters,
// then the 256 byte-fallback tokens <0x00>…<0xFF>, so any prompt tokenizes.
// It returns the token strings and types, and how many leading tokens the
// model may generate from ("▁" and printable ASCII: ids 3 to 97).
func TinyVocab() (tokens []string, types []int32) {
	tokens = []string{"<unk>", "<s>", "</s>", "▁"}
	types = []int32{tokenUnknown, tokenControl, tokenControl, tokenNormal}
	for c := byte('!'); c <= '~'; c++ {
		tokens = append(tokens, string(rune(c)))
		types = append(types, tokenNormal)
	}
	for b := 0; b < 256; b++ {
		tokens = append(tokens, fmt.Sprintf("<0x%02X>", b))
		types = append(types, tokenByte)
	}
	return tokens, types
}

// generable reports whether the tiny model may emit token id: only "▁" and
// printable ASCII, so every streamed piece is valid UTF-8 text and no
// end-of-sequence token cuts a generation short of max_tokens.
func generable(id int) bool { return id >= 3 && id < 3+1+94 }

// constDim is the residual-stream dimension the tiny model holds constant.
// The embeddings put constValue there, and no layer writes to it (its rows
// in attn_output and ffn_down are zero), so after the final RMSNorm it is
// always positive; output.weight gives every token the model must not emit
// a large negative weight on it, which keeps those logits far below the
// rest whatever the random weights do elsewhere.
const (
	constDim     = 0
	constValue   = 16
	forbidWeight = -30
)

// TinyLlama builds a Llama-architecture model that llama.cpp (and so
// Ollama) loads and runs: seeded random F32 weights, the TinyVocab
// tokenizer, and the metadata keys llama.cpp's llama loader requires. Its
// output is gibberish drawn from printable ASCII, and it never emits an
// end-of-sequence token, so a generation always runs to max_tokens.
func TinyLlama(o TinyOptions) (*File, error) {
	o = o.withDefaults()
	switch {
	case o.Embed%o.Heads != 0:
		return nil, fmt.Errorf("gguf: embed %d is not a multiple of heads %d", o.Embed, o.Heads)
	case o.Heads%o.KVHeads != 0:
		return nil, fmt.Errorf("gguf: heads %d is not a multiple of kv heads %d", o.Heads, o.KVHeads)
	case o.Embed < 8:
		return nil, fmt.Errorf("gguf: embed %d is too small (want >= 8)", o.Embed)
	}
	headDim := o.Embed / o.Heads
	kvDim := headDim * o.KVHeads
	tokens, types := TinyVocab()
	vocab := len(tokens)
	scores := make([]float32, vocab)
	for i := range scores {
		scores[i] = -float32(i) // SentencePiece ranks pieces by score
	}
	rng := rand.New(rand.NewPCG(o.Seed, o.Seed^0x9e3779b97f4a7c15))
	random := func(n int, scale float64) []float32 {
		out := make([]float32, n)
		for i := range out {
			out[i] = float32(rng.NormFloat64() * scale)
		}
		return out
	}
	ones := func(n int) []float32 {
		out := make([]float32, n)
		for i := range out {
			out[i] = 1
		}
		return out
	}
	// zeroRow clears output row r of a {in, out} matrix.
	zeroRow := func(w []float32, in, r int) {
		clear(w[r*in : (r+1)*in])
	}
	e := o.Embed
	embd := random(e*vocab, 0.5)
	for t := 0; t < vocab; t++ {
		embd[t*e+constDim] = constValue
	}
	out := random(e*vocab, 1/math.Sqrt(float64(e)))
	for t := 0; t < vocab; t++ {
		w := float32(0)
		if !generable(t) {
			w = forbidWeight
		}
		out[t*e+constDim] = w
	}
	f := &File{KV: []KV{
		{"general.architecture", "llama"},
		{"general.name", o.Name},
		{"general.file_type", uint32(0)}, // all F32
		{"general.alignment", uint32(DefaultAlignment)},
		{"llama.context_length", uint32(o.Context)},
		{"llama.embedding_length", uint32(e)},
		{"llama.block_count", uint32(o.Layers)},
		{"llama.feed_forward_length", uint32(o.FF)},
		{"llama.attention.head_count", uint32(o.Heads)},
		{"llama.attention.head_count_kv", uint32(o.KVHeads)},
		{"llama.rope.dimension_count", uint32(headDim)},
		{"llama.rope.freq_base", float32(10000)},
		{"llama.attention.layer_norm_rms_epsilon", float32(1e-5)},
		{"llama.vocab_size", uint32(vocab)},
		{"tokenizer.ggml.model", "llama"},
		{"tokenizer.ggml.tokens", tokens},
		{"tokenizer.ggml.scores", scores},
		{"tokenizer.ggml.token_type", types},
		{"tokenizer.ggml.unknown_token_id", uint32(0)},
		{"tokenizer.ggml.bos_token_id", uint32(1)},
		{"tokenizer.ggml.eos_token_id", uint32(2)},
		{"tokenizer.ggml.add_bos_token", true},
		{"tokenizer.ggml.add_eos_token", false},
	}}
	f.Tensors = append(f.Tensors, Tensor{Name: "token_embd.weight", Dims: []uint64{uint64(e), uint64(vocab)}, Data: embd})
	for l := 0; l < o.Layers; l++ {
		p := fmt.Sprintf("blk.%d.", l)
		attnOut := random(e*e, 1/math.Sqrt(float64(e)))
		zeroRow(attnOut, e, constDim)
		down := random(o.FF*e, 1/math.Sqrt(float64(o.FF)))
		zeroRow(down, o.FF, constDim)
		f.Tensors = append(f.Tensors,
			Tensor{Name: p + "attn_norm.weight", Dims: []uint64{uint64(e)}, Data: ones(e)},
			Tensor{Name: p + "attn_q.weight", Dims: []uint64{uint64(e), uint64(e)}, Data: random(e*e, 1/math.Sqrt(float64(e)))},
			Tensor{Name: p + "attn_k.weight", Dims: []uint64{uint64(e), uint64(kvDim)}, Data: random(e*kvDim, 1/math.Sqrt(float64(e)))},
			Tensor{Name: p + "attn_v.weight", Dims: []uint64{uint64(e), uint64(kvDim)}, Data: random(e*kvDim, 1/math.Sqrt(float64(e)))},
			Tensor{Name: p + "attn_output.weight", Dims: []uint64{uint64(e), uint64(e)}, Data: attnOut},
			Tensor{Name: p + "ffn_norm.weight", Dims: []uint64{uint64(e)}, Data: ones(e)},
			Tensor{Name: p + "ffn_gate.weight", Dims: []uint64{uint64(e), uint64(o.FF)}, Data: random(e*o.FF, 1/math.Sqrt(float64(e)))},
			Tensor{Name: p + "ffn_up.weight", Dims: []uint64{uint64(e), uint64(o.FF)}, Data: random(e*o.FF, 1/math.Sqrt(float64(e)))},
			Tensor{Name: p + "ffn_down.weight", Dims: []uint64{uint64(o.FF), uint64(e)}, Data: down},
		)
	}
	f.Tensors = append(f.Tensors,
		Tensor{Name: "output_norm.weight", Dims: []uint64{uint64(e)}, Data: ones(e)},
		Tensor{Name: "output.weight", Dims: []uint64{uint64(e), uint64(vocab)}, Data: out},
	)
	return f, nil
}

// Params counts the model's weights.
func (f *File) Params() int64 {
	var n int64
	for _, t := range f.Tensors {
		n += int64(t.Elements())
	}
	return n
}
