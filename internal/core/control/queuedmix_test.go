package control

import (
	"maps"
	"testing"
)

func TestQueuedByModelFrom(t *testing.T) {
	for _, tc := range []struct {
		name    string
		held    map[string]int
		backlog int
		want    map[string]int
	}{
		{"no router heard", nil, 10, nil},
		{"backlog unknown", map[string]int{"a": 3}, -1, map[string]int{"a": 3}},
		{"backlog is what is held", map[string]int{"a": 3, "b": 1}, 4, map[string]int{"a": 3, "b": 1}},
		{"nothing held, backlog waiting", map[string]int{}, 5, nil},
		{"scaled up to the backlog", map[string]int{"a": 3, "b": 1}, 8, map[string]int{"a": 6, "b": 2}},
		{"largest remainder adds up", map[string]int{"a": 1, "b": 1, "c": 1}, 4, map[string]int{"a": 2, "b": 1, "c": 1}},
		{"a dead router's figure bounded", map[string]int{"a": 6, "b": 2}, 4, map[string]int{"a": 3, "b": 1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := QueuedByModelFrom(tc.held, tc.backlog)
			if (got == nil) != (tc.want == nil) || !maps.Equal(got, tc.want) {
				t.Fatalf("QueuedByModelFrom(%v, %d) = %v, want %v", tc.held, tc.backlog, got, tc.want)
			}
		})
	}
}
