package placement

import (
	"fmt"
	"testing"
	"time"
	"unsafe"

	"github.com/switchyard-ai/switchyard/internal/core/fleet"
	"github.com/switchyard-ai/switchyard/schemas"
)

// The bound reads a hot row for every worker it bounds; at 64 bytes that is
// one cache line (view.go, hotRow). A field added to it should move to the
// cold row, or pay for the second line knowingly.
func TestHotRowIsOneCacheLine(t *testing.T) {
	if size := unsafe.Sizeof(hotRow{}); size != 64 {
		t.Fatalf("hotRow is %d bytes, want 64", size)
	}
}

// The hot row keeps LastSeen as an offset from the placer's anchor; a
// worker must be judged stale exactly when LastSeen.Before(cutoff), as it
// was when the row held the time.Time: on the monotonic clock when both
// times carry it, on the wall clock otherwise, whichever of them the
// anchor (the first worker heard) and the cutoff carry.
func TestStalenessComparesAsTimeDoes(t *testing.T) {
	const farPast = time.Duration(-1 << 62) // stands for 400 years before the anchor
	base := time.Now()                      // a monotonic reading
	clocks := map[string]func(time.Time) time.Time{
		"monotonic": func(t time.Time) time.Time { return t },
		"wall":      func(t time.Time) time.Time { return t.Round(0) },
	}
	staleness := fleet.DefaultStaleness
	for _, anchorClock := range []string{"monotonic", "wall"} {
		for _, seenClock := range []string{"monotonic", "wall"} {
			for _, cutoffClock := range []string{"monotonic", "wall"} {
				for _, delta := range []time.Duration{-time.Nanosecond, 0, time.Nanosecond, -time.Hour, farPast} {
					name := fmt.Sprintf("anchor %s, seen %s, cutoff %s, seen-cutoff %v", anchorClock, seenClock, cutoffClock, delta)
					cutoff := clocks[cutoffClock](base.Add(time.Minute))
					seen := clocks[seenClock](base.Add(time.Minute + delta))
					if delta == farPast {
						// Far enough from the anchor that the offset saturates
						// (AddDate leaves the wall clock only).
						seen = base.AddDate(-400, 0, 0)
					}
					f := fleet.New(fleet.Options{Staleness: staleness})
					hb := func(id string) *schemas.Heartbeat {
						return &schemas.Heartbeat{WorkerID: id, GPU: "fast", TP: 1, HBMTotalBytes: 80 << 30, HBMFreeBytes: 40 << 30,
							KVBlocksTotal: 1000, KVBlocksFree: 800, BlockSize: 16,
							Models: []schemas.ModelState{{Name: "m", Dtype: "bf16", State: schemas.WeightHot}}}
					}
					f.ApplyHeartbeat(hb("anchor"), clocks[anchorClock](base)) // Idx 0: copied first, so the anchor
					f.ApplyHeartbeat(hb("w"), seen)
					d := New(testCost{}, testOpts()).Place(f, req(schemas.PriorityStandard), cutoff.Add(staleness))
					gotStale := false
					for _, rj := range d.Rejections {
						if rj.Worker.ID == "w" && rj.Reason == ReasonStale {
							gotStale = true
						}
					}
					if want := seen.Before(cutoff); gotStale != want {
						t.Errorf("%s: stale %v, want %v (LastSeen.Before(cutoff))", name, gotStale, want)
					}
				}
			}
		}
	}
}
