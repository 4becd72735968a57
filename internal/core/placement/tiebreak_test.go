package placement

import (
	"testing"

	"github.com/switchyard-ai/switchyard/schemas"
)

// TestNewPrefixGoesToTheEmptierCache: of equal idle workers, a prompt none
// holds goes to the one whose cache holds fewer blocks, not to the lower
// id every time (less), so new prefixes spread over the fleet; a prompt a
// worker holds still goes there, and equal caches fall back to the id.
func TestNewPrefixGoesToTheEmptierCache(t *testing.T) {
	heldByA, heldByB, fresh := []uint64{1, 2, 3}, []uint64{4, 5, 6}, []uint64{7, 8, 9}
	f := build(spec{gpu: "fast"}, spec{gpu: "fast"})
	f.ApplyKV(&schemas.KVEvent{WorkerID: "A", Seq: 1, Kind: schemas.KVStored, Hashes: heldByA}, now)
	for _, tc := range []struct {
		name   string
		hashes []uint64
		want   string
	}{
		{"a prompt no worker holds goes to the emptier cache", fresh, "B"},
		{"a prompt A holds goes to A", heldByA, "A"},
	} {
		if got := winner(place(t, f, withHashes(req(schemas.PriorityStandard), tc.hashes), testOpts())); got != tc.want {
			t.Errorf("%s: placed on %s, want %s", tc.name, got, tc.want)
		}
	}
	f.ApplyKV(&schemas.KVEvent{WorkerID: "B", Seq: 1, Kind: schemas.KVStored, Hashes: heldByB}, now)
	if got := winner(place(t, f, withHashes(req(schemas.PriorityStandard), fresh), testOpts())); got != "A" {
		t.Errorf("equal caches: placed on %s, want A (the lower id)", got)
	}
}
