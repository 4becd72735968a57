package client

import (
	"testing"

	"github.com/switchyard-ai/switchyard/schemas"
)

// TestStreamFilter: across a mid-stream failover a follower delivers each
// seq once, never a chunk of an attempt older than one it has seen, and
// still passes a gap on for its caller to notice.
func TestStreamFilter(t *testing.T) {
	type in struct {
		seq     uint64
		attempt int
	}
	tests := []struct {
		name string
		in   []in
		want []uint64 // seqs delivered
	}{
		{"in order", []in{{1, 0}, {2, 0}, {3, 0}}, []uint64{1, 2, 3}},
		{"failover continues", []in{{1, 0}, {2, 0}, {3, 1}, {4, 1}}, []uint64{1, 2, 3, 4}},
		{"duplicate seq dropped", []in{{1, 0}, {2, 0}, {2, 1}, {3, 1}}, []uint64{1, 2, 3}},
		{"restart from seq 1 dropped", []in{{1, 0}, {2, 0}, {3, 0}, {1, 1}, {2, 1}, {3, 1}, {4, 1}}, []uint64{1, 2, 3, 4}},
		{"lost attempt's late chunk dropped", []in{{1, 0}, {2, 1}, {3, 0}, {3, 1}}, []uint64{1, 2, 3}},
		{"gap passed on", []in{{1, 0}, {3, 0}}, []uint64{1, 3}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var f StreamFilter
			var got []uint64
			for _, c := range tc.in {
				if f.Admit(schemas.TokenChunk{Seq: c.seq, Attempt: c.attempt}) {
					got = append(got, c.seq)
				}
			}
			if len(got) != len(tc.want) {
				t.Fatalf("delivered %v, want %v", got, tc.want)
			}
			for i := range got {
				if got[i] != tc.want[i] {
					t.Fatalf("delivered %v, want %v", got, tc.want)
				}
			}
		})
	}
}
