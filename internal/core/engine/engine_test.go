package engine

import (
	"fmt"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/switchyard-ai/switchyard/internal/core/perf"
	"github.com/switchyard-ai/switchyard/internal/core/tokens"
	"github.com/switchyard-ai/switchyard/schemas"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func replica(t testing.TB) perf.Replica {
	r, err := perf.NewReplica(nil, "h100", "llama-3.1-8b", "bf16", 1)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func newEngine(t testing.TB, cfg Config) *Engine {
	t.Helper()
	if cfg.Replica.TP == 0 {
		cfg.Replica = replica(t)
	}
	e, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return e
}

// hashes builds a chain of n block hashes; prompts with the same seed share
// a prefix.
func hashes(seed uint64, n int) []uint64 {
	out := make([]uint64, n)
	h := seed
	for i := range out {
		h = h*6364136223846793005 + 1442695040888963407
		out[i] = h
	}
	return out
}

func seqOf(id string, seed uint64, prompt, maxTok int) Sequence {
	return Sequence{ID: id, PromptTokens: prompt, BlockHashes: hashes(seed, prompt/tokens.BlockSize), MaxTokens: maxTok, Arrival: t0}
}

// run steps until idle and returns all finished sequences and the end time.
func run(t testing.TB, e *Engine, now time.Time, onStep func(Step)) ([]Finished, time.Time) {
	t.Helper()
	var fin []Finished
	for i := 0; e.HasWork(); i++ {
		if i > 1_000_000 {
			t.Fatal("engine does not converge")
		}
		st := e.Step(now)
		if st.Duration == 0 && len(st.Emitted) == 0 {
			t.Fatalf("no progress at step %d: %+v", i, e.State())
		}
		if onStep != nil {
			onStep(st)
		}
		fin = append(fin, st.Finished...)
		now = now.Add(st.Duration)
	}
	return fin, now
}

func TestSingleSequenceLifecycle(t *testing.T) {
	e := newEngine(t, Config{})
	if err := e.Add(seqOf("a", 1, 1000, 50)); err != nil {
		t.Fatal(err)
	}
	if err := e.Add(seqOf("a", 1, 1000, 50)); err == nil {
		t.Error("duplicate id accepted")
	}
	var stored int
	fin, end := run(t, e, t0, func(s Step) { stored += len(s.Stored) })
	if len(fin) != 1 || fin[0].OutputTokens != 50 || fin[0].CachedTokens != 0 {
		t.Fatalf("finished %+v", fin)
	}
	if stored != 1000/16 {
		t.Errorf("stored %d blocks, want %d", stored, 1000/16)
	}
	ttft := fin[0].FirstTokenAt.Sub(t0)
	rep := replica(t)
	want := rep.PrefillSeconds(1000, 0)
	if d := ttft.Seconds() - want; d < -1e-6 || d > 1e-6 {
		t.Errorf("TTFT %v, want %v", ttft, want)
	}
	if !fin[0].FinishedAt.Equal(end) {
		t.Error("FinishedAt != last step end")
	}
	st := e.State()
	if st.Running != 0 || st.KVBlocksFree != st.KVBlocksTotal || st.KVBlocksCached != 62 {
		t.Errorf("state after finish %+v", st)
	}
}

func TestPrefixCachingSavesPrefill(t *testing.T) {
	e := newEngine(t, Config{})
	e.Add(seqOf("first", 7, 4000, 1))
	f1, now := run(t, e, t0, nil)
	e.Add(seqOf("second", 7, 4000, 1)) // same prefix
	f2, end := run(t, e, now, nil)
	if f2[0].CachedTokens != 3999 { // 250 full blocks hit, last token recomputed
		t.Errorf("cached %d, want 3999", f2[0].CachedTokens)
	}
	t1, t2 := f1[0].FirstTokenAt.Sub(t0), end.Sub(now)
	if t2*5 > t1 {
		t.Errorf("cached prefill %v not much faster than cold %v", t2, t1)
	}
	// A different prefix gets no hit.
	e.Add(seqOf("third", 8, 4000, 1))
	f3, _ := run(t, e, end, nil)
	if f3[0].CachedTokens != 0 {
		t.Errorf("unrelated prompt hit %d tokens", f3[0].CachedTokens)
	}
}

func TestEvictionLRU(t *testing.T) {
	// 20 blocks: each 160-token prompt caches 10 blocks.
	e := newEngine(t, Config{KVBlocks: 20})
	var evicted []uint64
	now := t0
	for i, seed := range []uint64{1, 2, 3} {
		e.Add(seqOf(fmt.Sprint(i), seed, 160, 1))
		var fin []Finished
		fin, now = run(t, e, now, func(s Step) { evicted = append(evicted, s.Evicted...) })
		_ = fin
	}
	// The third prompt needed 10 blocks: prompt 1's (least recently used)
	// go, tail first, and prompt 2's stay.
	want := slices.Clone(hashes(1, 10))
	slices.Reverse(want)
	if !reflect.DeepEqual(evicted, want) {
		t.Errorf("evicted %x\nwant %x", evicted, want)
	}
	e.Add(seqOf("again2", 2, 160, 1))
	fin, _ := run(t, e, now, nil)
	if fin[0].CachedTokens != 159 {
		t.Errorf("prompt 2 should still be cached, got %d", fin[0].CachedTokens)
	}
}

func TestPreemptionRecomputes(t *testing.T) {
	// 40 blocks = 640 tokens for 4 sequences that grow to 320 tokens each.
	e := newEngine(t, Config{KVBlocks: 40})
	for i := range 4 {
		if err := e.Add(seqOf(fmt.Sprint(i), uint64(10+i), 64, 256)); err != nil {
			t.Fatal(err)
		}
	}
	preempted := 0
	fin, _ := run(t, e, t0, func(s Step) {
		preempted += len(s.Preempted)
		if st := e.State(); st.KVBlocksFree < 0 || st.KVBlocksFree > 40 {
			t.Fatalf("free blocks %d", st.KVBlocksFree)
		}
	})
	if preempted == 0 {
		t.Fatal("expected preemptions")
	}
	got := 0
	for _, f := range fin {
		if f.OutputTokens != 256 {
			t.Errorf("%s produced %d tokens", f.ID, f.OutputTokens)
		}
		got += f.Preemptions
	}
	if len(fin) != 4 || got != preempted {
		t.Errorf("finished %d, preemptions %d vs %d", len(fin), got, preempted)
	}
	if err := e.Add(seqOf("huge", 1, 700, 10)); err == nil {
		t.Error("a sequence larger than the cache was accepted")
	}
}

func TestChunkedPrefillAndBudget(t *testing.T) {
	e := newEngine(t, Config{TokenBudget: 512, ChunkSize: 256})
	e.Add(seqOf("long", 1, 2000, 5))
	e.Add(seqOf("short", 2, 100, 5))
	st := e.Step(t0)
	if st.Batch.PrefillTokens != 256+100 || st.Batch.PrefillSeqs != 2 {
		t.Errorf("first step batch %+v", st.Batch)
	}
	if e.State().QueuedTokens != 2000-256 {
		t.Errorf("queued %d", e.State().QueuedTokens)
	}
	fin, _ := run(t, e, t0.Add(st.Duration), nil)
	if len(fin) != 2 {
		t.Errorf("finished %d", len(fin))
	}
}

func TestColdStartWaitsForLoad(t *testing.T) {
	e := newEngine(t, Config{InitialWeights: schemas.WeightCold})
	e.Add(seqOf("a", 1, 100, 2))
	st := e.Step(t0)
	load := replica(t).LoadSeconds(schemas.WeightCold)
	if len(st.Emitted) != 0 || st.Duration.Seconds() < load-0.01 {
		t.Fatalf("first step %+v, want a %.1fs load", st, load)
	}
	if s := e.State(); s.Weights != schemas.WeightLoading || s.ReadyAt.IsZero() {
		t.Errorf("state %+v", s)
	}
	fin, _ := run(t, e, t0.Add(st.Duration), nil)
	if fin[0].FirstTokenAt.Sub(t0).Seconds() < load {
		t.Error("first token before the load finished")
	}
	if e.State().Weights != schemas.WeightHot {
		t.Error("not hot after load")
	}
	if err := e.SetWeightState(schemas.WeightSleeping); err != nil || e.State().KVBlocksCached != 0 {
		t.Errorf("sleep: %v, cached %d", err, e.State().KVBlocksCached)
	}
	// The evictions caused by sleeping reach the router with the next step.
	if st := e.Step(t0.Add(time.Hour)); len(st.Evicted) != 100/16 {
		t.Errorf("evicted %d blocks on sleep, want %d", len(st.Evicted), 100/16)
	}
}

func TestCancel(t *testing.T) {
	e := newEngine(t, Config{})
	e.Add(seqOf("a", 1, 500, 100))
	e.Add(seqOf("b", 2, 500, 100))
	e.Step(t0)
	if !e.Cancel("a") || e.Cancel("a") || e.Cancel("zzz") {
		t.Error("cancel semantics")
	}
	fin, _ := run(t, e, t0.Add(time.Second), nil)
	if len(fin) != 1 || fin[0].ID != "b" {
		t.Errorf("finished %+v", fin)
	}
}

// decodeRun measures mean time per output token and throughput of batch
// sequences decoding together.
func decodeRun(t *testing.T, spec SpecConfig, batch, prompt, out int) (itl time.Duration, tput float64) {
	e := newEngine(t, Config{Spec: spec, MaxBatch: batch})
	for i := range batch {
		e.Add(seqOf(fmt.Sprint(i), uint64(i+1), prompt, out))
	}
	fin, end := run(t, e, t0, nil)
	var sum time.Duration
	for _, f := range fin {
		sum += f.FinishedAt.Sub(f.FirstTokenAt) / time.Duration(f.OutputTokens-1)
	}
	return sum / time.Duration(len(fin)), float64(batch*out) / end.Sub(t0).Seconds()
}

func TestSpecDecodeTradeOff(t *testing.T) {
	eagle := SpecConfig{Enabled: true, K: 3, Acceptance: 0.75, DraftLayers: 1, Seed: 1}
	off := SpecConfig{}
	itlOn, _ := decodeRun(t, eagle, 1, 256, 200)
	itlOff, _ := decodeRun(t, off, 1, 256, 200)
	if float64(itlOn) > 0.7*float64(itlOff) {
		t.Errorf("batch 1: spec ITL %v vs %v, want ≥1.4× better", itlOn, itlOff)
	}
	// At high load a draft model with chat-level acceptance makes every step
	// compute-bound and k+1 times bigger (vLLM blog, Oct 2024: 1.4-1.8×
	// slowdown at high QPS).
	draft := SpecConfig{Enabled: true, K: 4, Acceptance: 0.6, DraftLayers: 4, Seed: 1}
	_, tOn := decodeRun(t, draft, 256, 128, 64)
	_, tOff := decodeRun(t, off, 256, 128, 64)
	if tOn >= tOff {
		t.Errorf("batch 256: spec throughput %.0f ≥ %.0f without", tOn, tOff)
	}
	t.Logf("bs1 ITL %v → %v; bs256 tput %.0f → %.0f tok/s", itlOff, itlOn, tOff, tOn)
}

func TestSetSpecDecodeAndBudgets(t *testing.T) {
	e := newEngine(t, Config{Spec: SpecConfig{K: 2}})
	e.Add(seqOf("a", 1, 64, 100))
	e.Step(t0)
	e.SetSpecDecode(true)
	e.SetBudgets(8, 1024)
	st := e.Step(t0.Add(time.Second))
	if st.Batch.SpecTokens != 2 || !e.State().SpecDecode || e.State().MaxBatch != 8 || e.State().TokenBudget != 1024 {
		t.Errorf("batch %+v state %+v", st.Batch, e.State())
	}
}

func TestDeterminism(t *testing.T) {
	trace := func() []Finished {
		e := newEngine(t, Config{KVBlocks: 400, Spec: SpecConfig{Enabled: true, Seed: 42}})
		now := t0
		var fin []Finished
		for i := range 40 {
			e.Add(seqOf(fmt.Sprint(i), uint64(i%5), 200+i*13, 20+i%7*10))
			st := e.Step(now)
			now = now.Add(st.Duration + 3*time.Millisecond)
			fin = append(fin, st.Finished...)
		}
		f, _ := run(t, e, now, nil)
		return append(fin, f...)
	}
	a, b := trace(), trace()
	if len(a) != 40 || !reflect.DeepEqual(a, b) {
		t.Errorf("runs differ or incomplete: %d vs %d", len(a), len(b))
	}
}

func TestStepDoesNotAllocateInSteadyState(t *testing.T) {
	e := newEngine(t, Config{})
	for i := range 64 {
		if err := e.Add(seqOf(fmt.Sprint(i), uint64(i), 512, 4000)); err != nil {
			t.Fatal(err)
		}
	}
	now := t0
	for range 10 {
		now = now.Add(e.Step(now).Duration)
	}
	if n := testing.AllocsPerRun(200, func() { now = now.Add(e.Step(now).Duration) }); n > 0.05 || e.State().Running != 64 {
		t.Errorf("Step allocates %.2f times per call", n)
	}
}

func BenchmarkStep64(b *testing.B) {
	e := newEngine(b, Config{})
	for i := range 64 {
		if err := e.Add(seqOf(fmt.Sprint(i), uint64(i), 512, 20000)); err != nil {
			b.Fatal(err)
		}
	}
	now := t0
	for b.Loop() {
		now = now.Add(e.Step(now).Duration)
	}
}

// BenchmarkState64 is a heartbeat's State over 64 running sequences of
// 4k-token prompts in four classes (~16k blocks held), most of its time
// the per-class block count; it runs once a second per worker.
func BenchmarkState64(b *testing.B) {
	e := newEngine(b, Config{})
	for i := range 64 {
		s := seqOf(fmt.Sprint(i), uint64(i), 4096, 20000)
		s.Priority = i % NumPriorities
		if err := e.Add(s); err != nil {
			b.Fatal(err)
		}
	}
	now := t0
	for e.State().Running < 64 || e.State().QueuedTokens > 0 {
		now = now.Add(e.Step(now).Duration)
	}
	b.ReportAllocs()
	for b.Loop() {
		_ = e.State()
	}
}

// TestPriorityOrdersTheWaitingQueue: with the batch full, an interactive
// sequence that arrives after a queue of batch work is admitted first, and
// takes the running batch sequence's slot (which is recomputed later).
func TestPriorityOrdersTheWaitingQueue(t *testing.T) {
	e := newEngine(t, Config{MaxBatch: 1})
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for i, id := range []string{"running", "batch-1", "batch-2"} {
		s := seqOf(id, uint64(i+1), 64, 4)
		s.Priority = 3
		if err := e.Add(s); err != nil {
			t.Fatal(err)
		}
	}
	first := e.Step(now) // "running" is admitted; the batch waits
	now = now.Add(first.Duration)
	urgent := seqOf("interactive", 9, 64, 4)
	urgent.Priority = 1
	if err := e.Add(urgent); err != nil {
		t.Fatal(err)
	}
	var order []string
	preempts := map[string]int{}
	run(t, e, now, func(st Step) {
		for _, f := range st.Finished {
			order = append(order, f.ID)
			preempts[f.ID] = f.Preemptions
		}
	})
	want := []string{"interactive", "running", "batch-1", "batch-2"}
	if fmt.Sprint(order) != fmt.Sprint(want) {
		t.Fatalf("finish order %v, want %v", order, want)
	}
	if preempts["running"] != 1 || preempts["interactive"] != 0 {
		t.Errorf("preemptions %v, want running preempted once", preempts)
	}
}

// TestClassOrdersPrefillChunks: a critical prompt arriving while a long
// batch prompt is mid-prefill gets the next step's budget; the batch
// prompt pauses, keeping its KV, and resumes afterwards.
func TestClassOrdersPrefillChunks(t *testing.T) {
	e := newEngine(t, Config{TokenBudget: 512, CriticalStepTime: -1})
	long := seqOf("batch", 1, 8000, 4)
	long.Priority = 3
	if err := e.Add(long); err != nil {
		t.Fatal(err)
	}
	now := t0
	for range 3 {
		now = now.Add(e.Step(now).Duration)
	}
	queued := e.State().QueuedTokens
	crit := seqOf("critical", 2, 400, 4)
	crit.Critical = true
	if err := e.Add(crit); err != nil {
		t.Fatal(err)
	}
	st := e.Step(now)
	if st.Batch.PrefillSeqs != 2 || st.Batch.PrefillTokens != 512 || len(st.Emitted) != 1 || st.Emitted[0].ID != "critical" {
		t.Fatalf("step after the critical arrival: batch %+v, emitted %v; want the critical prompt whole and the rest for the batch chunk", st.Batch, st.Emitted)
	}
	if got := e.State().QueuedTokens; got != queued-112 {
		t.Errorf("batch prompt queued %d, want %d (a 112-token chunk)", got, queued-112)
	}
	fin, _ := run(t, e, now.Add(st.Duration), nil)
	if len(fin) != 2 || fin[0].ID != "critical" || fin[1].Preemptions != 0 {
		t.Errorf("finished %+v", fin)
	}
}

// TestHigherClassPreemptsForKV: when the KV cache is full of batch work, a
// critical sequence preempts the lowest class, latest admitted first; a
// sequence never preempts one of its own or a higher class to start.
func TestHigherClassPreemptsForKV(t *testing.T) {
	// 60 blocks: two batch sequences of 400+100 tokens (≈32 blocks each)
	// do not both fit with a 20-block critical one.
	e := newEngine(t, Config{KVBlocks: 60})
	for i, id := range []string{"batch-old", "batch-new"} {
		s := seqOf(id, uint64(i+1), 400, 100)
		s.Priority = 3
		if err := e.Add(s); err != nil {
			t.Fatal(err)
		}
	}
	now := t0
	for range 3 {
		now = now.Add(e.Step(now).Duration)
	}
	if st := e.State(); st.Running != 2 {
		t.Fatalf("running %d, want both batch sequences", st.Running)
	}
	std := seqOf("standard", 3, 300, 10)
	std.Priority = 2
	crit := seqOf("critical", 4, 300, 10)
	if err := e.Add(std); err != nil {
		t.Fatal(err)
	}
	if err := e.Add(crit); err != nil {
		t.Fatal(err)
	}
	st := e.Step(now)
	if len(st.Preempted) == 0 || st.Preempted[0] != "batch-new" {
		t.Fatalf("preempted %v, want batch-new (lowest class, latest admitted) first", st.Preempted)
	}
	fin, _ := run(t, e, now.Add(st.Duration), nil)
	order := make([]string, len(fin))
	for i, f := range fin {
		order[i] = f.ID
		if f.OutputTokens != map[bool]int{true: 100, false: 10}[f.ID[0] == 'b'] {
			t.Errorf("%s produced %d tokens", f.ID, f.OutputTokens)
		}
		if (f.ID == "critical" || f.ID == "standard") && f.Preemptions != 0 {
			t.Errorf("%s preempted %d times", f.ID, f.Preemptions)
		}
	}
	if len(order) != 4 || order[0] != "critical" {
		t.Errorf("finish order %v, want critical first", order)
	}
}

func TestStateSplitsQueuedTokensByPriority(t *testing.T) {
	if NumPriorities != len(schemas.Priorities) {
		t.Fatalf("NumPriorities %d, schemas has %d classes", NumPriorities, len(schemas.Priorities))
	}
	e := newEngine(t, Config{TokenBudget: 512, ChunkSize: 256})
	for _, s := range []struct {
		id     string
		prio   int
		prompt int
	}{
		{"crit", 0, 1000},
		{"batch", 3, 2000},
		{"std", 2, 300},
		{"over", 9, 400}, // clamps to the lowest rank
	} {
		q := seqOf(s.id, uint64(len(s.id)), s.prompt, 5)
		q.Priority = s.prio
		if err := e.Add(q); err != nil {
			t.Fatal(err)
		}
	}
	if got, want := e.State().QueuedTokensByPriority, [NumPriorities]int{1000, 0, 300, 2400}; got != want {
		t.Errorf("before any step: %v, want %v", got, want)
	}
	if st := e.State(); st.WaitingByPriority != [NumPriorities]int{1, 0, 1, 2} || st.Waiting != 4 {
		t.Errorf("before any step: waiting %d split %v, want 4 as [1 0 1 2]", st.Waiting, st.WaitingByPriority)
	}
	var hb schemas.Heartbeat
	e.FillHeartbeat(&hb)
	if want := map[string]int{schemas.PriorityCritical: 1, schemas.PriorityStandard: 1, schemas.PriorityBatch: 2}; !reflect.DeepEqual(hb.WaitingByClass, want) {
		t.Errorf("heartbeat waiting_by_class %v, want %v", hb.WaitingByClass, want)
	}
	e.Step(t0)
	st := e.State()
	sum := 0
	for _, n := range st.QueuedTokensByPriority {
		sum += n
	}
	if sum != st.QueuedTokens {
		t.Errorf("per-priority %v sums to %d, QueuedTokens %d", st.QueuedTokensByPriority, sum, st.QueuedTokens)
	}
	if st.QueuedTokensByPriority[1] != 0 {
		t.Errorf("interactive has nothing queued, got %d", st.QueuedTokensByPriority[1])
	}
}

func TestClassMap(t *testing.T) {
	st := State{QueuedTokensByPriority: [NumPriorities]int{5, 0, 0, 7}}
	m := st.ClassMap(nil)
	if want := map[string]int{schemas.PriorityCritical: 5, schemas.PriorityBatch: 7}; !reflect.DeepEqual(m, want) {
		t.Errorf("got %v, want %v", m, want)
	}
	st = State{QueuedTokensByPriority: [NumPriorities]int{0, 3, 0, 0}}
	if m2 := st.ClassMap(m); !reflect.DeepEqual(m2, map[string]int{schemas.PriorityInteractive: 3}) {
		t.Errorf("reused map: got %v", m2)
	}
	if m3 := (&State{}).ClassMap(nil); m3 != nil {
		t.Errorf("nothing queued allocated %v", m3)
	}
}

// TestStateSplitsKVBlocksByPriority: blocks in use are split by the class
// of the running sequences holding them, a prefix block shared by two
// classes counting once, under the higher, since preempting only the lower
// holder would not free it.
func TestStateSplitsKVBlocksByPriority(t *testing.T) {
	e := newEngine(t, Config{})
	for _, s := range []struct {
		id     string
		seed   uint64
		prio   int
		prompt int
	}{
		{"crit", 3, 0, 160},  // 10 blocks of its own
		{"std", 1, 2, 400},   // 25 blocks...
		{"batch", 1, 3, 400}, // ...the same 25: its prompt is std's
	} {
		q := seqOf(s.id, s.seed, s.prompt, 50)
		q.Priority = s.prio
		if err := e.Add(q); err != nil {
			t.Fatal(err)
		}
	}
	if got := e.State().KVBlocksByPriority; got != [NumPriorities]int{} {
		t.Fatalf("nothing admitted yet, got %v", got)
	}
	now := t0
	for step, want := range [][NumPriorities]int{
		// Whole prompts in one step: batch finds std's blocks cached.
		{10, 0, 25, 0},
		// The first decode of each needs one private block past its prompt.
		{11, 0, 26, 1},
	} {
		now = now.Add(e.Step(now).Duration)
		st := e.State()
		if st.KVBlocksByPriority != want {
			t.Errorf("after step %d: %v, want %v", step+1, st.KVBlocksByPriority, want)
		}
		sum := 0
		for _, n := range st.KVBlocksByPriority {
			sum += n
		}
		if used := st.KVBlocksTotal - st.KVBlocksFree; sum != used {
			t.Errorf("after step %d: per-class blocks sum to %d, %d in use", step+1, sum, used)
		}
	}
	// Counting twice gives the same answer: marks from the last count do
	// not leak into the next.
	if a, b := e.State().KVBlocksByPriority, e.State().KVBlocksByPriority; a != b {
		t.Errorf("repeated counts differ: %v then %v", a, b)
	}
	e.Cancel("std")
	if got, want := e.State().KVBlocksByPriority, [NumPriorities]int{11, 0, 0, 26}; got != want {
		t.Errorf("after std left, the shared prefix is batch's alone: %v, want %v", got, want)
	}
}

// TestKVBlocksCensusWraps: the census counter wrapping to zero must not
// make blocks look counted already — a new node's mark is zero.
func TestKVBlocksCensusWraps(t *testing.T) {
	e := newEngine(t, Config{})
	if err := e.Add(seqOf("a", 1, 320, 50)); err != nil {
		t.Fatal(err)
	}
	e.Step(t0)
	want := e.State().KVBlocksByPriority
	if want[0] == 0 {
		t.Fatal("nothing held to count")
	}
	e.kv.blocks.EachSlot(func(b *kvBlock) { b.seen = 0 }) // as if allocated since the last count
	e.kv.census = ^uint32(0)
	for range 3 {
		if got := e.State().KVBlocksByPriority; got != want {
			t.Fatalf("census %d: %v, want %v", e.kv.census, got, want)
		}
	}
}

func TestKVClassMap(t *testing.T) {
	st := State{KVBlocksByPriority: [NumPriorities]int{0, 4, 0, 9}, QueuedTokensByPriority: [NumPriorities]int{1, 0, 0, 0}}
	m := st.KVClassMap(nil)
	if want := map[string]int{schemas.PriorityInteractive: 4, schemas.PriorityBatch: 9}; !reflect.DeepEqual(m, want) {
		t.Errorf("got %v, want %v", m, want)
	}
	st.KVBlocksByPriority = [NumPriorities]int{2, 0, 0, 0}
	if m2 := st.KVClassMap(m); !reflect.DeepEqual(m2, map[string]int{schemas.PriorityCritical: 2}) {
		t.Errorf("reused map: got %v", m2)
	}
	if m3 := (&State{}).KVClassMap(nil); m3 != nil {
		t.Errorf("nothing held allocated %v", m3)
	}
}

// TestStateReportsPrefilling: the heartbeat says how many running
// sequences still wait for their first token (prefilling): a long prompt
// admitted beside a short one is counted until its last chunk, the short
// one not once it decodes.
func TestStateReportsPrefilling(t *testing.T) {
	e := newEngine(t, Config{TokenBudget: 256, CriticalStepTime: -1})
	for _, s := range []Sequence{seqOf("short", 1, 100, 50), seqOf("long", 2, 4000, 3)} {
		if err := e.Add(s); err != nil {
			t.Fatal(err)
		}
	}
	var hb schemas.Heartbeat
	now := t0.Add(e.Step(t0).Duration) // the short prompt whole, a chunk of the long one
	e.FillHeartbeat(&hb)
	if hb.Running != 2 || hb.Prefilling != 1 || hb.Waiting != 0 {
		t.Fatalf("after one step: running %d, prefilling %d, waiting %d; want 2, 1 (the long prompt), 0", hb.Running, hb.Prefilling, hb.Waiting)
	}
	for e.State().Prefilling > 0 {
		now = now.Add(e.Step(now).Duration)
	}
	if st := e.State(); st.Running != 2 {
		t.Fatalf("the long prompt prefilled: running %d, want both still decoding", st.Running)
	}
}
