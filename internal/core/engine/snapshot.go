package engine

// CachedHashes returns every block hash resident in the prefix cache, for a
// KV snapshot after a router saw a gap in this replica's KV events. The
// order is unspecified; the slice is new.
func (e *Engine) CachedHashes() []uint64 {
	out := make([]uint64, 0, len(e.kv.byHash))
	for h := range e.kv.byHash {
		out = append(out, h)
	}
	return out
}
