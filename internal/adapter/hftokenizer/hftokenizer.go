// Package hftokenizer owns reading a model's Hugging Face tokenizer.json
// and turning prompt text into the token ids that model's engine sees, so
// the admitter's chained block hashes (tokens.BlockHashes) are computed
// from the same ids a vLLM engine hashes per block and reports in its KV
// events (vllmkv.Translator rehashes those ids the same way).
//
// The tokenizer itself is github.com/sugarme/tokenizer, a pure-Go port of
// Hugging Face's tokenizers (no cgo, no Rust library to build). Where the
// port diverges from Hugging Face on tokenizer.json files real models
// ship, this package builds that piece itself rather than accept ids that
// silently differ from the engine's:
//
//   - Split pre-tokenizer regexes run on github.com/dlclark/regexp2, which
//     has the look-ahead (`\s+(?!\S)`) that Llama 3, Qwen 2 and GPT-4-style
//     patterns use and Unicode `\s` as Hugging Face's Oniguruma does; the
//     port compiles them with Go's regexp, which panics on look-ahead.
//     A String pattern is a literal, as in Hugging Face (the port reads it
//     as a regex).
//   - The ByteLevel pre-tokenizer honours use_regex=false (Llama 3 splits
//     first, then only maps bytes) and keeps added tokens found in the
//     text (the port re-splits with GPT-2's regex and drops them).
//   - A BPE model with ignore_merges looks a whole word up in the
//     vocabulary before merging, as Hugging Face does.
//   - Added tokens are registered in file order, and each must get the id
//     the file declares; a file that would not is refused.
//
// Features the port does not implement and that would change ids
// (byte_fallback, BPE dropout) make Load fail with an error that says so:
// the caller falls back to Switchyard's approximate tokenizer rather than
// compute hashes that look exact and never meet the engine's.
package hftokenizer

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/dlclark/regexp2"
	"github.com/sugarme/tokenizer"
	"github.com/sugarme/tokenizer/normalizer"
	"github.com/sugarme/tokenizer/pretokenizer"
	"github.com/sugarme/tokenizer/pretrained"
)

// MaxFileBytes bounds a tokenizer.json (Llama 3's is 9 MB, the largest
// common ones about 35 MB).
const MaxFileBytes = 256 << 20

// regexTimeout bounds one pre-tokenizer regex search: a pathological
// pattern fails that prompt's tokenization instead of hanging admission.
const regexTimeout = 5 * time.Second

// Tokenizer is one model's tokenizer. It is safe for concurrent use.
type Tokenizer struct {
	tk *tokenizer.Tokenizer
	// vocab is the model's vocabulary size plus the added tokens: every id
	// Encode returns is below it.
	vocab int
}

// Load reads a tokenizer.json file.
func Load(path string) (*Tokenizer, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("hftokenizer: %w", err)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, MaxFileBytes+1))
	if err != nil {
		return nil, fmt.Errorf("hftokenizer: read %s: %w", path, err)
	}
	if len(data) > MaxFileBytes {
		return nil, fmt.Errorf("hftokenizer: %s is over %d MiB, not a tokenizer.json", path, MaxFileBytes>>20)
	}
	t, err := Parse(data)
	if err != nil {
		return nil, fmt.Errorf("hftokenizer: %s: %w", path, err)
	}
	return t, nil
}

// Parse builds a tokenizer from the contents of a tokenizer.json.
func Parse(data []byte) (t *Tokenizer, err error) {
	var cfg tokenizer.Config
	if err := json.Unmarshal(data, &cfg); err != nil {
		return nil, fmt.Errorf("not a tokenizer.json: %w", err)
	}
	if cfg.Model == nil {
		return nil, errors.New(`no "model" section`)
	}
	// The port asserts field types without checking them: a malformed file
	// panics inside it. That is an error in the file, reported as one.
	defer func() {
		if r := recover(); r != nil {
			t, err = nil, fmt.Errorf("malformed or unsupported tokenizer.json: %v", r)
		}
	}()
	model, err := buildModel(&cfg)
	if err != nil {
		return nil, err
	}
	tk := tokenizer.NewTokenizer(model)
	norm, err := pretrained.CreateNormalizer(cfg.Normalizer)
	if err != nil {
		return nil, fmt.Errorf("normalizer: %w", err)
	}
	tk.WithNormalizer(norm)
	pre, err := buildPreTokenizer(cfg.PreTokenizer)
	if err != nil {
		return nil, fmt.Errorf("pre_tokenizer: %w", err)
	}
	tk.WithPreTokenizer(pre)
	post, err := pretrained.CreatePostProcessor(cfg.PostProcessor)
	if err != nil {
		return nil, fmt.Errorf("post_processor: %w", err)
	}
	tk.WithPostProcessor(post)
	// The decoder, truncation and padding do not change the ids of a
	// prompt as the engine tokenizes it, so they are not built.
	if err := addTokens(tk, cfg.AddedTokens); err != nil {
		return nil, err
	}
	return &Tokenizer{tk: tk, vocab: tk.GetVocabSize(true)}, nil
}

// buildModel builds the model section, refusing what the port would get
// wrong.
func buildModel(cfg *tokenizer.Config) (tokenizer.Model, error) {
	typ, _ := cfg.Model["type"].(string)
	if typ == "BPE" || typ == "" {
		if v, _ := cfg.Model["byte_fallback"].(bool); v {
			return nil, errors.New("BPE byte_fallback is not supported by the Go tokenizer: characters outside the vocabulary would get other ids than the engine's")
		}
		if d, ok := cfg.Model["dropout"].(float64); ok && d > 0 {
			return nil, fmt.Errorf("BPE dropout %g makes tokenization random: no engine's ids can be matched", d)
		}
	}
	m, err := pretrained.CreateModel(cfg)
	if err != nil {
		return nil, fmt.Errorf("model: %w", err)
	}
	if v, _ := cfg.Model["ignore_merges"].(bool); v && typ == "BPE" {
		m = ignoreMerges{m}
	}
	return m, nil
}

// ignoreMerges is a BPE model that takes a word found whole in the
// vocabulary as one token before merging (Hugging Face's ignore_merges).
type ignoreMerges struct{ tokenizer.Model }

func (m ignoreMerges) Tokenize(word string) ([]tokenizer.Token, error) {
	if id, ok := m.Model.TokenToId(word); ok {
		return []tokenizer.Token{{Id: id, Value: word, Offsets: []int{0, len(word)}}}, nil
	}
	return m.Model.Tokenize(word)
}

// addTokens registers the added tokens one at a time in file order, as
// Hugging Face does (the port adds every special token before every other,
// which renumbers interleaved ones), and checks each got its declared id.
func addTokens(tk *tokenizer.Tokenizer, added []tokenizer.TokenConfig) error {
	special, plain := pretrained.CreateAddedTokens(added)
	si, pi := 0, 0
	for _, a := range added {
		if a.Content == "" {
			return fmt.Errorf("added token %d has no content", a.Id)
		}
		if a.Special {
			tk.AddSpecialTokens(special[si : si+1])
			si++
		} else {
			tk.AddTokens(plain[pi : pi+1])
			pi++
		}
		if id, ok := tk.TokenToId(a.Content); !ok || int64(id) != a.Id {
			return fmt.Errorf("added token %q is declared as id %d but its place in the vocabulary gives %d", a.Content, a.Id, id)
		}
	}
	return nil
}

// buildPreTokenizer builds a pre_tokenizer section, with this package's
// Split and ByteLevel in place of the port's (see the package comment),
// at any depth of a Sequence.
func buildPreTokenizer(cfg map[string]any) (tokenizer.PreTokenizer, error) {
	if cfg == nil {
		return nil, nil
	}
	typ, _ := cfg["type"].(string)
	switch typ {
	case "Sequence":
		list, ok := cfg["pretokenizers"].([]any)
		if !ok {
			return nil, fmt.Errorf("type Sequence: pretokenizers is %T, want a list", cfg["pretokenizers"])
		}
		parts := make([]tokenizer.PreTokenizer, 0, len(list))
		for i, raw := range list {
			sub, ok := raw.(map[string]any)
			if !ok {
				return nil, fmt.Errorf("type Sequence: pretokenizers[%d] is %T, want an object", i, raw)
			}
			p, err := buildPreTokenizer(sub)
			if err != nil {
				return nil, fmt.Errorf("type Sequence: pretokenizers[%d]: %w", i, err)
			}
			if p != nil {
				parts = append(parts, p)
			}
		}
		return pretokenizer.NewSequence(parts), nil
	case "Split":
		return newSplit(cfg)
	case "ByteLevel":
		return newByteLevel(cfg)
	default:
		return pretrained.CreatePreTokenizer(cfg)
	}
}

// gpt2Pattern is the ByteLevel pre-tokenizer's split when use_regex is on,
// exactly as Hugging Face writes it.
const gpt2Pattern = `'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+`

func compile(expr string) (*regexp2.Regexp, error) {
	re, err := regexp2.Compile(expr, regexp2.Unicode)
	if err != nil {
		return nil, err
	}
	re.MatchTimeout = regexTimeout
	return re, nil
}

// pattern finds a regex's matches in a string as the port's splitting
// wants them: byte offsets covering the whole string, in order, each
// flagged match or gap (inverted when invert is set). The port's Pattern
// cannot return an error, so a search that fails (its time bound) panics
// with a regexError, which Encode recovers into that prompt's error.
type pattern struct {
	re     *regexp2.Regexp
	invert bool
}

type regexError struct{ err error }

func (p pattern) FindMatches(s string) []normalizer.OffsetsMatch {
	if s == "" {
		return []normalizer.OffsetsMatch{{Offsets: []int{0, 0}, Match: false}}
	}
	// regexp2 reports rune positions; the port splits on byte offsets.
	runes := []rune(s)
	byteAt := make([]int, len(runes)+1)
	off := 0
	for i, r := range runes {
		byteAt[i] = off
		off += utf8.RuneLen(r)
	}
	byteAt[len(runes)] = off
	var out []normalizer.OffsetsMatch
	add := func(start, end int, match bool) {
		if start < end {
			out = append(out, normalizer.OffsetsMatch{Offsets: []int{byteAt[start], byteAt[end]}, Match: match != p.invert})
		}
	}
	prev := 0
	m, err := p.re.FindRunesMatch(runes)
	for ; m != nil && err == nil; m, err = p.re.FindNextMatch(m) {
		if m.Length == 0 {
			continue
		}
		add(prev, m.Index, false)
		add(m.Index, m.Index+m.Length, true)
		prev = m.Index + m.Length
	}
	if err != nil {
		panic(regexError{fmt.Errorf("pre-tokenizer regex %q: %w", p.re.String(), err)})
	}
	add(prev, len(runes), false)
	return out
}

var behaviors = map[string]normalizer.SplitDelimiterBehavior{
	"Removed":            normalizer.RemovedBehavior,
	"Isolated":           normalizer.IsolatedBehavior,
	"MergedWithPrevious": normalizer.MergedWithPreviousBehavior,
	"MergedWithNext":     normalizer.MergedWithNextBehavior,
	"Contiguous":         normalizer.ContiguousBehavior,
}

// split is the Split pre-tokenizer.
type split struct {
	pat      pattern
	behavior normalizer.SplitDelimiterBehavior
}

func newSplit(cfg map[string]any) (*split, error) {
	pat, ok := cfg["pattern"].(map[string]any)
	if !ok {
		return nil, fmt.Errorf("type Split: pattern is %T, want an object", cfg["pattern"])
	}
	var expr string
	if r, ok := pat["Regex"].(string); ok {
		expr = r
	} else if lit, ok := pat["String"].(string); ok {
		expr = regexp2.Escape(lit)
	} else {
		return nil, fmt.Errorf("type Split: pattern %v has neither a Regex nor a String", pat)
	}
	re, err := compile(expr)
	if err != nil {
		return nil, fmt.Errorf("type Split: pattern: %w", err)
	}
	name, _ := cfg["behavior"].(string)
	b, ok := behaviors[name]
	if !ok {
		return nil, fmt.Errorf("type Split: behavior %q is not one of Removed, Isolated, MergedWithPrevious, MergedWithNext, Contiguous", name)
	}
	invert, _ := cfg["invert"].(bool)
	return &split{pat: pattern{re: re, invert: invert}, behavior: b}, nil
}

func (s *split) PreTokenize(pt *tokenizer.PreTokenizedString) (*tokenizer.PreTokenizedString, error) {
	return pt.Split(func(_ int, n *normalizer.NormalizedString) []tokenizer.SplitIdx {
		return splitIdx(n.Split(s.pat, s.behavior), nil)
	}), nil
}

func splitIdx(parts []normalizer.NormalizedString, each func(*normalizer.NormalizedString) *normalizer.NormalizedString) []tokenizer.SplitIdx {
	out := make([]tokenizer.SplitIdx, len(parts))
	for i := range parts {
		n := &parts[i]
		if each != nil {
			n = each(n)
		}
		out[i] = tokenizer.SplitIdx{Normalized: n}
	}
	return out
}

// byteLevel is the ByteLevel pre-tokenizer: an optional leading space, an
// optional GPT-2 split, then every byte mapped to its printable character.
type byteLevel struct {
	addPrefixSpace bool
	split          *split // nil when use_regex is off
}

func newByteLevel(cfg map[string]any) (*byteLevel, error) {
	b := &byteLevel{addPrefixSpace: true}
	if v, ok := cfg["add_prefix_space"].(bool); ok {
		b.addPrefixSpace = v
	}
	useRegex := true
	if v, ok := cfg["use_regex"].(bool); ok {
		useRegex = v
	}
	if useRegex {
		re, err := compile(gpt2Pattern)
		if err != nil {
			return nil, fmt.Errorf("ByteLevel: %w", err)
		}
		b.split = &split{pat: pattern{re: re}, behavior: normalizer.IsolatedBehavior}
	}
	return b, nil
}

func (b *byteLevel) PreTokenize(pt *tokenizer.PreTokenizedString) (*tokenizer.PreTokenizedString, error) {
	return pt.Split(func(_ int, n *normalizer.NormalizedString) []tokenizer.SplitIdx {
		if b.addPrefixSpace && !strings.HasPrefix(n.GetNormalized(), " ") {
			n = n.Prepend(" ")
		}
		parts := []normalizer.NormalizedString{*n}
		if b.split != nil {
			parts = n.Split(b.split.pat, b.split.behavior)
		}
		return splitIdx(parts, mapBytes)
	}), nil
}

// mapBytes replaces each byte of n by its ByteLevel character, keeping the
// alignment to the original text.
func mapBytes(n *normalizer.NormalizedString) *normalizer.NormalizedString {
	s := n.GetNormalized()
	changes := make([]normalizer.ChangeMap, 0, len(s))
	for _, r := range s {
		var buf [utf8.UTFMax]byte
		k := utf8.EncodeRune(buf[:], r)
		for i, c := range buf[:k] {
			change := 0
			if i > 0 {
				change = 1 // every byte after a rune's first is a new character
			}
			changes = append(changes, normalizer.ChangeMap{RuneVal: pretokenizer.BytesChar[c], Changes: change})
		}
	}
	return n.Transform(changes, 0)
}

// Encode returns the token ids of text with the model's special tokens
// added (its post-processor: Llama's BOS, for one), as vLLM tokenizes a
// completion prompt (add_special_tokens=True).
func (t *Tokenizer) Encode(text string) ([]uint32, error) { return t.encode(text, true) }

// EncodeRaw returns the token ids of text without added special tokens,
// as vLLM tokenizes a prompt already rendered by the chat template.
func (t *Tokenizer) EncodeRaw(text string) ([]uint32, error) { return t.encode(text, false) }

func (t *Tokenizer) encode(text string, special bool) (ids []uint32, err error) {
	if !utf8.ValidString(text) {
		return nil, errors.New("hftokenizer: text is not valid UTF-8")
	}
	defer func() {
		switch r := recover().(type) {
		case nil:
		case regexError:
			ids, err = nil, fmt.Errorf("hftokenizer: %w", r.err)
		default:
			ids, err = nil, fmt.Errorf("hftokenizer: tokenizing failed: %v", r)
		}
	}()
	en, err := t.tk.Encode(tokenizer.NewSingleEncodeInput(tokenizer.NewInputSequence(text)), special)
	if err != nil {
		return nil, fmt.Errorf("hftokenizer: %w", err)
	}
	ids = make([]uint32, len(en.Ids))
	for i, id := range en.Ids {
		if id < 0 || id >= t.vocab {
			return nil, fmt.Errorf("hftokenizer: token %d got id %d, outside the vocabulary of %d", i, id, t.vocab)
		}
		ids[i] = uint32(id)
	}
	return ids, nil
}
