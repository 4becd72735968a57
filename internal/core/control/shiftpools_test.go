package control

import (
	"slices"
	"testing"
)

// The pools of a fleet whose GPUs change model are every GPU type × every
// model, bounded by the type's GPUs; a worker parks the other models of
// its type; a parked tier defaults to host and refuses HBM.
func TestShiftPoolsAndParkedModels(t *testing.T) {
	pools, inv := ShiftPools([]ShiftReplica{
		{GPU: "h100", TP: 1, Model: "llama", Count: 2},
		{GPU: "a100-80g", TP: 1, Model: "qwen", Count: 1},
		{GPU: "h100", TP: 1, Model: "qwen", Count: 1},
	})
	if inv["h100"] != 3 || inv["a100-80g"] != 1 || len(inv) != 2 {
		t.Fatalf("inventory %v", inv)
	}
	var got []string
	for _, p := range pools {
		got = append(got, p.Key())
		if want := inv[p.GPU]; p.Min != 0 || p.Max != want {
			t.Errorf("%s: bounds [%d, %d], want [0, %d]", p.Key(), p.Min, p.Max, want)
		}
	}
	if want := []string{"h100:llama", "h100:qwen", "a100-80g:llama", "a100-80g:qwen"}; !slices.Equal(got, want) {
		t.Fatalf("pools %v, want %v", got, want)
	}
	if got := ParkedModels(pools, "a100-80g", 1, "qwen"); !slices.Equal(got, []string{"llama"}) {
		t.Errorf("an A100 serving qwen parks %v, want [llama]", got)
	}
	if got := ParkedModels(pools, "h100", 2, "llama"); len(got) != 0 {
		t.Errorf("a TP-2 H100, a type with no pools, parks %v", got)
	}
	for _, c := range []struct {
		in, want string
		ok       bool
	}{{"", "host", true}, {"page_cache", "page_cache", true}, {"hbm", "", false}, {"floppy", "", false}} {
		got, err := ParkedTier(c.in)
		if (err == nil) != c.ok || got != c.want {
			t.Errorf("ParkedTier(%q) = %q, %v", c.in, got, err)
		}
	}
}
