package placement

import (
	"math"
	"testing"
	"time"

	"github.com/switchyard-ai/switchyard/internal/core/fleet"
	"github.com/switchyard-ai/switchyard/schemas"
)

// testCost is linear in tokens with per-GPU speeds, so expected decisions
// can be worked out by hand: "fast" runs 2000+200 tokens in 0.2+2 s at
// $6/h, "slow" in 0.5+4 s at $1/h.
type testCost struct{}

var testGPUs = map[string]struct{ prefill, decode, price float64 }{
	"fast": {10000, 100, 6},
	"slow": {4000, 50, 1},
}

func (testCost) PrefillSeconds(gpu, _, _ string, _, newTokens, _ int) float64 {
	g, ok := testGPUs[gpu]
	if !ok {
		return math.Inf(1)
	}
	return float64(newTokens) / g.prefill
}

func (testCost) DecodeSeconds(gpu, _, _ string, _, out, batch, _ int) float64 {
	g, ok := testGPUs[gpu]
	if !ok {
		return math.Inf(1)
	}
	return float64(out) / g.decode * (1 + 0.05*float64(batch-1))
}

func (testCost) LoadSeconds(gpu, _, _ string, _ int, from string) float64 {
	switch from {
	case schemas.WeightHot:
		return 0
	case schemas.WeightSleeping:
		return 2
	}
	return 20
}

func (testCost) PricePerHour(gpu string, _ int) float64 {
	if g, ok := testGPUs[gpu]; ok {
		return g.price
	}
	return math.Inf(1)
}

var now = time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)

type spec struct {
	gpu, arch         string
	state             string // model residency; "" = hot
	kvFree, kvTotal   int
	running, queued   int
	waiting, maxBatch int
	hbmTotal          uint64
	draining          bool
	seenAgo           time.Duration
}

func build(specs ...spec) *fleet.Fleet {
	f := fleet.New(fleet.Options{})
	for i, s := range specs {
		if s.kvTotal == 0 {
			s.kvTotal = 1000
		}
		if s.kvFree == 0 {
			s.kvFree = 800
		}
		if s.hbmTotal == 0 {
			s.hbmTotal = 80 << 30
		}
		st := s.state
		if st == "" {
			st = schemas.WeightHot
		}
		var models []schemas.ModelState
		if st != schemas.WeightAbsent {
			models = []schemas.ModelState{{Name: "m", Dtype: "bf16", State: st}}
		}
		f.ApplyHeartbeat(&schemas.Heartbeat{
			WorkerID: string(rune('A' + i)), GPU: s.gpu, Arch: s.arch, TP: 1,
			HBMTotalBytes: s.hbmTotal, HBMFreeBytes: 40 << 30,
			KVBlocksTotal: s.kvTotal, KVBlocksFree: s.kvFree, BlockSize: 16,
			Models: models, Running: s.running, QueuedTokens: s.queued, Draining: s.draining,
			Waiting: s.waiting, MaxBatch: s.maxBatch,
		}, now.Add(-s.seenAgo))
	}
	return f
}

func req(prio string) *Request {
	return &Request{ID: "r", Model: "m", Dtype: "bf16", Priority: prio, PromptTokens: 2000, OutputTokens: 200}
}

// testOpts pins class values so the hand-worked numbers above hold, and
// holds requests to no class targets: a test of TTFT and TPOT gives its
// request its own.
func testOpts() Options {
	return Options{
		Targets: map[string]ClassTargets{},
		ValueOfTime: map[string]float64{
			schemas.PriorityCritical: 0.05, schemas.PriorityInteractive: 0.01,
			schemas.PriorityStandard: 0.002, schemas.PriorityBatch: 0.0004,
		},
	}
}

func place(t *testing.T, f *fleet.Fleet, r *Request, opts Options) *Decision {
	t.Helper()
	return New(testCost{}, opts).Place(f, r, now)
}

func winner(d *Decision) string {
	if d.Worker == nil {
		return "-"
	}
	return d.Worker.ID
}

// Each axis: a base case and the same case with only that axis's input
// changed; the decision must move the way the axis says it should.
func TestEachAxisChangesTheDecision(t *testing.T) {
	hashes := make([]uint64, 100)
	for i := range hashes {
		hashes[i] = uint64(1000 + i)
	}
	hashes200 := make([]uint64, 200)
	for i := range hashes200 {
		hashes200[i] = uint64(1000 + i)
	}
	withPrefix := func(f *fleet.Fleet, id string) *fleet.Fleet {
		f.ApplyKV(&schemas.KVEvent{WorkerID: id, Seq: 1, Kind: schemas.KVStored, Hashes: hashes200}, now)
		return f
	}
	cases := []struct {
		name string
		f    *fleet.Fleet
		r    *Request
		opts func(*Options)
		want string
	}{
		{"gpu: interactive takes the faster GPU", build(spec{gpu: "slow"}, spec{gpu: "fast"}), req(schemas.PriorityInteractive), nil, "B"},
		{"gpu: ...wherever it is", build(spec{gpu: "fast"}, spec{gpu: "slow"}), req(schemas.PriorityInteractive), nil, "A"},

		{"headroom: prefer the emptier cache", build(spec{gpu: "fast", kvFree: 150}, spec{gpu: "fast", kvFree: 800}), req(schemas.PriorityCritical), nil, "B"},
		{"headroom: ...swapped", build(spec{gpu: "fast", kvFree: 800}, spec{gpu: "fast", kvFree: 150}), req(schemas.PriorityCritical), nil, "A"},

		{"kv: prefix holder wins", withPrefix(build(spec{gpu: "fast"}, spec{gpu: "fast"}), "B"), withHashes(req(schemas.PriorityStandard), hashes), nil, "B"},
		{"kv: ...moved", withPrefix(build(spec{gpu: "fast"}, spec{gpu: "fast"}), "A"), withHashes(req(schemas.PriorityStandard), hashes), nil, "A"},

		// Only the prefix moves between these two: A runs 8 sequences, B 4.
		// The prefix saves A 0.32 s of prefill; B's 0.4 s uncached prefill
		// would stall its 4 sequences (delay_s 1.6 s), which outweighs A's
		// slower decode at the bigger batch.
		{"kv: a busier prefix holder wins", withPrefix(build(spec{gpu: "fast", running: 8}, spec{gpu: "fast", running: 4}), "A"), withHashes(withPrompt(req(schemas.PriorityStandard), 4000), hashes200), nil, "A"},
		{"kv: ...and loses without the prefix", build(spec{gpu: "fast", running: 8}, spec{gpu: "fast", running: 4}), withHashes(withPrompt(req(schemas.PriorityStandard), 4000), hashes200), nil, "B"},

		{"warmth: hot beats cold", build(spec{gpu: "fast", state: schemas.WeightCold}, spec{gpu: "fast"}), req(schemas.PriorityStandard), nil, "B"},
		{"warmth: ...swapped", build(spec{gpu: "fast"}, spec{gpu: "fast", state: schemas.WeightCold}), req(schemas.PriorityStandard), nil, "A"},
		{"warmth: sleeping beats cold", build(spec{gpu: "fast", state: schemas.WeightCold}, spec{gpu: "fast", state: schemas.WeightSleeping}), req(schemas.PriorityStandard), nil, "B"},

		{"priority: interactive buys speed", build(spec{gpu: "slow"}, spec{gpu: "fast"}), req(schemas.PriorityInteractive), nil, "B"},
		{"priority: critical joins the fast GPU's 1 s queue", build(spec{gpu: "fast", queued: 10000}, spec{gpu: "slow"}), req(schemas.PriorityCritical), nil, "A"},
		{"priority: standard leaves that queue to higher classes", build(spec{gpu: "fast", queued: 10000}, spec{gpu: "slow"}), req(schemas.PriorityStandard), nil, "B"},
		{"priority: batch buys price", build(spec{gpu: "slow"}, spec{gpu: "fast"}), req(schemas.PriorityBatch), nil, "A"},

		{"latency: no deadline, batch goes cheap", build(spec{gpu: "slow"}, spec{gpu: "fast"}), req(schemas.PriorityBatch), nil, "A"},
		{"latency: a 3 s deadline rules the slow GPU out", build(spec{gpu: "slow"}, spec{gpu: "fast"}), withDeadline(req(schemas.PriorityBatch), 3*time.Second), nil, "B"},

		{"workflow: first step of ten goes cheap", build(spec{gpu: "slow"}, spec{gpu: "fast"}), withWorkflow(req(schemas.PriorityBatch), 1, 10, 0), nil, "A"},
		{"workflow: last step of ten buys speed", build(spec{gpu: "slow"}, spec{gpu: "fast"}), withWorkflow(req(schemas.PriorityBatch), 10, 10, 0), nil, "B"},
		{"workflow: no workflow deadline, step 2 of 4 goes cheap", build(spec{gpu: "slow"}, spec{gpu: "fast"}), withWorkflow(req(schemas.PriorityBatch), 2, 4, 0), nil, "A"},
		{"workflow: a 12 s workflow deadline leaves no room for 2 more slow steps", build(spec{gpu: "slow"}, spec{gpu: "fast"}), withWorkflow(req(schemas.PriorityBatch), 2, 4, 12*time.Second), nil, "B"},
		{"workflow: ...unless the axis is off", build(spec{gpu: "slow"}, spec{gpu: "fast"}), withWorkflow(req(schemas.PriorityBatch), 2, 4, 12*time.Second), disable(AxisWorkflow), "A"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			o := testOpts()
			if c.opts != nil {
				c.opts(&o)
			}
			d := place(t, c.f, c.r, o)
			if got := winner(d); got != c.want {
				t.Errorf("picked %s, want %s; candidates:", got, c.want)
				for _, cd := range d.Candidates {
					t.Logf("  %s %+v", cd.Worker.ID, cd.Terms)
				}
			}
		})
	}
}

func withHashes(r *Request, h []uint64) *Request { r.BlockHashes = h; return r }

func withPrompt(r *Request, n int) *Request { r.PromptTokens = n; return r }

func withDeadline(r *Request, d time.Duration) *Request { r.Deadline = now.Add(d); return r }

func withWorkflow(r *Request, step, of int, deadline time.Duration) *Request {
	r.Workflow = &schemas.Workflow{ID: "wf", Step: step, Of: of}
	if deadline > 0 {
		r.WorkflowDeadline = now.Add(deadline)
	}
	return r
}

func disable(axes ...string) func(*Options) {
	return func(o *Options) {
		o.Disabled = map[string]bool{}
		for _, a := range axes {
			o.Disabled[a] = true
		}
	}
}

func TestFilterReasons(t *testing.T) {
	weights := func(o *Options) { o.WeightBytes = func(string, string) uint64 { return 100 << 30 } }
	cases := []struct {
		name         string
		s            spec
		r            *Request
		opts         func(*Options)
		want         Reason
		unresolvable bool
	}{
		{"fp8 on ampere", spec{gpu: "fast", arch: "ampere"}, withDtype(req(schemas.PriorityStandard), "fp8"), nil, ReasonDtypeUnsupported, true},
		{"fp8 arch from the GPU name", spec{gpu: "a100"}, withDtype(req(schemas.PriorityStandard), "fp8"), nil, ReasonDtypeUnsupported, true},
		{"model larger than HBM", spec{gpu: "fast", state: schemas.WeightAbsent}, req(schemas.PriorityStandard), weights, ReasonModelTooLarge, true},
		{"GPU the cost model cannot run", spec{gpu: "tpu"}, req(schemas.PriorityStandard), nil, ReasonCannotRun, true},
		{"deadline missed even idle", spec{gpu: "slow"}, withDeadline(req(schemas.PriorityStandard), 3*time.Second), nil, ReasonDeadlineUnreachable, true},
		// (Missing only the workflow's deadline is priced, not refused:
		// TestWorkflowSplitIsPricedNotRefused.)
		{"a workflow's last step misses its own deadline", spec{gpu: "slow"}, withDeadline(withWorkflow(req(schemas.PriorityStandard), 4, 4, 3*time.Second), 3*time.Second), nil, ReasonDeadlineUnreachable, true},
		{"deadline missed because of the queue", spec{gpu: "fast", queued: 20000}, withDeadline(req(schemas.PriorityCritical), 3*time.Second), nil, ReasonDeadlineBusy, false},
		{"standard may not join a long queue", spec{gpu: "fast", queued: 20000}, req(schemas.PriorityStandard), nil, ReasonPriorityReserve, false},
		{"deadline missed because of a cold load", spec{gpu: "fast", state: schemas.WeightCold}, withDeadline(req(schemas.PriorityStandard), 3*time.Second), nil, ReasonDeadlineBusy, false},
		{"stale", spec{gpu: "fast", seenAgo: 4 * time.Second}, req(schemas.PriorityStandard), nil, ReasonStale, false},
		{"draining", spec{gpu: "fast", draining: true}, req(schemas.PriorityStandard), nil, ReasonDraining, false},
		{"would preempt", spec{gpu: "fast", kvFree: 100}, req(schemas.PriorityCritical), nil, ReasonWouldPreempt, false},
		{"no HBM free to load", spec{gpu: "fast", state: schemas.WeightCold, hbmTotal: 200 << 30}, req(schemas.PriorityStandard), weights, ReasonHBMBusy, false},
		{"batch may not fill the last headroom", spec{gpu: "fast", kvFree: 200}, req(schemas.PriorityBatch), nil, ReasonPriorityReserve, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			o := testOpts()
			if c.opts != nil {
				c.opts(&o)
			}
			d := place(t, build(c.s), c.r, o)
			if d.OK() || len(d.Rejections) != 1 {
				t.Fatalf("want one rejection, got worker %s and %d rejections", winner(d), len(d.Rejections))
			}
			if got := d.Rejections[0].Reason; got != c.want || d.Counts[c.want] != 1 {
				t.Fatalf("reason %v, want %v", got, c.want)
			}
			if d.Unresolvable != c.unresolvable || c.want.Unresolvable() != c.unresolvable {
				t.Fatalf("unresolvable = %v, want %v", d.Unresolvable, c.unresolvable)
			}
		})
	}
	// A hot resident model proves it fits, whatever the size table says.
	o := testOpts()
	weights(&o)
	if d := place(t, build(spec{gpu: "fast"}), req(schemas.PriorityStandard), o); !d.OK() {
		t.Fatalf("hot model rejected: %v", d.Rejections[0].Reason)
	}
	// One busy rejection among unresolvable ones means waiting may help.
	d := place(t, build(spec{gpu: "tpu"}, spec{gpu: "fast", draining: true}), req(schemas.PriorityStandard), testOpts())
	if d.OK() || d.Unresolvable {
		t.Fatal("mixed rejections must not be unresolvable")
	}
	// Retries avoid excluded workers.
	r := req(schemas.PriorityStandard)
	r.Exclude = []string{"A"}
	d = place(t, build(spec{gpu: "fast"}, spec{gpu: "slow"}), r, testOpts())
	if winner(d) != "B" || d.Counts[ReasonExcluded] != 1 {
		t.Fatalf("exclusion ignored: picked %s", winner(d))
	}
}

func withDtype(r *Request, dt string) *Request { r.Dtype = dt; return r }

func TestBookingIsSeenBeforeTheNextHeartbeat(t *testing.T) {
	f := build(spec{gpu: "fast", running: 1}, spec{gpu: "fast"})
	p := New(testCost{}, testOpts())
	r := req(schemas.PriorityCritical)
	if d := p.Place(f, r, now); winner(d) != "B" {
		t.Fatalf("picked %s, want the idle B", winner(d))
	}
	if err := f.Reserve("B", "other", schemas.PriorityBatch, 0, 0, 700, now); err != nil {
		t.Fatal(err)
	}
	d := p.Place(f, r, now)
	if winner(d) != "A" || d.Counts[ReasonWouldPreempt] != 1 {
		t.Fatalf("booking ignored: picked %s", winner(d))
	}
}

func TestBreakdownFollowsTheFormula(t *testing.T) {
	hashes := make([]uint64, 50)
	for i := range hashes {
		hashes[i] = uint64(i + 1)
	}
	f := build(spec{gpu: "fast", running: 3, queued: 1000})
	f.ApplyKV(&schemas.KVEvent{WorkerID: "A", Seq: 1, Kind: schemas.KVStored, Hashes: hashes}, now)
	r := withDeadline(withHashes(req(schemas.PriorityInteractive), hashes), 3*time.Second)
	d := place(t, f, r, testOpts())
	tm := d.Terms
	near := func(a, b float64) bool { return math.Abs(a-b) < 1e-9 }
	if tm.CachedTokens != 800 || !near(tm.PrefillSeconds, 0.12) || !near(tm.SavedSeconds, 0.08) {
		t.Fatalf("kv terms: %+v", tm)
	}
	if !near(tm.QueueSeconds, 0.1) || !near(tm.DecodeSeconds, 2*1.15) {
		t.Fatalf("queue/decode: %+v", tm)
	}
	if tm.Blocks != (2200+15)/16-50 {
		t.Fatalf("blocks %d", tm.Blocks)
	}
	// Three running sequences each wait out this request's 0.12 s prefill.
	if !near(tm.DelaySeconds, 3*0.12) {
		t.Fatalf("delay %v", tm.DelaySeconds)
	}
	want := tm.CompletionSeconds*tm.WorkflowFactor*tm.ValueOfTime + tm.DelaySeconds*tm.DelayValue + tm.GPUUSD + tm.MissUSD
	if tm.DelayValue != tm.ValueOfTime {
		t.Fatalf("an interactive request values others' seconds at its own rate: %+v", tm)
	}
	if !near(tm.TotalUSD, want) || !near(tm.CompletionSeconds, 0.1+0.12+2.3) || tm.PMiss <= 0 || tm.PMiss > 0.5 {
		t.Fatalf("formula: %+v", tm)
	}
	if !near(tm.GPUUSD, (0.12+2.3/4)*6/3600) {
		t.Fatalf("gpu usd %v", tm.GPUUSD)
	}
}

func TestAblationsBlindTheAxis(t *testing.T) {
	hashes := []uint64{1, 2, 3, 4, 5, 6, 7, 8}
	f := build(spec{gpu: "fast"}, spec{gpu: "fast", state: schemas.WeightCold})
	f.ApplyKV(&schemas.KVEvent{WorkerID: "A", Seq: 1, Kind: schemas.KVStored, Hashes: hashes}, now)
	r := withHashes(req(schemas.PriorityStandard), hashes)
	all := New(testCost{}, testOpts())
	if all.Name() != "switchyard" {
		t.Fatal(all.Name())
	}
	d := all.Place(f, r, now)
	if d.Terms.CachedTokens != 128 {
		t.Fatalf("cached %d", d.Terms.CachedTokens)
	}
	o := testOpts()
	disable(AxisKV, AxisWarmth)(&o)
	blind := New(testCost{}, o)
	if blind.Name() == "switchyard" {
		t.Fatal("an ablated placer must not claim the full name")
	}
	d = blind.Place(f, r, now)
	for _, c := range d.Candidates {
		if c.Terms.CachedTokens != 0 || c.Terms.LoadSeconds != 0 {
			t.Fatalf("disabled axes still seen: %+v", c.Terms)
		}
	}
	// The GPU axis off: both GPUs cost as the reference, so ties go by load.
	o = testOpts()
	disable(AxisGPU)(&o)
	o.ReferenceGPU = "slow"
	d = New(testCost{}, o).Place(build(spec{gpu: "slow"}, spec{gpu: "fast"}), req(schemas.PriorityInteractive), now)
	if winner(d) != "A" || d.Candidates[0].Terms.TotalUSD != d.Candidates[1].Terms.TotalUSD {
		t.Fatal("GPU-blind placer still tells GPUs apart")
	}
}

func TestPlaceDoesNotAllocate(t *testing.T) {
	specs := make([]spec, 64)
	for i := range specs {
		specs[i] = spec{gpu: []string{"fast", "slow"}[i%2], running: i % 7}
	}
	f := build(specs...)
	hashes := []uint64{1, 2, 3}
	f.ApplyKV(&schemas.KVEvent{WorkerID: "C", Seq: 1, Kind: schemas.KVStored, Hashes: hashes}, now)
	p := New(testCost{}, testOpts())
	r := withDeadline(withHashes(req(schemas.PriorityInteractive), hashes), 10*time.Second)
	r.Exclude = []string{"A"}
	p.Place(f, r, now) // warm the scratch
	if a := testing.AllocsPerRun(100, func() { p.Place(f, r, now) }); a != 0 {
		t.Fatalf("Place allocates %v per call", a)
	}
}

// The router books only the prompt tokens the worker has to prefill, and
// the queue term counts them.
func TestBookingIsNetOfCache(t *testing.T) {
	cases := []struct {
		queued  int
		seenAgo time.Duration
		want    float64
	}{
		{10000, 0, 1},
		{10000, 400 * time.Millisecond, 1},
		{0, 0, 0},
	}
	for _, c := range cases {
		d := place(t, build(spec{gpu: "fast", queued: c.queued, seenAgo: c.seenAgo}), req(schemas.PriorityCritical), testOpts())
		if got := d.Terms.QueueSeconds; math.Abs(got-c.want) > 1e-9 {
			t.Errorf("queued %d seen %v ago: queue_s %v, want %v", c.queued, c.seenAgo, got, c.want)
		}
	}
	hashes := make([]uint64, 100)
	for i := range hashes {
		hashes[i] = uint64(i + 1)
	}
	f := build(spec{gpu: "fast"})
	f.ApplyKV(&schemas.KVEvent{WorkerID: "A", Seq: 1, Kind: schemas.KVStored, Hashes: hashes}, now)
	d := place(t, f, withHashes(req(schemas.PriorityCritical), hashes), testOpts())
	prefill, out, blocks := d.Booking(2000, 200)
	if prefill != 2000-1600 || out != 200 || blocks != d.Terms.Blocks || blocks != (2200+15)/16-100 {
		t.Fatalf("booking %d %d %d (terms %+v)", prefill, out, blocks, d.Terms)
	}
	if err := f.Reserve("A", "x", schemas.PriorityCritical, prefill, out, blocks, now); err != nil {
		t.Fatal(err)
	}
	// The booked 400 tokens are 0.04 s of queue for the next request.
	if d := place(t, f, req(schemas.PriorityCritical), testOpts()); math.Abs(d.Terms.QueueSeconds-0.04) > 1e-9 {
		t.Fatalf("queue after booking %v", d.Terms.QueueSeconds)
	}
}

// A critical request's own seconds are worth its class value, the seconds
// it costs others at most the interactive value.
func TestDelayIsValuedAtMostInteractive(t *testing.T) {
	for _, c := range []struct {
		prio string
		want float64
	}{{schemas.PriorityCritical, 0.01}, {schemas.PriorityInteractive, 0.01}, {schemas.PriorityBatch, 0.0004}} {
		d := place(t, build(spec{gpu: "fast", running: 2}), req(c.prio), testOpts())
		if d.Terms.DelayValue != c.want || d.Terms.DelaySeconds != 2*0.2 {
			t.Errorf("%s: delay %v s at %v $/s, want 0.4 s at %v", c.prio, d.Terms.DelaySeconds, d.Terms.DelayValue, c.want)
		}
	}
}

// classQueued is one fast worker whose heartbeat splits its queue by class
// (critical, interactive, standard, batch), with a batch booking on top.
func classQueued(byRank [4]int, bookedBatch int) *fleet.Fleet {
	f := fleet.New(fleet.Options{})
	hb := &schemas.Heartbeat{
		WorkerID: "A", GPU: "fast", TP: 1, HBMTotalBytes: 80 << 30, HBMFreeBytes: 40 << 30,
		KVBlocksTotal: 1000, KVBlocksFree: 800, BlockSize: 16,
		Models:              []schemas.ModelState{{Name: "m", Dtype: "bf16", State: schemas.WeightHot}},
		QueuedTokensByClass: map[string]int{},
	}
	for rank, n := range byRank {
		hb.QueuedTokens += n
		hb.QueuedTokensByClass[schemas.Priorities[rank]] = n
	}
	f.ApplyHeartbeat(hb, now)
	if bookedBatch > 0 {
		if err := f.Reserve("A", "b", schemas.PriorityBatch, bookedBatch, 10, 10, now); err != nil {
			panic(err)
		}
	}
	return f
}

// The engine prefills in class order, so a request's predicted queue is
// the queued and booked prompt tokens of its own class and higher: lower
// classes' tokens leave it unchanged, higher classes' move it.
func TestQueueCountsOwnClassAndHigher(t *testing.T) {
	// No queue ceilings, so the deadline filter is what judges the queue.
	opts := testOpts()
	opts.QueueCeiling = map[string]float64{}
	interactive := func(f *fleet.Fleet, opts Options) *Decision {
		return place(t, f, withDeadline(req(schemas.PriorityInteractive), 3*time.Second), opts)
	}
	base := interactive(classQueued([4]int{1000, 2000, 0, 0}, 0), opts)
	if got := base.Terms.QueueSeconds; math.Abs(got-0.3) > 1e-9 {
		t.Fatalf("interactive behind 3000 critical+interactive tokens: queue_s %v, want 0.3", got)
	}
	for _, c := range []struct {
		name   string
		byRank [4]int
		booked int
		same   bool
	}{
		{"lower classes queued", [4]int{1000, 2000, 30000, 50000}, 0, true},
		{"batch booked", [4]int{1000, 2000, 0, 0}, 40000, true},
		{"more critical queued", [4]int{9000, 2000, 0, 0}, 0, false},
		{"more interactive queued", [4]int{1000, 8000, 0, 0}, 0, false},
	} {
		d := interactive(classQueued(c.byRank, c.booked), opts)
		if same := d.Terms.QueueSeconds == base.Terms.QueueSeconds; same != c.same {
			t.Errorf("%s: queue_s %v vs base %v, want unchanged=%v", c.name, d.Terms.QueueSeconds, base.Terms.QueueSeconds, c.same)
		}
		// Over 0.8 s of work ahead breaks the 3 s deadline (0.2 s prefill + 2 s
		// decode); 80,000 tokens of lower classes must not. (The booking's
		// batch slot slows the decode a little, hence the slack bound.)
		if c.same && (winner(d) != "A" || d.Terms.SlackSeconds < 0.35) {
			t.Errorf("%s: lower-class work moved the latency axis: picked %s, slack %v (counts %v)", c.name, winner(d), d.Terms.SlackSeconds, d.Counts)
		}
		if !c.same && d.Counts[ReasonDeadlineBusy] != 1 {
			t.Errorf("%s: higher-class work did not make the deadline busy: counts %v", c.name, d.Counts)
		}
	}
	// A batch request is behind everything, bookings included.
	d := place(t, classQueued([4]int{1000, 2000, 3000, 4000}, 5000), req(schemas.PriorityBatch), opts)
	if got := d.Terms.QueueSeconds; math.Abs(got-1.5) > 1e-9 {
		t.Errorf("batch: queue_s %v, want 1.5", got)
	}
	// A class-blind policy (priority axis off) sees the whole queue.
	opts.Disabled = map[string]bool{AxisPriority: true}
	if got := place(t, classQueued([4]int{1000, 2000, 3000, 4000}, 0), req(schemas.PriorityInteractive), opts).Terms.QueueSeconds; math.Abs(got-1.0) > 1e-9 {
		t.Errorf("priority axis off: queue_s %v, want 1.0", got)
	}
}
