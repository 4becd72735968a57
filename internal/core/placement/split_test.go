package placement

import (
	"math"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/switchyard-ai/switchyard/internal/core/fleet"
	"github.com/switchyard-ai/switchyard/schemas"
)

// splitCost is BenchCost with KV transfers priced over a few links, as
// the TransferCost perf.Predictor implements: an 8B model's KV is
// 128 KiB a token (32 layers × 8 KV heads × 128 × K and V × 2 bytes),
// moved at the slower link's bandwidth plus the larger latency. It
// overlaps nothing with the prefill: the worst case, which keeps the
// figures below easy to check by hand.
type splitCost struct{ *LinearCost }

var testLinks = map[string]struct{ gbitPerSec, latency float64 }{
	"ib-ndr": {400, 5e-6},
	"eth-25": {25, 50e-6},
}

func (c splitCost) KVTransferSeconds(_, model, _ string, _, tokens int, _ float64, from, to string) float64 {
	a, okA := testLinks[from]
	b, okB := testLinks[to]
	if !okA || !okB {
		return math.Inf(1)
	}
	scale := 1.0
	if s, ok := c.ModelScale[model]; ok {
		scale = s
	}
	bytes := float64(tokens) * 128 * 1024 * scale
	return bytes/(min(a.gbitPerSec, b.gbitPerSec)*1e9/8) + max(a.latency, b.latency)
}

// worker is one heartbeat of a hand-built fleet.
type worker struct {
	id, gpu, role, link string
	running, queued     int
	draining            bool
}

func handFleet(ws ...worker) *fleet.Fleet {
	f := fleet.New(fleet.Options{})
	for _, w := range ws {
		f.ApplyHeartbeat(&schemas.Heartbeat{
			WorkerID: w.id, GPU: w.gpu, TP: 1, Role: w.role, Link: w.link,
			HBMTotalBytes: 80 << 30, HBMFreeBytes: 40 << 30, KVBlocksTotal: 100000, KVBlocksFree: 90000, BlockSize: 16,
			Models:  []schemas.ModelState{{Name: "llama-8b", Dtype: "bf16", State: schemas.WeightHot}},
			Running: w.running, QueuedTokens: w.queued, MaxBatch: 256, Draining: w.draining,
		}, now)
	}
	return f
}

func longRequest(prompt, output int) Request {
	return Request{ID: "r", Model: "llama-8b", Dtype: "bf16", Priority: schemas.PriorityStandard,
		PromptTokens: prompt, OutputTokens: output, TPOTTarget: 50 * time.Millisecond}
}

func idOf(w *fleet.Worker) string {
	if w == nil {
		return ""
	}
	return w.ID
}

// A long uncached prompt on a prefill H100 and a decode A100 joined by
// InfiniBand splits: there the split is the only way, and each leg is
// priced as the phase axis says.
func TestSplitPrefillH100DecodeA100(t *testing.T) {
	f := handFleet(worker{id: "P", gpu: "h100", role: schemas.RolePrefill, link: "ib-ndr"},
		worker{id: "D", gpu: "a100", role: schemas.RoleDecode, link: "ib-ndr"})
	r := longRequest(8000, 200)
	d := New(splitCost{BenchCost()}, Options{}).Place(f, &r, now)
	if !d.Split() || idOf(d.Prefill) != "P" || idOf(d.Worker) != "D" {
		t.Fatalf("split %v: prefill %q, decode %q", d.Split(), idOf(d.Prefill), idOf(d.Worker))
	}
	// 8000 tokens × 128 KiB over 50 GB/s, plus 5 µs.
	if want := 8000*128*1024/50e9 + 5e-6; math.Abs(d.TransferSeconds-want) > 1e-9 || d.Terms.TransferSeconds != d.TransferSeconds {
		t.Errorf("transfer %v, want %v", d.TransferSeconds, want)
	}
	pt, dt := d.PrefillTerms, d.Terms
	if want := 8000 / 20000.0; math.Abs(pt.PrefillSeconds-want) > 1e-12 || math.Abs(pt.DecodeSeconds-1/120.0) > 1e-12 || pt.TPOTSeconds != 0 {
		t.Errorf("prefill leg: prefill %v decode %v tpot %v, want %v, one token, none", pt.PrefillSeconds, pt.DecodeSeconds, pt.TPOTSeconds, want)
	}
	if pt.TTFTSeconds <= 0 || dt.TTFTSeconds != 0 || dt.PrefillSeconds != 0 {
		t.Errorf("ttft: prefill leg %v, decode leg %v; decode leg prefill %v", pt.TTFTSeconds, dt.TTFTSeconds, dt.PrefillSeconds)
	}
	// The decode leg decodes the 199 tokens after the first, and its TPOT
	// carries the transfer over them.
	if want := 199 / 70.0; math.Abs(dt.DecodeSeconds-want) > 1e-9 {
		t.Errorf("decode leg decode_s %v, want %v", dt.DecodeSeconds, want)
	}
	if want := 1/70.0 + d.TransferSeconds/199; math.Abs(dt.TPOTSeconds-want) > 1e-9 {
		t.Errorf("decode leg tpot %v, want %v", dt.TPOTSeconds, want)
	}
	if want := dt.QueueSeconds + dt.TransferSeconds + dt.DecodeSeconds + dt.PreemptSeconds; math.Abs(dt.CompletionSeconds-want) > 1e-12 {
		t.Errorf("decode leg completion %v, want %v", dt.CompletionSeconds, want)
	}
	if d.Aggregated != (Terms{}) || d.Counts[ReasonRoleMismatch] != 2 {
		t.Errorf("aggregated %+v, role rejections %d", d.Aggregated, d.Counts[ReasonRoleMismatch])
	}

	// Without the split there is nowhere to run it, and waiting will not
	// change that.
	for name, opts := range map[string]Options{"split off": {Split: SplitOff}, "phase axis off": {Disabled: map[string]bool{AxisPhase: true}}} {
		d := New(splitCost{BenchCost()}, opts).Place(f, &r, now)
		if d.OK() || !d.Unresolvable {
			t.Errorf("%s: placed on %q, unresolvable %v", name, idOf(d.Worker), d.Unresolvable)
		}
	}
	// Nor without a cost model that prices transfers.
	if d := New(BenchCost(), Options{}).Place(f, &r, now); d.OK() {
		t.Errorf("no TransferCost: placed on %q", idOf(d.Worker))
	}
}

// On a fleet with an aggregated worker too, the split is weighed only
// for long uncached prompts with tokens to decode, and chosen only when
// cheaper at no more risk: a busy H100 decoding 63 sequences pays for a
// 100k-token prefill in its neighbours' time, so over InfiniBand the
// prompt goes to the idle prefill H100 and its tokens to the A100; over
// 25 Gb Ethernet the 13 GB of KV take 4.2 s, which spread over 99 tokens
// breaks the 50 ms TPOT target on every decoder, so the busy H100, which
// meets both targets, keeps it.
func TestSplitOnlyWhenCheaperAtNoMoreRisk(t *testing.T) {
	cases := []struct {
		name           string
		link           string
		prompt, output int
		weighed, split bool
	}{
		{"long prompt, infiniband", "ib-ndr", 100000, 100, true, true},
		{"long prompt, ethernet: tpot would miss", "eth-25", 100000, 100, true, false},
		{"short prompt", "ib-ndr", 1023, 100, false, false},
		{"one step's prefill (Azure code's longest)", "ib-ndr", 7437, 100, false, false},
		{"past one step's prefill: the idle prefill worker takes it off the busy one", "ib-ndr", 8192, 100, true, true},
		{"tiny prompt", "ib-ndr", 50, 100, false, false},
		{"one output token", "ib-ndr", 100000, 1, false, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := handFleet(worker{id: "B", gpu: "h100", role: schemas.RoleBoth, link: tc.link, running: 63},
				worker{id: "P", gpu: "h100", role: schemas.RolePrefill, link: tc.link},
				worker{id: "D", gpu: "a100", role: schemas.RoleDecode, link: tc.link})
			r := longRequest(tc.prompt, tc.output)
			p := New(splitCost{BenchCost()}, Options{})
			d := p.Place(f, &r, now)
			if d.Split() != tc.split {
				t.Fatalf("split %v (prefill %q, decode %q), want %v", d.Split(), idOf(d.Prefill), idOf(d.Worker), tc.split)
			}
			if weighed := d.Aggregated != (Terms{}); weighed != tc.weighed {
				t.Fatalf("split weighed %v, want %v", weighed, tc.weighed)
			}
			if !tc.split {
				if idOf(d.Worker) != "B" || d.Prefill != nil || d.TransferSeconds != 0 {
					t.Fatalf("aggregated on %q, prefill %q, transfer %v", idOf(d.Worker), idOf(d.Prefill), d.TransferSeconds)
				}
				if tc.weighed && d.Aggregated != d.Terms {
					t.Fatalf("aggregated terms differ from the chosen ones")
				}
				return
			}
			if idOf(d.Prefill) != "P" || idOf(d.Worker) == "P" || d.Aggregated.TotalUSD <= d.Terms.TotalUSD+d.PrefillTerms.TotalUSD-d.PrefillTerms.MissUSD-d.Terms.MissUSD {
				t.Fatalf("prefill %q decode %q; aggregated total %v, legs %v + %v", idOf(d.Prefill), idOf(d.Worker),
					d.Aggregated.TotalUSD, d.PrefillTerms.TotalUSD, d.Terms.TotalUSD)
			}
			if d.Terms.TPOTSeconds > 0.05 || d.PrefillTerms.TTFTSlackSeconds < 0 {
				t.Fatalf("split misses a target: tpot %v, ttft slack %v", d.Terms.TPOTSeconds, d.PrefillTerms.TTFTSlackSeconds)
			}
		})
	}
}

// A fleet without links never splits, and its decisions are exactly
// those of a placer with the split off; the legs placer is never built.
func TestNoLinksNeverSplits(t *testing.T) {
	f, reqs := Synthetic(SyntheticConfig{Workers: 300, Blocks: 30000, Requests: 200, Seed: 5}, now)
	on := New(splitCost{BenchCost()}, Options{})
	off := New(splitCost{BenchCost()}, Options{Split: SplitOff})
	for i := range reqs {
		r := reqs[i]
		r.PromptTokens += 4096 // long enough to weigh, had the fleet links
		a, b := on.Place(f, &r, now), off.Place(f, &r, now)
		if !reflect.DeepEqual(*a, *b) {
			t.Fatalf("request %d: split on decided\n%+v\nsplit off\n%+v", i, *a, *b)
		}
		if a.Split() || a.Aggregated != (Terms{}) {
			t.Fatalf("request %d split on a fleet without links", i)
		}
	}
	if on.legs != nil {
		t.Fatal("the legs placer was built for a fleet without links")
	}
}

// The role filter: an aggregated request never lands on a prefill-only
// (or decode-only) worker, however fast and idle, and one that finds
// only such workers, with no split possible, is unresolvable.
func TestRoleFilter(t *testing.T) {
	for _, link := range []string{"", "ib-ndr"} {
		f := handFleet(worker{id: "P", gpu: "b200", role: schemas.RolePrefill, link: link},
			worker{id: "D", gpu: "h200", role: schemas.RoleDecode, link: link},
			worker{id: "A", gpu: "l4", role: "", queued: 400, running: 20})
		r := longRequest(500, 50)
		for _, opts := range []Options{{}, {Split: SplitOff}, {Explain: 1}} {
			d := New(splitCost{BenchCost()}, opts).Place(f, &r, now)
			if idOf(d.Worker) != "A" || d.Split() {
				t.Fatalf("link %q: placed on %q (split %v), counts %v", link, idOf(d.Worker), d.Split(), d.Counts)
			}
			for _, rj := range d.Rejections {
				if rj.Reason != ReasonRoleMismatch || rj.Worker.ID == "A" {
					t.Fatalf("link %q: %s rejected for %s", link, rj.Worker.ID, rj.Reason)
				}
			}
		}
	}
	// Only a prefill worker: no aggregated worker and no decoder.
	f := handFleet(worker{id: "P", gpu: "h100", role: schemas.RolePrefill, link: "ib-ndr"})
	r := longRequest(8000, 50)
	if d := New(splitCost{BenchCost()}, Options{}).Place(f, &r, now); d.OK() || !d.Unresolvable || d.Counts[ReasonRoleMismatch] != 1 {
		t.Fatalf("only a prefill worker: placed %v, unresolvable %v, counts %v", d.OK(), d.Unresolvable, d.Counts)
	}
	// Prefill and decode workers, the decoder draining: busy, not
	// unresolvable, since the split may serve it once it is back.
	f = handFleet(worker{id: "P", gpu: "h100", role: schemas.RolePrefill, link: "ib-ndr"},
		worker{id: "D", gpu: "a100", role: schemas.RoleDecode, link: "ib-ndr", draining: true})
	if d := New(splitCost{BenchCost()}, Options{}).Place(f, &r, now); d.OK() || d.Unresolvable {
		t.Fatalf("decoder draining: placed %v, unresolvable %v", d.OK(), d.Unresolvable)
	}
}

// A leg asked for on its own: the router re-places a decode leg whose
// planned worker died after the prefill (Source names the prefill
// worker), or a prefill leg alone.
func TestLegsOnTheirOwn(t *testing.T) {
	f := handFleet(worker{id: "P", gpu: "h100", role: schemas.RolePrefill, link: "ib-ndr"},
		worker{id: "D", gpu: "a100", role: schemas.RoleDecode, link: "ib-ndr"},
		worker{id: "N", gpu: "h100", role: schemas.RoleBoth}) // no link: no leg
	p := New(splitCost{BenchCost()}, Options{})

	r := longRequest(8000, 200)
	r.Phase, r.Source = schemas.PhaseDecode, "P"
	d := p.Place(f, &r, now)
	if idOf(d.Worker) != "D" || d.Split() || d.Terms.TransferSeconds <= 0 || d.Terms.PrefillSeconds != 0 {
		t.Fatalf("decode leg on %q, split %v, transfer %v, prefill %v", idOf(d.Worker), d.Split(), d.Terms.TransferSeconds, d.Terms.PrefillSeconds)
	}
	if d.Counts[ReasonRoleMismatch] != 2 {
		t.Fatalf("decode leg: %d role rejections, want P and N", d.Counts[ReasonRoleMismatch])
	}
	r.Source = "nobody"
	if d := p.Place(f, &r, now); d.OK() || !d.Unresolvable {
		t.Fatalf("decode leg from an unknown source: placed %v, unresolvable %v", d.OK(), d.Unresolvable)
	}

	r = longRequest(8000, 200)
	r.Phase = schemas.PhasePrefill
	d = p.Place(f, &r, now)
	if idOf(d.Worker) != "P" || d.Split() || d.Terms.TPOTSeconds != 0 || math.Abs(d.Terms.DecodeSeconds-1/120.0) > 1e-12 {
		t.Fatalf("prefill leg on %q, tpot %v, decode %v", idOf(d.Worker), d.Terms.TPOTSeconds, d.Terms.DecodeSeconds)
	}
}

// Pruning never changes a leg or a split: on a synthetic fleet of mixed
// roles with links, the pruned and the exhaustive placer agree on both
// legs and their breakdowns, for aggregated requests (split or not) and
// for legs asked for on their own.
func TestPruningKeepsTheSplit(t *testing.T) {
	f, reqs := Synthetic(SyntheticConfig{Workers: 300, Blocks: 30000, Requests: 150, Seed: 7, Links: []string{"ib-ndr", "eth-25"}}, now)
	// The synthetic prompts are short: the pruning is under test here, not
	// the threshold, so it is lowered until they are weighed.
	pruned := New(splitCost{BenchCost()}, Options{SplitMinUncached: 1024})
	full := New(splitCost{BenchCost()}, Options{Explain: 1 << 20, SplitMinUncached: 1024})
	source := ""
	for _, w := range f.Workers() {
		if w != nil && w.Role == schemas.RolePrefill {
			source = w.ID
			break
		}
	}
	splits := 0
	for i := range reqs {
		for _, phase := range []string{schemas.PhaseBoth, schemas.PhasePrefill, schemas.PhaseDecode} {
			r := reqs[i]
			r.PromptTokens += 2048
			r.Phase = phase
			if phase == schemas.PhaseDecode {
				r.Source = source
			}
			a := pruned.Place(f, &r, now)
			aw, at, ap, apt := a.Worker, a.Terms, a.Prefill, a.PrefillTerms
			b := full.Place(f, &r, now)
			if aw != b.Worker || at != b.Terms || ap != b.Prefill || apt != b.PrefillTerms {
				t.Fatalf("request %d phase %q: pruned %q/%q, full %q/%q", i, phase, idOf(ap), idOf(aw), idOf(b.Prefill), idOf(b.Worker))
			}
			if b.Split() {
				splits++
			}
		}
	}
	if splits == 0 {
		t.Fatal("no request split on the mixed fleet")
	}
}

// Weighing and choosing a split allocates nothing once warm.
func TestSplitAllocatesNothing(t *testing.T) {
	f := handFleet(worker{id: "B", gpu: "h100", role: schemas.RoleBoth, link: "ib-ndr", running: 63},
		worker{id: "P", gpu: "h100", role: schemas.RolePrefill, link: "ib-ndr"},
		worker{id: "D", gpu: "a100", role: schemas.RoleDecode, link: "ib-ndr"})
	p := New(splitCost{BenchCost()}, Options{})
	r := longRequest(100000, 100)
	r.Exclude = []string{"nobody"}
	if d := p.Place(f, &r, now); !d.Split() {
		t.Fatal("no split")
	}
	if n := testing.AllocsPerRun(100, func() { p.Place(f, &r, now) }); n != 0 {
		t.Fatalf("%v allocations per split placement", n)
	}
}

// BenchmarkPlaceSplit is BenchmarkPlace on a fleet where every worker has
// a link and a role (a third each both, prefill, decode), so each request
// whose uncached prompt is long enough also places its two legs.
func BenchmarkPlaceSplit(b *testing.B) {
	f, reqs := Synthetic(SyntheticConfig{Workers: 1000, Blocks: 100000, Requests: 512, Seed: 1, Links: []string{"ib-ndr", "eth-25"}}, now)
	for i := range reqs {
		reqs[i].PromptTokens += 2048 // every one long enough to weigh a split
	}
	p := New(splitCost{BenchCost()}, Options{})
	for i := range reqs {
		p.Place(f, &reqs[i], now)
	}
	splits := 0
	lat := make([]time.Duration, 0, b.N)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		t := time.Now()
		if p.Place(f, &reqs[i%len(reqs)], now).Split() {
			splits++
		}
		lat = append(lat, time.Since(t))
	}
	b.StopTimer()
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)/2].Nanoseconds())/1e3, "p50_us")
	b.ReportMetric(float64(lat[len(lat)*99/100].Nanoseconds())/1e3, "p99_us")
	b.ReportMetric(float64(splits)/float64(b.N), "split_frac")
}
