package hftokenizer

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
)

// testdata/tokenizer.json is a small byte-level BPE tokenizer written for
// these tests in the shape Llama 3's tokenizer.json has: the 256 byte
// characters as ids 0-255 (GPT-2's byte-to-character table, id = byte
// value), 13 merged tokens (256 he, 257 ll, 258 hell, 259 hello, 260 Ġw,
// 261 or, 262 Ġwor, 263 ld, 264 Ġworld, 265 Ġt, 266 Ġthe, 267 "34",
// 268 Ġcat — reachable only whole, through ignore_merges), the special
// tokens 269 <|begin_of_text|> and 270 <|end_of_text|>, Llama 3's Split
// regex (with its look-ahead) then ByteLevel with use_regex off, and a
// TemplateProcessing post-processor that prepends <|begin_of_text|>.
const bos, eos = 269, 270

func load(t *testing.T) *Tokenizer {
	t.Helper()
	tk, err := Load(filepath.Join("testdata", "tokenizer.json"))
	if err != nil {
		t.Fatal(err)
	}
	return tk
}

func TestEncodeKnownStrings(t *testing.T) {
	tk := load(t)
	for _, tc := range []struct {
		name, text string
		want       []uint32
	}{
		// Whole words in the vocabulary (ignore_merges) and a leading space.
		{"words", "hello world", []uint32{bos, 259, 264}},
		// The merges, applied by rank: hellow is not in the vocabulary.
		{"merges", "hellow", []uint32{bos, 259, 'w'}},
		// Ġcat has no merge path: only ignore_merges reaches it.
		{"ignore_merges", " the cat", []uint32{bos, 266, 268}},
		// \s+(?!\S) leaves the last space to the next word.
		{"look-ahead", "hello  world", []uint32{bos, 259, ' ', 264}},
		// \p{N}{1,3}: "12345" is "123" + "45", so the 3 4 merge never
		// applies (GPT-2's ` ?\p{N}+` would give 1 2 "34" 5).
		{"digit groups", "12345", []uint32{bos, '1', '2', '3', '4', '5'}},
		{"digits merged", "34", []uint32{bos, 267}},
		// [^\r\n\p{L}\p{N}]?\p{L}+ keeps the parenthesis with its word.
		{"punctuation", "(hello)", []uint32{bos, '(', 259, ')'}},
		// Bytes of a multi-byte character become their byte characters.
		{"utf-8", "é", []uint32{bos, 0xC3, 0xA9}},
		// A special token in the text is that token, not its characters.
		{"special in text", "hello<|end_of_text|>", []uint32{bos, 259, eos}},
		{"newlines", "a\n\nb", []uint32{bos, 'a', 10, 10, 'b'}},
		{"empty", "", []uint32{bos}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := tk.Encode(tc.text)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(got, tc.want) {
				t.Fatalf("Encode(%q) = %v, want %v", tc.text, got, tc.want)
			}
			raw, err := tk.EncodeRaw(tc.text)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(raw, tc.want[1:]) {
				t.Fatalf("EncodeRaw(%q) = %v, want %v", tc.text, raw, tc.want[1:])
			}
		})
	}
}

// A prefix shared as text is shared as tokens, so block hashes over a
// long shared system prompt agree across prompts that continue it.
func TestEncodeIsPrefixStableAcrossContinuations(t *testing.T) {
	tk := load(t)
	system := strings.Repeat("hello world the cat ", 20)
	a, err := tk.Encode(system + "hello")
	if err != nil {
		t.Fatal(err)
	}
	b, err := tk.Encode(system + "world")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for n < min(len(a), len(b)) && a[n] == b[n] {
		n++
	}
	// BOS, hello Ġworld Ġthe Ġcat, then 19 × Ġ hello Ġworld Ġthe Ġcat
	// (" hello" is not in the vocabulary: Ġ then the merges' hello).
	if want := 1 + 4 + 19*5; n != want {
		t.Fatalf("shared %d tokens, want %d: the BOS and the system prompt's", n, want)
	}
}

func TestEncodeConcurrently(t *testing.T) {
	tk := load(t)
	want, err := tk.Encode("hello world the cat 12345")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	errs := make(chan string, 8)
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 50 {
				got, err := tk.Encode("hello world the cat 12345")
				if err != nil || !slices.Equal(got, want) {
					errs <- "concurrent Encode disagreed"
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Fatal(e)
	}
}

func TestEncodeRefusesInvalidUTF8(t *testing.T) {
	if _, err := load(t).Encode("a\xffb"); err == nil || !strings.Contains(err.Error(), "not valid UTF-8") {
		t.Fatalf("err = %v", err)
	}
}

// edit returns the test tokenizer.json with change applied to its decoded
// form, re-encoded.
func edit(t *testing.T, change func(doc map[string]any)) []byte {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("testdata", "tokenizer.json"))
	if err != nil {
		t.Fatal(err)
	}
	var doc map[string]any
	if err := json.Unmarshal(data, &doc); err != nil {
		t.Fatal(err)
	}
	change(doc)
	out, err := json.Marshal(doc)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func model(doc map[string]any) map[string]any { return doc["model"].(map[string]any) }

func TestParseRefusesWhatItWouldGetWrong(t *testing.T) {
	for _, tc := range []struct {
		name   string
		data   func(t *testing.T) []byte
		reason string
	}{
		{"not JSON", func(*testing.T) []byte { return []byte("<html>") }, "not a tokenizer.json"},
		{"no model", func(*testing.T) []byte { return []byte(`{"version":"1.0"}`) }, `no "model" section`},
		{"byte fallback", func(t *testing.T) []byte {
			return edit(t, func(d map[string]any) { model(d)["byte_fallback"] = true })
		}, "byte_fallback is not supported"},
		{"dropout", func(t *testing.T) []byte {
			return edit(t, func(d map[string]any) { model(d)["dropout"] = 0.1 })
		}, "dropout 0.1 makes tokenization random"},
		{"added token id", func(t *testing.T) []byte {
			return edit(t, func(d map[string]any) { d["added_tokens"].([]any)[1].(map[string]any)["id"] = 300 })
		}, `added token "<|end_of_text|>" is declared as id 300 but its place in the vocabulary gives 270`},
		{"bad regex", func(t *testing.T) []byte {
			return edit(t, func(d map[string]any) {
				pre := d["pre_tokenizer"].(map[string]any)["pretokenizers"].([]any)[0].(map[string]any)
				pre["pattern"] = map[string]any{"Regex": "(unclosed"}
			})
		}, "pre_tokenizer: type Sequence: pretokenizers[0]: type Split: pattern"},
		{"bad behavior", func(t *testing.T) []byte {
			return edit(t, func(d map[string]any) {
				d["pre_tokenizer"].(map[string]any)["pretokenizers"].([]any)[0].(map[string]any)["behavior"] = "Sideways"
			})
		}, `type Split: behavior "Sideways"`},
		{"vocab not an object", func(t *testing.T) []byte {
			return edit(t, func(d map[string]any) { model(d)["vocab"] = 7 })
		}, "malformed or unsupported tokenizer.json"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse(tc.data(t))
			if err == nil || !strings.Contains(err.Error(), tc.reason) {
				t.Fatalf("err = %v, want it to say %q", err, tc.reason)
			}
		})
	}
}

func TestLoadErrors(t *testing.T) {
	if _, err := Load(filepath.Join(t.TempDir(), "missing.json")); err == nil || !strings.Contains(err.Error(), "missing.json") {
		t.Fatalf("missing file: %v", err)
	}
}

// A Split with a String pattern splits on the literal, not a regex.
func TestSplitStringPatternIsLiteral(t *testing.T) {
	data := edit(t, func(d map[string]any) {
		d["pre_tokenizer"] = map[string]any{"type": "Sequence", "pretokenizers": []any{
			map[string]any{"type": "Split", "pattern": map[string]any{"String": "."}, "behavior": "Removed", "invert": false},
			map[string]any{"type": "ByteLevel", "add_prefix_space": false, "use_regex": false},
		}}
	})
	tk, err := Parse(data)
	if err != nil {
		t.Fatal(err)
	}
	got, err := tk.EncodeRaw("he.ll")
	if err != nil {
		t.Fatal(err)
	}
	// "." removed as a literal; as a regex it would remove every character.
	if want := []uint32{256, 257}; !slices.Equal(got, want) {
		t.Fatalf("got %v, want %v", got, want)
	}
}
