package routing

import (
	"testing"
	"time"

	"github.com/switchyard-ai/switchyard/schemas"
)

// A critical request whose first token the busy H100 cannot give in time
// is dispatched at once to the idle A100 that meets both its targets, not
// held for the faster GPU; with a TTFT target the H100's queue meets, the
// H100 (the sooner finish) wins. The targets travel from the admitted
// envelope (ttft_target_ms, tpot_target_ms) into placement.
func TestCoreHighClassTakesASlowerFreeWorker(t *testing.T) {
	cases := []struct {
		name   string
		ttftMs float64
		want   string
	}{
		{"1 s TTFT: the idle A100", 1000, "a100"},
		{"5 s TTFT: the H100's queue will do", 5000, "h100"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s := newSim(t, Config{}) // the Switchyard placer over the roofline
			h100 := heartbeat("h100", 1)
			// 60,000 critical prompt tokens queued: about 1.5 s of prefill ahead.
			h100.QueuedTokens, h100.QueuedTokensByClass = 60000, map[string]int{schemas.PriorityCritical: 60000}
			a100 := heartbeat("a100", 1)
			a100.Pool, a100.GPU, a100.Arch, a100.PricePerHour = "a100", "a100-80g", "ampere", 1.8
			s.apply(Input{Kind: InHeartbeat, Heartbeat: h100})
			s.apply(Input{Kind: InHeartbeat, Heartbeat: a100})
			a := admitted("r1", "acme", 30*time.Second, 500, 1000, s.now)
			a.Priority, a.Request.Priority = schemas.PriorityCritical, schemas.PriorityCritical
			a.TTFTTargetMs, a.TPOTTargetMs = c.ttftMs, 50
			d := dispatchOf(t, s.admit(a), "r1")
			if d.Worker != c.want {
				t.Fatalf("dispatched to %s, want %s (terms %+v)", d.Worker, c.want, d.Terms)
			}
			if d.Worker == "a100" && !(d.Terms.TTFTSeconds < 1 && d.Terms.TPOTSeconds < 0.05) {
				t.Fatalf("on the A100: ttft_s %v, tpot_s %v: want both targets met", d.Terms.TTFTSeconds, d.Terms.TPOTSeconds)
			}
		})
	}
}
