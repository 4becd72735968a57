package vllmkv

import (
	"slices"

	"github.com/switchyard-ai/switchyard/internal/core/tokens"
	"github.com/switchyard-ai/switchyard/schemas"
)

// Change is one delta to a worker's resident block set in Switchyard's
// hashes: Kind is schemas.KVStored, schemas.KVEvicted or schemas.KVCleared.
type Change struct {
	Kind   string
	Hashes []uint64
}

// Stats counts what the translator could not map, for logs and metrics.
type Stats struct {
	// Stored and Removed count engine blocks mapped and unmapped.
	Stored, Removed uint64
	// Unchained counts stored engine blocks whose parent this side never saw
	// (stored before the subscriber joined, or after a lost gap): without
	// the parent's hash the chain, and so the router's hash, is unknown.
	Unchained uint64
	// Keyed counts blocks keyed on a LoRA adapter or extra keys.
	Keyed uint64
	// OtherMedium counts events about blocks outside GPU memory.
	OtherMedium uint64
	// UnknownRemoved counts removals of blocks this side never mapped.
	UnknownRemoved uint64
	// BadBlockSize counts blocks whose size is not a multiple of ours.
	BadBlockSize uint64
}

// engineBlock is what one engine block maps to: the Switchyard hashes of
// the tokens.BlockSize-token blocks it covers (nil when it is not reusable
// by a plain prompt), the last of which is its children's parent.
type engineBlock struct {
	ours []uint64
}

// blockKey is an engine block within its KV cache group: hybrid models
// store the same tokens once per group, under the same or different hashes.
type blockKey struct {
	group int64
	hash  Hash
}

// Translator maps vLLM's blocks onto Switchyard's chained block hashes.
//
// vLLM's own block hashes are not ours (SHA-256 or Python's hash over the
// parent hash, the tokens and extra keys, seeded per process), so the
// translator rehashes the token_ids each BlockStored carries with
// tokens.ChainHash, parent first, exactly as the admitter hashes a prompt
// (tokens.BlockHashes): given the same token ids, the router's hash for a
// prompt's block equals the one stored here. It remembers each engine block's
// hashes so that BlockRemoved, which carries only engine hashes, can be
// translated, and refcounts Switchyard hashes so a block resident in several
// KV cache groups (or under several engine hashes) is evicted only when the
// last copy goes.
//
// A Translator is not safe for concurrent use.
type Translator struct {
	blocks map[blockKey]engineBlock
	held   map[uint64]int
	stats  Stats
}

// NewTranslator returns an empty translator.
func NewTranslator() *Translator {
	return &Translator{blocks: map[blockKey]engineBlock{}, held: map[uint64]int{}}
}

// Stats returns the counters so far.
func (t *Translator) Stats() Stats { return t.stats }

// Resident is how many Switchyard hashes are resident.
func (t *Translator) Resident() int { return len(t.held) }

// Hashes returns every resident Switchyard hash, sorted: a snapshot for
// the router after a gap.
func (t *Translator) Hashes() []uint64 {
	out := make([]uint64, 0, len(t.held))
	for h := range t.held {
		out = append(out, h)
	}
	slices.Sort(out)
	return out
}

// Reset forgets everything (the engine's state is unknown) and returns the
// change that tells the router so.
func (t *Translator) Reset() Change {
	clear(t.blocks)
	clear(t.held)
	return Change{Kind: schemas.KVCleared}
}

// Apply translates one batch, in order, into changes; consecutive changes
// of one kind are merged.
func (t *Translator) Apply(b Batch) []Change {
	var out []Change
	emit := func(kind string, h uint64) {
		if n := len(out); n > 0 && out[n-1].Kind == kind {
			out[n-1].Hashes = append(out[n-1].Hashes, h)
			return
		}
		out = append(out, Change{Kind: kind, Hashes: []uint64{h}})
	}
	for _, ev := range b.Events {
		switch ev.Type {
		case TypeBlockStored:
			if ev.Medium != "" && ev.Medium != MediumGPU {
				t.stats.OtherMedium++
				continue
			}
			t.stored(ev, emit)
		case TypeBlockRemoved:
			if ev.Medium != "" && ev.Medium != MediumGPU {
				t.stats.OtherMedium++
				continue
			}
			for _, h := range ev.BlockHashes {
				k := blockKey{ev.Group, h}
				blk, ok := t.blocks[k]
				if !ok {
					t.stats.UnknownRemoved++
					continue
				}
				delete(t.blocks, k)
				t.stats.Removed++
				for _, ours := range blk.ours {
					if t.held[ours]--; t.held[ours] <= 0 {
						delete(t.held, ours)
						emit(schemas.KVEvicted, ours)
					}
				}
			}
		case TypeAllBlocksCleared:
			out = append(out, t.Reset())
		}
	}
	return out
}

func (t *Translator) stored(ev Event, emit func(string, uint64)) {
	// parent is the Switchyard hash the run chains from; reusable is false
	// once the chain is unknown or keyed, and stays false for the run's
	// later blocks, as their engine hashes include the parent's.
	var parent uint64
	reusable := true
	if ev.HasParent {
		p, ok := t.blocks[blockKey{ev.Group, ev.Parent}]
		switch {
		case !ok:
			t.stats.Unchained += uint64(len(ev.BlockHashes))
			reusable = false
		case p.ours == nil:
			reusable = false
		default:
			parent = p.ours[len(p.ours)-1]
		}
	}
	if ev.Keyed {
		t.stats.Keyed += uint64(len(ev.BlockHashes))
		reusable = false
	}
	if ev.BlockSize%tokens.BlockSize != 0 {
		t.stats.BadBlockSize += uint64(len(ev.BlockHashes))
		reusable = false
	}
	per := ev.BlockSize / tokens.BlockSize
	for i, h := range ev.BlockHashes {
		k := blockKey{ev.Group, h}
		if old, dup := t.blocks[k]; dup {
			// Stored again without a removal (a replayed batch, or a
			// group re-announcing): keep the mapping, count nothing twice.
			if old.ours != nil {
				parent = old.ours[len(old.ours)-1]
			} else {
				reusable = false
			}
			continue
		}
		if !reusable {
			t.blocks[k] = engineBlock{}
			continue
		}
		toks := ev.TokenIDs[i*ev.BlockSize : (i+1)*ev.BlockSize]
		ours := make([]uint64, per)
		for j := range per {
			parent = tokens.ChainHash(parent, toks[j*tokens.BlockSize:(j+1)*tokens.BlockSize])
			ours[j] = parent
			if t.held[parent]++; t.held[parent] == 1 {
				emit(schemas.KVStored, parent)
			}
		}
		t.blocks[k] = engineBlock{ours: ours}
		t.stats.Stored++
	}
}
