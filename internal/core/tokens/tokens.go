// Package tokens owns Switchyard's approximate tokenizer and the chained
// block hashes that identify KV-cache prefixes.
//
// The tokenizer is not a model's real BPE: it splits text into words and
// punctuation and cuts long words into 6-byte pieces, which tracks real
// tokenizers' counts for English text within roughly ±25 %. What matters for
// scheduling is that it is deterministic and prefix-stable: two prompts that
// share a textual prefix share a token prefix, so the block hashes below
// expose prefix reuse exactly as vLLM's prefix cache would see it. Where a
// model's own tokenizer is configured (the admitter's --tokenizer,
// internal/adapter/hftokenizer), its ids replace these, and BlockHashes over
// them equal the hashes relayed from the engine's KV events.
package tokens

import (
	"encoding/binary"
	"hash/fnv"
)

// BlockSize is the KV block size in tokens (vLLM's default page size).
const BlockSize = 16

// Tokenize returns deterministic token ids for text.
func Tokenize(text string) []uint32 {
	out := make([]uint32, 0, len(text)/4+1)
	start := -1
	flush := func(end int) {
		for start < end {
			n := end - start
			if n > 6 {
				n = 6
			}
			out = append(out, wordID(text[start:start+n]))
			start += n
		}
		start = -1
	}
	for i := 0; i < len(text); i++ {
		c := text[i]
		switch {
		case c == ' ' || c == '\n' || c == '\t' || c == '\r':
			if start >= 0 {
				flush(i)
			}
		case isWordByte(c):
			if start < 0 {
				start = i
			}
		default:
			if start >= 0 {
				flush(i)
			}
			out = append(out, wordID(text[i:i+1]))
		}
	}
	if start >= 0 {
		flush(len(text))
	}
	return out
}

// Count is len(Tokenize(text)) without keeping the ids.
func Count(text string) int { return len(Tokenize(text)) }

func isWordByte(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c >= 0x80
}

func wordID(s string) uint32 {
	h := fnv.New32a()
	h.Write([]byte(s))
	return h.Sum32()
}

// ChainHash is the hash of one full block given its parent's hash, in the
// style of vLLM's prefix cache: equal hashes mean equal whole prefixes.
func ChainHash(parent uint64, block []uint32) uint64 {
	h := fnv.New64a()
	var b [8]byte
	binary.LittleEndian.PutUint64(b[:], parent)
	h.Write(b[:])
	for _, t := range block {
		binary.LittleEndian.PutUint32(b[:4], t)
		h.Write(b[:4])
	}
	return h.Sum64()
}

// BlockHashes returns the chained hashes of every full BlockSize block of
// toks. A trailing partial block is not hashed: it cannot be shared.
func BlockHashes(toks []uint32) []uint64 {
	n := len(toks) / BlockSize
	out := make([]uint64, n)
	var parent uint64
	for i := 0; i < n; i++ {
		parent = ChainHash(parent, toks[i*BlockSize:(i+1)*BlockSize])
		out[i] = parent
	}
	return out
}

// ExpandBlocks turns a trace's coarse block ids (Mooncake uses 512-token
// blocks) into chained BlockSize-token hashes, so traces and live prompts use
// one index. Equal coarse-id prefixes give equal fine-hash prefixes.
func ExpandBlocks(coarse []uint64, tokensPerCoarse int, totalTokens int) []uint64 {
	per := tokensPerCoarse / BlockSize
	if per < 1 {
		per = 1
	}
	n := totalTokens / BlockSize
	if max := len(coarse) * per; n > max {
		n = max
	}
	out := make([]uint64, n)
	var parent uint64
	var blk [2]uint32
	for i := 0; i < n; i++ {
		id := coarse[i/per]
		blk[0] = uint32(id) ^ uint32(id>>32)
		blk[1] = uint32(i % per)
		parent = ChainHash(parent, blk[:])
		out[i] = parent
	}
	return out
}
