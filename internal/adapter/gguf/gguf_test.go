package gguf

import (
	"bytes"
	"encoding/binary"
	"reflect"
	"strings"
	"testing"
)

func encode(t *testing.T, f *File) []byte {
	t.Helper()
	var buf bytes.Buffer
	if err := f.Write(&buf); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func TestRoundTrip(t *testing.T) {
	f := &File{
		KV: []KV{
			{"u8", uint8(7)}, {"i8", int8(-7)}, {"u16", uint16(700)}, {"i16", int16(-700)},
			{"u32", uint32(70000)}, {"i32", int32(-70000)}, {"f32", float32(1.5)}, {"bool", true},
			{"str", "héllo"}, {"u64", uint64(1 << 40)}, {"i64", int64(-1 << 40)}, {"f64", 2.25},
			{"strs", []string{"a", "", "ccc"}}, {"f32s", []float32{1, -2, 3.5}}, {"i32s", []int32{1, -1}},
			{"bools", []bool{true, false}},
		},
		Tensors: []Tensor{
			{Name: "odd", Dims: []uint64{3}, Data: []float32{1, 2, 3}}, // 12 bytes: the next one needs padding
			{Name: "mat", Dims: []uint64{2, 3}, Data: []float32{1, 2, 3, 4, 5, 6}},
		},
	}
	got, err := Read(bytes.NewReader(encode(t, f)))
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, f) {
		t.Fatalf("round trip differs:\n got %+v\nwant %+v", got, f)
	}
}

// TestLayout checks the bytes against gguf.md directly, not through Read:
// magic, version, counts, the first key, and 32-byte aligned tensor data.
func TestLayout(t *testing.T) {
	f := &File{
		KV:      []KV{{"general.architecture", "llama"}},
		Tensors: []Tensor{{Name: "a", Dims: []uint64{3}, Data: []float32{1, 2, 3}}, {Name: "b", Dims: []uint64{1}, Data: []float32{9}}},
	}
	b := encode(t, f)
	le := binary.LittleEndian
	if string(b[:4]) != "GGUF" {
		t.Fatalf("magic bytes %q, want GGUF", b[:4])
	}
	if v := le.Uint32(b[4:]); v != 3 {
		t.Fatalf("version %d", v)
	}
	if n := le.Uint64(b[8:]); n != 2 {
		t.Fatalf("tensor count %d", n)
	}
	if n := le.Uint64(b[16:]); n != 1 {
		t.Fatalf("kv count %d", n)
	}
	if n := le.Uint64(b[24:]); n != uint64(len("general.architecture")) || string(b[32:32+n]) != "general.architecture" {
		t.Fatalf("first key malformed")
	}
	p := 32 + len("general.architecture")
	if typ := le.Uint32(b[p:]); typ != uint32(TypeString) {
		t.Fatalf("value type %d, want string (8)", typ)
	}
	// The file ends with tensor b's single float, at a 32-aligned offset
	// after tensor a's 12 bytes padded to 32.
	if len(b)%32 != 0 {
		t.Fatalf("file length %d is not padded to the alignment", len(b))
	}
	dataStart := len(b) - 64
	if got := le.Uint32(b[dataStart+32:]); got != 0x41100000 { // 9.0f
		t.Fatalf("tensor b's data is not at offset 32 of the data section: %#x", got)
	}
	if got := le.Uint32(b[dataStart:]); got != 0x3f800000 { // 1.0f
		t.Fatalf("tensor a's data is not at the data section's start: %#x", got)
	}
}

func TestWriteRejects(t *testing.T) {
	for _, tc := range []struct {
		name string
		f    File
		want string
	}{
		{"short data", File{Tensors: []Tensor{{Name: "x", Dims: []uint64{4}, Data: []float32{1}}}}, "1 values for dimensions"},
		{"duplicate key", File{KV: []KV{{"k", uint8(1)}, {"k", uint8(2)}}}, "duplicate metadata key"},
		{"bad type", File{KV: []KV{{"k", 3}}}, "unsupported value type int"},
		{"no dims", File{Tensors: []Tensor{{Name: "x"}}}, "0 dimensions"},
		{"duplicate tensor", File{Tensors: []Tensor{{Name: "x", Dims: []uint64{1}, Data: []float32{1}}, {Name: "x", Dims: []uint64{1}, Data: []float32{1}}}}, "duplicate tensor"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var buf bytes.Buffer
			err := tc.f.Write(&buf)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want %q", err, tc.want)
			}
			if buf.Len() != 0 {
				t.Fatalf("wrote %d bytes before failing", buf.Len())
			}
		})
	}
}

func TestReadRejects(t *testing.T) {
	good := encode(t, &File{KV: []KV{{"k", "v"}}, Tensors: []Tensor{{Name: "x", Dims: []uint64{2}, Data: []float32{1, 2}}}})
	huge := append([]byte(nil), good[:8]...)
	huge = binary.LittleEndian.AppendUint64(huge, 1<<40)
	huge = binary.LittleEndian.AppendUint64(huge, 0)
	for _, tc := range []struct {
		name string
		in   []byte
		want string
	}{
		{"not gguf", []byte("PK\x03\x04 not a model"), "not a GGUF file"},
		{"empty", nil, "header"},
		{"truncated data", good[:len(good)-30], "unexpected EOF"},
		{"truncated header", good[:40], "unexpected EOF"},
		{"huge counts", huge, "over this reader's limits"},
		{"version", append([]byte("GGUF\x09\x00\x00\x00"), good[8:]...), "unsupported version 9"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Read(bytes.NewReader(tc.in))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want %q", err, tc.want)
			}
		})
	}
}

func FuzzRead(f *testing.F) {
	tiny, err := TinyLlama(TinyOptions{Layers: 1, Embed: 8, Heads: 2, KVHeads: 1, FF: 8})
	if err != nil {
		f.Fatal(err)
	}
	var buf bytes.Buffer
	if err := tiny.Write(&buf); err != nil {
		f.Fatal(err)
	}
	f.Add(buf.Bytes())
	f.Add(buf.Bytes()[:100])
	f.Fuzz(func(t *testing.T, b []byte) {
		Read(bytes.NewReader(b)) // must return, never panic
	})
}

func TestTinyLlama(t *testing.T) {
	f, err := TinyLlama(TinyOptions{Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := f.Write(&buf); err != nil {
		t.Fatal(err)
	}
	if n := buf.Len(); n < 100<<10 || n > 1<<20 {
		t.Fatalf("tiny model is %d bytes, want a few hundred KB", n)
	}
	back, err := Read(bytes.NewReader(buf.Bytes()))
	if err != nil {
		t.Fatal(err)
	}
	for key, want := range map[string]any{
		"general.architecture":          "llama",
		"llama.block_count":             uint32(2),
		"llama.embedding_length":        uint32(64),
		"llama.attention.head_count_kv": uint32(2),
		"tokenizer.ggml.model":          "llama",
		"tokenizer.ggml.eos_token_id":   uint32(2),
	} {
		if got, _ := back.Get(key); got != want {
			t.Errorf("%s = %v, want %v", key, got, want)
		}
	}
	tokens, _ := back.Get("tokenizer.ggml.tokens")
	toks := tokens.([]string)
	if len(toks) != 354 || toks[3] != "▁" || toks[4] != "!" || toks[98] != "<0x00>" || toks[353] != "<0xFF>" {
		t.Fatalf("vocabulary layout: %d tokens, %q %q %q %q", len(toks), toks[3], toks[4], toks[98], toks[353])
	}
	// Tensor shapes llama.cpp checks when it loads a llama model.
	for name, dims := range map[string][]uint64{
		"token_embd.weight":        {64, 354},
		"output.weight":            {64, 354},
		"blk.1.attn_k.weight":      {64, 32},
		"blk.0.attn_output.weight": {64, 64},
		"blk.0.ffn_down.weight":    {128, 64},
		"blk.1.ffn_up.weight":      {64, 128},
	} {
		tt, ok := back.Tensor(name)
		if !ok || !reflect.DeepEqual(tt.Dims, dims) {
			t.Errorf("%s: dims %v, want %v", name, tt.Dims, dims)
		}
	}
	// The constant residual dimension that keeps forbidden tokens out.
	embd, _ := back.Tensor("token_embd.weight")
	out, _ := back.Tensor("output.weight")
	for tok := 0; tok < 354; tok++ {
		if embd.Data[tok*64+constDim] != constValue {
			t.Fatalf("token %d embedding lacks the constant", tok)
		}
		want := float32(0)
		if !generable(tok) {
			want = forbidWeight
		}
		if out.Data[tok*64+constDim] != want {
			t.Fatalf("token %q output weight on the constant = %v, want %v", toks[tok], out.Data[tok*64+constDim], want)
		}
	}
	for _, name := range []string{"blk.0.attn_output.weight", "blk.1.ffn_down.weight"} {
		w, _ := back.Tensor(name)
		in := int(w.Dims[0])
		for _, x := range w.Data[constDim*in : (constDim+1)*in] {
			if x != 0 {
				t.Fatalf("%s writes to the constant dimension", name)
			}
		}
	}
}

func TestTinyLlamaSeeded(t *testing.T) {
	bytesOf := func(seed uint64) []byte {
		f, err := TinyLlama(TinyOptions{Seed: seed})
		if err != nil {
			t.Fatal(err)
		}
		return encode(t, f)
	}
	if !bytes.Equal(bytesOf(7), bytesOf(7)) {
		t.Fatal("same seed, different files")
	}
	if bytes.Equal(bytesOf(7), bytesOf(8)) {
		t.Fatal("different seeds, same file")
	}
}

func TestTinyLlamaRejectsShapes(t *testing.T) {
	for _, o := range []TinyOptions{{Embed: 66, Heads: 4}, {Heads: 4, KVHeads: 3}, {Embed: 4, Heads: 2, KVHeads: 1}} {
		if _, err := TinyLlama(o); err == nil {
			t.Errorf("%+v: no error", o)
		}
	}
}
