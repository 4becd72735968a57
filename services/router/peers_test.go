package router

import (
	"fmt"
	"testing"
)

// TestOwnerSpreadsAndMovesOnlyTheLeaversShare: every survivor computes the
// same adopter for a request; the three routers each own about a third;
// when one leaves, only the requests it owned change owner.
func TestOwnerSpreadsAndMovesOnlyTheLeaversShare(t *testing.T) {
	three := []string{"r1", "r2", "r3"}
	two := []string{"r1", "r3"}
	counts := map[string]int{}
	const n = 3000
	for i := range n {
		id := fmt.Sprintf("req-%d", i)
		o3, o2 := Owner(id, three), Owner(id, two)
		counts[o3]++
		if o3 != "r2" && o2 != o3 {
			t.Fatalf("%s moved from %s to %s when r2 left", id, o3, o2)
		}
		if o2 == "r2" {
			t.Fatalf("%s owned by r2, which left", id)
		}
	}
	for _, r := range three {
		if c := counts[r]; c < n/3-n/10 || c > n/3+n/10 {
			t.Errorf("%s owns %d of %d requests, want about a third: %v", r, c, n, counts)
		}
	}
	for _, tc := range []struct {
		live []string
		want string
	}{{nil, ""}, {[]string{"solo"}, "solo"}} {
		if got := Owner("x", tc.live); got != tc.want {
			t.Errorf("Owner(x, %v) = %q, want %q", tc.live, got, tc.want)
		}
	}
}
