package sim

import (
	"encoding/json"
	"path/filepath"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/switchyard-ai/switchyard/internal/core/perf"
	"github.com/switchyard-ai/switchyard/internal/core/routing"
	"github.com/switchyard-ai/switchyard/loadgen/traces"
)

// roles is two prefill and two decode H100s over InfiniBand (the role
// pools' default link).
var roles = Config{GPUs: []GPUSpec{{GPU: "h100", Count: 2, Role: "prefill"}, {GPU: "h100", Count: 2, Role: "decode"}}, Model: "llama-3.1-8b"}

// TestSplitLegsNothingLost: on a fleet of prefill and decode roles every
// request runs as two legs, and killing a prefill and a decode worker
// mid-run loses nothing: each request resolves once, the lost legs are
// re-placed under the retry budget, and the decode legs waited a transfer.
func TestSplitLegsNothingLost(t *testing.T) {
	// Three of each, so the two that are left of a kind can carry the
	// load: what is measured is lost work, not lost capacity.
	fleet := Config{GPUs: []GPUSpec{{GPU: "h100", Count: 3, Role: "prefill"}, {GPU: "h100", Count: 3, Role: "decode"}}, Model: "llama-3.1-8b"}
	tr := mooncakeSlice(t, 200)
	for _, policy := range []string{"sglang-pd", "switchyard"} {
		t.Run(policy, func(t *testing.T) {
			cfg := fleet
			cfg.Faults = []Fault{{At: 10 * time.Second, Worker: "h100-00", Kind: FaultDie}, {At: 20 * time.Second, Worker: "h100-03", Kind: FaultDie}}
			outcomes := map[string]int{}
			cfg.OnResolve = func(o Outcome) { outcomes[o.Request.ID]++ }
			res := run(t, cfg, tr, policy)
			for id, n := range outcomes {
				if n != 1 {
					t.Errorf("%s resolved %d times", id, n)
				}
			}
			if len(outcomes) != res.Requests || res.Finished+res.Failed+res.Shed != res.Requests {
				t.Fatalf("lost requests: %d outcomes for %d requests, %d finished, %d failed, %d shed", len(outcomes), res.Requests, res.Finished, res.Failed, res.Shed)
			}
			if res.Split != res.Finished || res.TransferP99ms <= 0 {
				t.Fatalf("%d of %d finished requests split, transfer p99 %.2f ms: on a fleet of roles every one runs as two legs", res.Split, res.Finished, res.TransferP99ms)
			}
			healthy := run(t, fleet, tr, policy)
			rl := res.Reliability
			if rl.Retried == 0 || res.Failed-healthy.Failed > rl.RetryRefused+res.Requests/50 {
				t.Fatalf("two workers killed: %d retried, %d refused, %d of %d failed (%d without the kills); the lost legs should be re-placed and mostly finish",
					rl.Retried, rl.RetryRefused, res.Failed, res.Requests, healthy.Failed)
			}
			t.Logf("%d requests, %d split, transfer p99 %.2f ms, %d failed (%d without the kills), %+v", res.Requests, res.Split, res.TransferP99ms, res.Failed, healthy.Failed, rl)
		})
	}
}

// TestSplitSameActionsAsBareCore: a run with two legs per request, faults
// included, journals inputs that a bare core answers identically — the
// handoffs are inputs like any other, so replay reproduces a split run.
func TestSplitSameActionsAsBareCore(t *testing.T) {
	tr := mooncakeSlice(t, 150).Scale(2)
	cfg := roles
	cfg.Faults = []Fault{{At: 10 * time.Second, Worker: "h100-01", Kind: FaultDie}}
	var inputs [][]byte
	var want [][]string
	handoffs := 0
	cfg.OnInput = func(in routing.Input, acts []routing.Action) {
		b, err := json.Marshal(in)
		if err != nil {
			t.Fatal(err)
		}
		if in.Kind == routing.InHandoff {
			handoffs++
		}
		inputs = append(inputs, b)
		want = append(want, summarize(acts))
	}
	run(t, cfg, tr, "sglang-pd")
	pol, err := NewPolicy("sglang-pd", perf.NewPredictor(nil))
	if err != nil {
		t.Fatal(err)
	}
	bare := routing.New(cfg.RouterConfig(pol.Policy, perf.NewPredictor(nil)))
	for k, b := range inputs {
		var in routing.Input
		if err := json.Unmarshal(b, &in); err != nil {
			t.Fatal(err)
		}
		if got := summarize(bare.Apply(in, nil)); !slices.Equal(got, want[k]) {
			t.Fatalf("input %d (%s): the simulator's core answered %v, a bare core %v", k, in.Kind, want[k], got)
		}
	}
	if handoffs < len(tr.Requests)/2 {
		t.Fatalf("%d handoffs for %d requests", handoffs, len(tr.Requests))
	}
}

// TestNoLinkNoSplit: workers without a link never take a split leg, so a
// fleet configured as before runs as before.
func TestNoLinkNoSplit(t *testing.T) {
	res := run(t, small, mooncakeSlice(t, 150).Scale(2), "switchyard")
	if res.Split != 0 {
		t.Fatalf("%d requests split on a fleet without links", res.Split)
	}
}

// TestAzureCodeNeverSplits: short-prompt traffic (Azure code, prompts up to
// 7.4k tokens, one step's prefill) on a fleet that could split runs
// exactly as on one that cannot: no request splits, and every figure is
// the same.
func TestAzureCodeNeverSplits(t *testing.T) {
	tr, err := traces.ReadAzureFile(filepath.Join("..", "..", "..", "testdata", "traces", "azure_llm_2023_code.csv"), traces.ReadOptions{Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	tr = tr.Scale(4).Window(2 * time.Minute)
	fleet := Config{GPUs: []GPUSpec{{GPU: "h100", Count: 2}, {GPU: "a100-80g", Count: 2}}, Model: "llama-3.1-8b"}
	linked := fleet
	linked.Link = "ib-ndr"
	a, b := run(t, fleet, tr, "switchyard"), run(t, linked, tr, "switchyard")
	if b.Split != 0 {
		t.Fatalf("%d Azure code requests split", b.Split)
	}
	a.WallSeconds, b.WallSeconds = 0, 0
	if !reflect.DeepEqual(a, b) {
		t.Fatalf("figures moved with links on the fleet:\n without %+v\n with    %+v", a, b)
	}
	t.Logf("%d requests, attainment %.4f either way", a.Requests, a.SLOAttainment)
}
