package tokens

import (
	"strings"
	"testing"
)

func TestPrefixStableHashes(t *testing.T) {
	sys := strings.Repeat("You are a careful assistant that answers briefly. ", 20)
	a := BlockHashes(Tokenize(sys + "What is the capital of France?"))
	b := BlockHashes(Tokenize(sys + "How tall is Mount Everest, in metres?"))
	if len(a) < 5 || len(b) < 5 {
		t.Fatalf("expected several blocks, got %d and %d", len(a), len(b))
	}
	shared := 0
	for shared < len(a) && shared < len(b) && a[shared] == b[shared] {
		shared++
	}
	sysBlocks := len(Tokenize(sys)) / BlockSize
	if shared < sysBlocks-1 {
		t.Fatalf("shared %d blocks, want at least %d (the system prompt)", shared, sysBlocks-1)
	}
	c := BlockHashes(Tokenize("Different start. " + sys))
	if len(c) > 0 && c[0] == a[0] {
		t.Fatal("different first block must hash differently")
	}
}

func TestCountTracksText(t *testing.T) {
	tests := []struct {
		text     string
		min, max int
	}{
		{"", 0, 0},
		{"hello world", 2, 2},
		{"internationalization", 4, 4},
		{"a, b.", 4, 4},
	}
	for _, tc := range tests {
		if n := Count(tc.text); n < tc.min || n > tc.max {
			t.Errorf("Count(%q) = %d, want [%d,%d]", tc.text, n, tc.min, tc.max)
		}
	}
}

func TestExpandBlocksSharesPrefix(t *testing.T) {
	a := ExpandBlocks([]uint64{7, 8, 9}, 512, 1536)
	b := ExpandBlocks([]uint64{7, 8, 10}, 512, 1400)
	if len(a) != 96 || len(b) != 87 {
		t.Fatalf("lengths %d %d", len(a), len(b))
	}
	for i := 0; i < 64; i++ {
		if a[i] != b[i] {
			t.Fatalf("block %d differs inside the shared coarse prefix", i)
		}
	}
	if a[64] == b[64] {
		t.Fatal("diverging coarse block must diverge")
	}
}
