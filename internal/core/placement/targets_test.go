package placement

import (
	"testing"
	"time"

	"github.com/switchyard-ai/switchyard/internal/core/fleet"
	"github.com/switchyard-ai/switchyard/internal/core/perf"
	"github.com/switchyard-ai/switchyard/schemas"
)

func withTargets(r *Request, ttft, tpot time.Duration) *Request {
	r.TTFTTarget, r.TPOTTarget = ttft, tpot
	return r
}

// A placement that meets the whole deadline but misses the TTFT or the
// TPOT target is not chosen while another worker meets both; with the
// target loose, the same placement wins (so each row can fail). When no
// worker meets a target the request is still placed, relaxed, not held.
//
// testCost: "fast" prefills 2,000 tokens in 0.2 s and decodes 200 in 2 s
// at batch 1 ($6/h); "slow" in 0.5 s and 4 s ($1/h). 10,000 queued tokens
// are 1 s of queue on "fast".
func TestTargetsChooseAWorkerThatMeetsBoth(t *testing.T) {
	cases := []struct {
		name    string
		f       *fleet.Fleet
		r       *Request
		want    string
		relaxed bool
	}{
		// Critical buys the fast GPU's 1 s queue (first token at 1.2 s,
		// done at 3.2 s) over the idle slow one (0.5 s, 4.5 s) ...
		{"ttft: loose target, critical joins the fast queue", build(spec{gpu: "fast", queued: 10000}, spec{gpu: "slow"}),
			withTargets(withDeadline(req(schemas.PriorityCritical), 6*time.Second), 5*time.Second, 50*time.Millisecond), "A", false},
		// ... but not when its first token is due in 1 s: the slow idle
		// GPU meets both targets and the deadline.
		{"ttft: 1 s target, the slower free worker", build(spec{gpu: "fast", queued: 10000}, spec{gpu: "slow"}),
			withTargets(withDeadline(req(schemas.PriorityCritical), 6*time.Second), time.Second, 50*time.Millisecond), "B", false},
		{"ttft: ...wherever it is", build(spec{gpu: "slow"}, spec{gpu: "fast", queued: 10000}),
			withTargets(withDeadline(req(schemas.PriorityCritical), 6*time.Second), time.Second, 50*time.Millisecond), "A", false},
		// Batch buys price: the slow GPU (20 ms a token) ...
		{"tpot: loose target, batch goes cheap", build(spec{gpu: "slow"}, spec{gpu: "fast"}),
			withTargets(withDeadline(req(schemas.PriorityBatch), 30*time.Second), 10*time.Second, 50*time.Millisecond), "A", false},
		// ... unless its 15 ms TPOT target rules the slow decoder out,
		// though it would meet the 30 s deadline.
		{"tpot: 15 ms target, the faster decoder", build(spec{gpu: "slow"}, spec{gpu: "fast"}),
			withTargets(withDeadline(req(schemas.PriorityBatch), 30*time.Second), 10*time.Second, 15*time.Millisecond), "B", false},
		{"tpot: ...wherever it is", build(spec{gpu: "fast"}, spec{gpu: "slow"}),
			withTargets(withDeadline(req(schemas.PriorityBatch), 30*time.Second), 10*time.Second, 15*time.Millisecond), "A", false},
		// Neither GPU decodes at 5 ms a token: placed anyway, rather than
		// held for a worker that cannot come; both miss for sure, so price
		// decides.
		{"tpot: nobody meets it, placed relaxed", build(spec{gpu: "slow"}, spec{gpu: "fast"}),
			withTargets(withDeadline(req(schemas.PriorityBatch), 30*time.Second), 10*time.Second, 5*time.Millisecond), "A", true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			d := place(t, c.f, c.r, testOpts())
			if got := winner(d); got != c.want || d.Relaxed != c.relaxed {
				t.Errorf("picked %s (relaxed %v), want %s (relaxed %v); candidates:", got, d.Relaxed, c.want, c.relaxed)
				for _, cd := range d.Candidates {
					t.Logf("  %s %+v", cd.Worker.ID, cd.Terms)
				}
				for _, rj := range d.Rejections {
					t.Logf("  rejected %s: %v", rj.Worker.ID, rj.Reason)
				}
			}
		})
	}
}

// A request with no targets of its own is held to its class's
// (Options.Targets), and its TTFT counts from its submission: one that
// has already waited has less of it left.
func TestTargetsFromTheClassAndTheSubmission(t *testing.T) {
	f := build(spec{gpu: "fast", queued: 10000}, spec{gpu: "slow"})
	o := testOpts()
	o.Targets = map[string]ClassTargets{schemas.PriorityCritical: {TTFTBase: 5 * time.Second, TPOT: 50 * time.Millisecond}}
	r := withDeadline(req(schemas.PriorityCritical), 6*time.Second)
	if d := place(t, f, r, o); winner(d) != "A" || d.Terms.TTFTSlackSeconds != 5-1.2 {
		t.Fatalf("class target 5 s: picked %s, ttft slack %v", winner(d), d.Terms.TTFTSlackSeconds)
	}
	r.Submitted = now.Add(-4 * time.Second) // 1 s of the 5 left
	if d := place(t, f, r, o); winner(d) != "B" {
		t.Fatalf("submitted 4 s ago: picked %s, want the idle B", winner(d))
	}
}

// The interference axis: a long prefill onto a worker whose decodes have
// tight TPOT targets costs more than onto one whose decodes have loose
// ones, and so goes to the other; a short prefill barely moves them.
func TestInterferencePricesNeighboursTPOT(t *testing.T) {
	// Two identical slow workers with 8 sequences each, of the class
	// given: a 28 ms step at that batch, which a 50k-token prefill (12.5 s,
	// 24 ms a token over Options.NeighbourTokens) pushes past the critical
	// class's 50 ms.
	fleetOf := func(a, b string) *fleet.Fleet {
		f := fleet.New(fleet.Options{})
		for i, class := range []string{a, b} {
			f.ApplyHeartbeat(&schemas.Heartbeat{
				WorkerID: string(rune('A' + i)), GPU: "slow", TP: 1,
				HBMTotalBytes: 80 << 30, HBMFreeBytes: 40 << 30, KVBlocksTotal: 100000, KVBlocksFree: 90000, BlockSize: 16,
				Models:  []schemas.ModelState{{Name: "m", Dtype: "bf16", State: schemas.WeightHot}},
				Running: 8, KVBlocksByClass: map[string]int{class: 10000},
			}, now)
		}
		return f
	}
	long := withTargets(withPrompt(req(schemas.PriorityStandard), 50000), 30*time.Second, 100*time.Millisecond)
	short := withTargets(withPrompt(req(schemas.PriorityStandard), 500), 30*time.Second, 100*time.Millisecond)
	cases := []struct {
		name      string
		f         *fleet.Fleet
		r         *Request
		opts      func(*Options)
		want      string
		costlier  string // whose interference_usd is the higher; "" for equal
		minDeltaA float64
	}{
		{"long prefill avoids the critical decodes", fleetOf(schemas.PriorityCritical, schemas.PriorityBatch), long, nil, "B", "A", 0.01},
		{"...wherever they are", fleetOf(schemas.PriorityBatch, schemas.PriorityCritical), long, nil, "A", "B", 0.01},
		{"...unless the axis is off", fleetOf(schemas.PriorityCritical, schemas.PriorityBatch), long, disable(AxisInterference), "A", "", 0},
		{"a short prefill costs them next to nothing", fleetOf(schemas.PriorityCritical, schemas.PriorityBatch), short, nil, "", "", 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			o := testOpts()
			o.Explain = 2
			o.Targets = DefaultTargets // the neighbours' TPOT targets
			if c.opts != nil {
				c.opts(&o)
			}
			d := place(t, c.f, c.r, o)
			if len(d.Candidates) != 2 {
				t.Fatalf("%d candidates, want both", len(d.Candidates))
			}
			usd := map[string]float64{}
			for _, cd := range d.Candidates {
				usd[cd.Worker.ID] = cd.Terms.InterferenceUSD
				if cd.Worker.ID == "A" && cd.Terms.ITLDeltaSeconds < c.minDeltaA {
					t.Errorf("A: itl_delta_s %v, want at least %v", cd.Terms.ITLDeltaSeconds, c.minDeltaA)
				}
			}
			t.Logf("interference_usd A %.4f, B %.4f", usd["A"], usd["B"])
			switch c.costlier {
			case "":
				if usd["A"] > 0.01 || usd["B"] > 0.01 {
					t.Errorf("interference_usd A %v, B %v; want both under a cent", usd["A"], usd["B"])
				}
			default:
				other := map[string]string{"A": "B", "B": "A"}[c.costlier]
				if !(usd[c.costlier] > usd[other]+0.01) {
					t.Errorf("interference_usd %s %v, %s %v; want %s's the higher", c.costlier, usd[c.costlier], other, usd[other], c.costlier)
				}
			}
			if c.want != "" && winner(d) != c.want {
				t.Errorf("picked %s, want %s", winner(d), c.want)
			}
		})
	}
}

// One architecture and FP8 table, the catalog's: an FP8 worker on an L40S
// or L4 (Ada, FP8 tensor cores) is placeable and costed by the roofline;
// one on an A100 is not, whether its heartbeat names the architecture or
// only the GPU.
func TestFP8FollowsTheCatalog(t *testing.T) {
	cases := []struct {
		gpu, arch string
		want      Reason
	}{
		{"l40s", "", ReasonNone},
		{"l40s", "ada", ReasonNone},
		{"l4", "", ReasonNone},
		{"h100", "", ReasonNone},
		{"a100-80g", "", ReasonDtypeUnsupported},
		{"a100-80g", "ampere", ReasonDtypeUnsupported},
		{"l40s", "ampere", ReasonDtypeUnsupported}, // the worker's own word wins
	}
	for _, c := range cases {
		t.Run(c.gpu+"/"+c.arch, func(t *testing.T) {
			f := fleet.New(fleet.Options{})
			f.ApplyHeartbeat(&schemas.Heartbeat{
				WorkerID: "A", GPU: c.gpu, Arch: c.arch, TP: 1,
				HBMTotalBytes: 48 << 30, HBMFreeBytes: 20 << 30, KVBlocksTotal: 10000, KVBlocksFree: 9000, BlockSize: 16,
				Models: []schemas.ModelState{{Name: "llama-3.1-8b", Dtype: "fp8", State: schemas.WeightHot}},
			}, now)
			r := &Request{ID: "r", Model: "llama-3.1-8b", Dtype: "fp8", Priority: schemas.PriorityInteractive, PromptTokens: 1000, OutputTokens: 100}
			d := New(perf.NewPredictor(nil), Options{}).Place(f, r, now)
			got := ReasonNone
			if !d.OK() {
				if len(d.Rejections) != 1 {
					t.Fatalf("no decision and %d rejections", len(d.Rejections))
				}
				got = d.Rejections[0].Reason
			}
			if got != c.want {
				t.Fatalf("outcome %q, want %q", got, c.want)
			}
			if d.OK() && !(d.Terms.PrefillSeconds > 0 && d.Terms.PrefillSeconds < 1) {
				t.Fatalf("prefill_s %v: not costed in FP8", d.Terms.PrefillSeconds)
			}
		})
	}
}

// A workflow step that would miss only its share of the workflow's
// deadline, or the workflow's itself, is placed and priced, not refused;
// one that would miss its own deadline is refused as before.
func TestWorkflowSplitIsPricedNotRefused(t *testing.T) {
	cases := []struct {
		name     string
		deadline time.Duration // the workflow's
		own      time.Duration // the step's own deadline; 0 for none
		narrowed bool          // the step's Deadline is admission's split
		placed   bool
		reason   Reason
	}{
		// Step 2 of 4 on the slow GPU takes 4.5 s; the 10 s workflow
		// deadline leaves it 10 − 2 × 4.5 = 1 s: its split is missed, its
		// workflow's deadline is not.
		{"misses only the split", 10 * time.Second, 0, false, true, ReasonNone},
		{"misses only the split admission set as its deadline", 10 * time.Second, 0, true, true, ReasonNone},
		{"misses the workflow's deadline, not its own", 4 * time.Second, 0, false, true, ReasonNone},
		{"misses its own deadline", 10 * time.Second, 3 * time.Second, false, false, ReasonDeadlineUnreachable},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := withWorkflow(req(schemas.PriorityStandard), 2, 4, c.deadline)
			if c.own > 0 {
				r = withDeadline(r, c.own)
			}
			if c.narrowed {
				// Admission narrowed the step's own deadline to its split
				// (2 s); FromAdmitted keeps the workflow's as the hard one.
				r.Deadline, r.HardDeadline = now.Add(2*time.Second), r.WorkflowDeadline
			}
			d := place(t, build(spec{gpu: "slow"}), r, testOpts())
			if d.OK() != c.placed {
				t.Fatalf("placed %v, want %v (%v)", d.OK(), c.placed, d.Counts)
			}
			if c.placed {
				if d.Terms.SlackSeconds >= 0 || d.Terms.PMiss < 0.9 || d.Terms.MissUSD <= 0 {
					t.Fatalf("slack_s %v, p_miss %v, miss_usd %v: want the split's miss priced", d.Terms.SlackSeconds, d.Terms.PMiss, d.Terms.MissUSD)
				}
				return
			}
			if d.Rejections[0].Reason != c.reason {
				t.Fatalf("reason %v, want %v", d.Rejections[0].Reason, c.reason)
			}
		})
	}
}

// A short output's time per token is one stall away from its target: on
// a worker with prefill pending, its P(miss TPOT) is higher than a long
// output's at the same predicted step, and with nothing pending the two
// are alike.
func TestShortOutputsRiskTheStallPending(t *testing.T) {
	cases := []struct {
		name    string
		queued  int
		shorter bool // the short output's P(miss) is the higher
	}{
		{"prefill pending", 8000, true},
		{"nothing pending", 0, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			pmiss := func(out int) float64 {
				f := build(spec{gpu: "slow", queued: c.queued})
				r := withTargets(req(schemas.PriorityCritical), 30*time.Second, 40*time.Millisecond)
				r.OutputTokens = out
				d := place(t, f, r, testOpts())
				if !d.OK() {
					t.Fatalf("out %d: not placed (%v)", out, d.Counts)
				}
				return d.Terms.TPOTPMiss
			}
			short, long := pmiss(5), pmiss(400)
			if got := short > long+0.01; got != c.shorter {
				t.Fatalf("P(miss TPOT) short %v, long %v: want the short one higher = %v", short, long, c.shorter)
			}
		})
	}
}

// FromAdmitted keeps a workflow step's hard deadline — the client's own,
// or without one the workflow's — when admission narrowed its deadline to
// its share of the workflow's.
func TestFromAdmittedHardDeadline(t *testing.T) {
	start := now.Add(-time.Second)
	cases := []struct {
		name       string
		deadlineMs int64 // the client's own
		narrowed   time.Duration
		want       time.Time
	}{
		{"without its own, the workflow's", 0, 2 * time.Second, start.Add(30 * time.Second)},
		{"the client's own", 10000, 2 * time.Second, now.Add(10 * time.Second)},
		{"the client's own, past the workflow's", 60000, 2 * time.Second, now.Add(60 * time.Second)},
		{"not narrowed: none", 0, 40 * time.Second, time.Time{}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			a := &schemas.Admitted{
				Request:     schemas.Request{ID: "s", MaxTokens: 10, DeadlineMs: c.deadlineMs, Workflow: &schemas.Workflow{ID: "wf", Step: 2, Of: 4, DeadlineMs: 30000}},
				SubmittedAt: now, Deadline: now.Add(c.narrowed), PromptTokens: 100,
			}
			if r := FromAdmitted(a, "", start); !r.HardDeadline.Equal(c.want) {
				t.Fatalf("hard deadline %v, want %v", r.HardDeadline, c.want)
			}
		})
	}
}

// FromAdmitted carries the envelope's targets and submission time into
// placement; an envelope without them leaves the class's to apply.
func TestFromAdmittedCarriesTargets(t *testing.T) {
	cases := []struct {
		name             string
		ttftMs, tpotMs   float64
		wantTTFT, wantTP time.Duration
	}{
		{"both", 800, 60, 800 * time.Millisecond, 60 * time.Millisecond},
		{"none", 0, 0, 0, 0},
		{"fractional ms", 1500.5, 0.5, 1500500 * time.Microsecond, 500 * time.Microsecond},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			a := &schemas.Admitted{Request: schemas.Request{ID: "r", MaxTokens: 10}, SubmittedAt: now.Add(-time.Second),
				TTFTTargetMs: c.ttftMs, TPOTTargetMs: c.tpotMs}
			r := FromAdmitted(a, "", time.Time{})
			if r.TTFTTarget != c.wantTTFT || r.TPOTTarget != c.wantTP || !r.Submitted.Equal(a.SubmittedAt) {
				t.Fatalf("targets %v / %v, submitted %v; want %v / %v, %v", r.TTFTTarget, r.TPOTTarget, r.Submitted, c.wantTTFT, c.wantTP, a.SubmittedAt)
			}
		})
	}
}

// decode_s follows the KV the batch a request joins holds, not its size
// times the request's own context, where the worker mostly holds its
// prompt cached or the request is critical: a long request joining many
// shorter sequences decodes at the step those sequences' KV costs, so it
// is placed, where pricing every one of them at its own context (the
// table) read deadline_busy until its deadline passed and it was refused
// unplaceable (agentic-overload at 1.83×: a critical step of 15,616
// tokens, 14,432 cached, 251 out, joining 62 sequences on an H100, 15.06 s
// to its deadline, predicted at 73 ms a token; Mooncake conversation on
// 8 H100 at 4×: critical prompts of 26k–113k tokens that every baseline
// served). A batch that does hold that much KV still holds it back, and a
// lower class without the cached prefix is held on the table. A placed
// case's decode_s is checked against the step model at the batch's own KV.
func TestDecodeReadsTheKVTheBatchHolds(t *testing.T) {
	const prompt, cachedBlocks, out, running = 15616, 902, 251, 60
	cases := []struct {
		name        string
		total, free int // KV blocks of 16 tokens
		cached      bool
		priority    string
		placed      bool
		reason      Reason
	}{
		{"cached; the batch holds 240k tokens", 30000, 15000, true, schemas.PriorityCritical, true, ReasonNone},
		{"cached; the batch holds a near-full cache, 448k tokens", 30000, 2000, true, schemas.PriorityCritical, true, ReasonNone},
		{"interactive, cached; the batch holds 240k tokens", 30000, 15000, true, schemas.PriorityInteractive, true, ReasonNone},
		{"cached; the batch holds 61 × 15.7k tokens", 61000, 1000, true, schemas.PriorityCritical, false, ReasonDeadlineBusy},
		{"critical, not cached; the batch holds 240k tokens", 30000, 15000, false, schemas.PriorityCritical, true, ReasonNone},
		{"critical, not cached; the batch holds 61 × 15.7k tokens", 61000, 1000, false, schemas.PriorityCritical, false, ReasonDeadlineBusy},
		{"interactive, not cached; the batch holds 240k tokens", 30000, 15000, false, schemas.PriorityInteractive, false, ReasonDeadlineBusy},
	}
	rep, err := perf.NewReplica(nil, "h100", "llama-3.1-8b", "bf16", 1)
	if err != nil {
		t.Fatal(err)
	}
	hashes := make([]uint64, prompt/16)
	for i := range hashes {
		hashes[i] = uint64(7000 + i)
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			f := fleet.New(fleet.Options{})
			f.ApplyHeartbeat(&schemas.Heartbeat{
				WorkerID: "A", GPU: "h100", TP: 1,
				HBMTotalBytes: 80 << 30, HBMFreeBytes: 2 << 30, KVBlocksTotal: c.total, KVBlocksFree: c.free, BlockSize: 16,
				Models: []schemas.ModelState{{Name: "llama-3.1-8b", Dtype: "bf16", State: schemas.WeightHot}}, Running: running,
			}, now)
			if c.cached {
				f.ApplyKV(&schemas.KVEvent{WorkerID: "A", Seq: 1, Kind: schemas.KVStored, Hashes: hashes[:cachedBlocks]}, now)
			}
			r := &Request{ID: "r", Model: "llama-3.1-8b", Dtype: "bf16", Priority: c.priority,
				PromptTokens: prompt, OutputTokens: out, BlockHashes: hashes, Deadline: now.Add(15060 * time.Millisecond)}
			// Headroom off: the case is the decode's, not whether the
			// cache takes the request's blocks.
			d := New(perf.NewPredictor(nil), Options{Disabled: map[string]bool{AxisHeadroom: true}}).Place(f, r, now)
			if d.OK() != c.placed {
				t.Fatalf("placed %v, want %v (%v)", d.OK(), c.placed, d.Counts)
			}
			if !c.placed {
				if d.Rejections[0].Reason != c.reason {
					t.Fatalf("reason %v, want %v", d.Rejections[0].Reason, c.reason)
				}
				return
			}
			if want := map[bool]int{true: cachedBlocks * 16}[c.cached]; d.Terms.CachedTokens != want {
				t.Fatalf("cached_tokens %d, want %d", d.Terms.CachedTokens, want)
			}
			held := (c.total - c.free) * 16
			step := rep.DecodeStepSeconds(running+1, (held+prompt+out)/(running+1))
			if got := d.Terms.DecodeSeconds / out; got < 0.9*step || got > 1.1*step {
				t.Fatalf("decode_s %.2f s: %.1f ms a token, the step model at the batch's KV says %.1f ms", d.Terms.DecodeSeconds, got*1e3, step*1e3)
			}
		})
	}
}
