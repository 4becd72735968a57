package routing

import (
	"strings"
	"testing"
	"time"

	"github.com/switchyard-ai/switchyard/schemas"
)

// A request held because its only worker advertises a long cold load says
// so, with the figure and the time left (issue 31: a guessed 24 s load held
// every request for a model past its 20 s deadline, and no log said why).
func TestHeldReasonNamesTheAdvertisedLoad(t *testing.T) {
	for _, tc := range []struct {
		name  string
		state string
		load  float64
		want  []string
	}{
		{"cold with a long load", schemas.WeightCold, 24, []string{"deadline_busy", "w1 deadline_busy: model " + model + " cold, load_s 24.00 advertised", "to the deadline"}},
		{"hot", schemas.WeightHot, 0, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newSim(t, Config{})
			hb := heartbeat("w1", 1)
			hb.Models[0].State, hb.Models[0].LoadSeconds = tc.state, tc.load
			s.apply(Input{Kind: InHeartbeat, Heartbeat: hb})
			acts := s.admit(admitted("r1", "acme", 20*time.Second, 100, 16, s.now))
			delayed := only(acts, ActDelayed)
			if tc.want == nil {
				if len(delayed) > 0 || len(only(acts, ActDispatch)) != 1 {
					t.Fatalf("a hot worker did not take it: %s", kinds(acts))
				}
				return
			}
			if len(delayed) != 1 {
				t.Fatalf("want one delayed action, got %s", kinds(acts))
			}
			for _, w := range tc.want {
				if !strings.Contains(delayed[0].Reason, w) {
					t.Errorf("reason %q lacks %q", delayed[0].Reason, w)
				}
			}
		})
	}
}
