package loadgen

import (
	"strings"
	"testing"
	"time"
)

// The simulator's rise-fall trace is the live demo's arrivals: same count,
// offsets, tenants, classes and deadlines, prompts of the drawn lengths as
// the admitter counts them, and no TTFT/TPOT target (the demo sets none).
func TestWorkloadTrace(t *testing.T) {
	wl := RiseFallWorkload(time.Minute, 7)
	arrivals := wl.Generate()
	tr, err := wl.Trace("rise-fall")
	if err != nil {
		t.Fatal(err)
	}
	if len(tr.Requests) != len(arrivals) || len(arrivals) == 0 {
		t.Fatalf("%d trace requests for %d arrivals", len(tr.Requests), len(arrivals))
	}
	deadlines := map[string]int64{}
	for _, tm := range wl.Tenants {
		deadlines[tm.Priority] = tm.DeadlineMs
	}
	for i, q := range tr.Requests {
		a := arrivals[i]
		switch {
		case q.Arrival != a.Offset || q.Tenant != a.Tenant || q.Priority != a.Request.Priority:
			t.Fatalf("request %d: %+v, arrival %+v", i, q, a)
		case q.Deadline != time.Duration(deadlines[q.Priority])*time.Millisecond || q.Deadline == 0:
			t.Fatalf("request %d (%s): deadline %v", i, q.Priority, q.Deadline)
		case q.PromptTokens < wl.Sizes.PromptMin-2 || q.PromptTokens > wl.Sizes.PromptMax+2:
			t.Fatalf("request %d: %d prompt tokens, drawn from [%d, %d]", i, q.PromptTokens, wl.Sizes.PromptMin, wl.Sizes.PromptMax)
		case q.OutputTokens != a.Request.MaxTokens:
			t.Fatalf("request %d: %d output tokens for max_tokens %d", i, q.OutputTokens, a.Request.MaxTokens)
		case q.TTFTTarget != 0 || q.TPOTTarget != 0:
			t.Fatalf("request %d: targets %v/%v, the demo sets none", i, q.TTFTTarget, q.TPOTTarget)
		case len(q.BlockHashes) != q.PromptTokens/16:
			t.Fatalf("request %d: %d block hashes for %d tokens", i, len(q.BlockHashes), q.PromptTokens)
		}
	}
	again, err := wl.Trace("rise-fall")
	if err != nil || again.Requests[len(again.Requests)-1].Arrival != tr.Requests[len(tr.Requests)-1].Arrival {
		t.Fatalf("the same workload gave another trace (%v)", err)
	}
}

// A workload with workflows or chat prompts (cache candidates) cannot be
// replayed open-loop by the simulator: refused, with the reason.
func TestWorkloadTraceRefusesWorkflows(t *testing.T) {
	_, err := DefaultWorkload(15*time.Second, 1).Trace("default")
	if err == nil || !(strings.Contains(err.Error(), "workflow") || strings.Contains(err.Error(), "drawn sizes")) {
		t.Fatalf("the default workload became a trace (err %v)", err)
	}
}
