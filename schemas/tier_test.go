package schemas

import (
	"reflect"
	"testing"
)

// A model's weight tier travels in both wire formats under its JSON names,
// and the states and tiers map onto each other.
func TestModelStateTier(t *testing.T) {
	in := Heartbeat{WorkerID: "w", Models: []ModelState{{Name: "m", State: WeightSleeping, LoadSeconds: 1.1, Tier: TierHost,
		TierSeconds: map[string]float64{TierDisk: 29.4, TierPageCache: 28}}}}
	for _, format := range []Format{JSON, Msgpack} {
		b, err := Marshal(format, &in)
		if err != nil {
			t.Fatal(err)
		}
		var out Heartbeat
		if err := Unmarshal(format, b, &out); err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(out.Models, in.Models) {
			t.Errorf("%s: %+v, want %+v", format, out.Models, in.Models)
		}
	}
	for _, tc := range []struct{ state, tier string }{
		{WeightHot, TierHBM}, {WeightSleeping, TierHost}, {WeightCold, TierDisk}, {WeightAbsent, TierRemote},
	} {
		if got := WeightTier(tc.state); got != tc.tier {
			t.Errorf("WeightTier(%s) = %s, want %s", tc.state, got, tc.tier)
		}
		if got := TierState(tc.tier); got != tc.state {
			t.Errorf("TierState(%s) = %s, want %s", tc.tier, got, tc.state)
		}
	}
	if WeightTier(WeightLoading) != TierHBM || TierState(TierPageCache) != WeightCold || WeightTier("bogus") != "" || TierState("bogus") != "" {
		t.Error("loading, page cache or an unknown name mapped wrongly")
	}
}
