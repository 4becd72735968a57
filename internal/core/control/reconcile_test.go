package control

import (
	"fmt"
	"testing"

	"github.com/switchyard-ai/switchyard/schemas"
)

func TestReconcile(t *testing.T) {
	hb := func(id string, load int, state string) schemas.Heartbeat {
		return schemas.Heartbeat{WorkerID: id, Running: load, Models: []schemas.ModelState{{Name: "m", State: state}}}
	}
	live := []schemas.Heartbeat{hb("w1", 5, schemas.WeightHot), hb("w2", 0, schemas.WeightHot), hb("w3", 0, schemas.WeightHot), hb("w4", 9, schemas.WeightSleeping)}
	tests := []struct {
		starting, desired int
		start             int
		drain             string
	}{
		{0, 6, 2, "[]"},
		{1, 6, 1, "[]"},
		{0, 4, 0, "[]"},
		{0, 3, 0, "[w4]"},       // sleeping first, however loaded
		{0, 1, 0, "[w4 w3 w2]"}, // then the idle, newest first
		{2, 4, 0, "[w4 w3]"},    // starting workers count and are kept
		{0, 0, 0, "[w4 w3 w2 w1]"},
	}
	for _, tc := range tests {
		start, drain := Reconcile(live, tc.starting, tc.desired)
		if start != tc.start || fmt.Sprint(drain) != tc.drain {
			t.Errorf("Reconcile(starting %d, desired %d) = %d, %v; want %d, %s", tc.starting, tc.desired, start, drain, tc.start, tc.drain)
		}
	}
}
