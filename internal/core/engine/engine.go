// Package engine owns the worker engine's scheduling core for one model
// replica: continuous batching under a per-step token budget with chunked
// prefill, a paged KV cache in tokens.BlockSize blocks with hash-chained
// prefix caching and LRU eviction of unreferenced blocks, preemption by
// recompute when KV runs out, speculative decoding, and weight residency
// (hot, sleeping, cold, absent) with load times, and the two legs of a
// disaggregated request: a prefill that holds its KV for a decode worker
// and a decode that starts from transferred KV (phases.go).
//
// It is pure: time is passed in and nothing sleeps. Step(now) plans one
// iteration, costs it with the perf roofline model and applies its effects.
// The live worker sleeps Step's Duration and publishes the results; the
// discrete-event simulator calls the same Step in virtual time. Step is
// O(batch) and reuses its buffers, so it does not allocate in steady state.
// The scheduling follows vLLM V1 with its priority policy, by class
// (Sequence.Priority): decodes of running sequences first, then prefill
// chunks in class order — a running sequence's next chunk before a waiting
// sequence of the same class, a waiting sequence of a higher class before
// both, so a long low-class prompt mid-prefill pauses instead of holding a
// critical prompt behind seconds of its chunks. When a block cannot be
// found, the running sequence of the lowest class (latest admitted within
// it) is preempted and recomputed later; a waiting sequence preempts only
// a lower class, for KV or a batch slot, and after any preemption in a
// step only such a sequence is admitted, so equal classes never thrash.
package engine

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/switchyard-ai/switchyard/internal/core/lru"
	"github.com/switchyard-ai/switchyard/internal/core/perf"
	"github.com/switchyard-ai/switchyard/internal/core/tokens"
	"github.com/switchyard-ai/switchyard/schemas"
)

// Defaults follow vLLM V1's (max_num_seqs 256, max_num_batched_tokens 8192).
const (
	DefaultMaxBatch    = 256
	DefaultTokenBudget = 8192
	// DefaultCriticalStepTime keeps steps, and so the inter-token latency
	// of a decoding critical sequence, inside a 50 ms per-token target with
	// a fifth to spare for prediction error and the odd uncapped step (the
	// one that emits its first token).
	DefaultCriticalStepTime = 40 * time.Millisecond
	// StepTargetShare is the share of a decoding sequence's TPOT target a
	// step may take under Config.TargetStepCap: the critical cap's 40 of
	// 50 ms, the same fifth to spare.
	StepTargetShare = 0.8
)

// SpecConfig configures speculative decoding (gpu-model.md §8). Each step a
// decoding sequence verifies K draft tokens; each is accepted with
// probability Acceptance until the first rejection, plus one bonus token,
// so a step yields (1 − α^{K+1})/(1 − α) tokens on average. Draft and
// rejected tokens cost GPU work like any other.
type SpecConfig struct {
	Enabled bool
	// K is the number of draft tokens (default 3, an EAGLE-3 chain).
	K int
	// Acceptance is the per-token acceptance rate α (default 0.7: EAGLE-3
	// ≈0.75-0.8, draft models ≈0.6, n-gram on chat ≈0.5).
	Acceptance float64
	// DraftLayers is one draft forward's cost in target-layer units: 0
	// means the default 1 (an EAGLE head), a negative value a free proposer
	// (n-gram lookup), a small draft model several.
	DraftLayers float64
	// Seed makes acceptance draws reproducible.
	Seed uint64
}

// Config configures an Engine.
type Config struct {
	Replica     perf.Replica
	MaxBatch    int // running sequences; 0 = DefaultMaxBatch
	TokenBudget int // tokens per step; 0 = DefaultTokenBudget
	// CriticalStepTime caps a step's predicted duration while a Critical
	// sequence is decoding: prefill chunks are cut to what fits beside the
	// decodes, so its inter-token latency stays interactive (Sarathi-Serve's
	// stall-free batching, applied by class). The cap is in time, not
	// tokens, because a chunk's cost depends on its context: 512 tokens
	// cost ~13 ms at the start of a prompt and ~40 ms at 50k tokens in (8B
	// on an H100), while decodes of long contexts can fill the step alone.
	// 0 means DefaultCriticalStepTime; negative disables the cap.
	CriticalStepTime time.Duration
	// TargetStepCap extends that cap to every class, from the targets the
	// sequences carry (Sequence.TPOTTarget): the step is capped at what
	// keeps each decoding sequence's mean time per token within its target
	// — the slack its earlier tokens left plus the next token's target, a
	// fifth kept spare, never under StepTargetShare of the target — so the
	// prefill chunks beside a sequence cannot stretch its inter-token
	// latency past its own target, while a prefill may use what a fast
	// decode leaves (Sarathi-Serve's stall-free token budget, taken from the
	// targets running rather than one fleet-wide number; issue 27). A cap
	// of 0.8 × the target on every step, measured first, cost TTFT where
	// decodes are slow (two L40S: mixed-fleet-conversation's high bar
	// 6.169× → 5.188×) and is what this relaxes.
	// Switchyard's workers run with it; an engine that takes no per-step
	// budget (vLLM's fixed max_num_batched_tokens), as the simulator
	// models the baselines' engines, runs without.
	TargetStepCap bool
	ChunkSize     int // largest prefill chunk per sequence per step; 0 = TokenBudget
	MemUtil       float64
	KVBlocks      int // override; 0 = computed from the replica and MemUtil
	Spec          SpecConfig
	// InitialWeights is a schemas.Weight* state; empty means hot.
	InitialWeights string
}

// Sequence is one request as the engine sees it.
type Sequence struct {
	ID           string
	PromptTokens int
	// BlockHashes are the chained hashes of the prompt's full blocks
	// (internal/core/tokens); they drive prefix caching.
	BlockHashes []uint64
	MaxTokens   int
	Arrival     time.Time
	// Priority orders the waiting queue, lower first (schemas.PriorityRank:
	// 0 critical … 3 batch); equal priorities keep arrival order. This is
	// vLLM's priority scheduling policy: a batch sequence queued on a GPU
	// never delays an interactive one that arrives after it.
	Priority int
	// Critical marks a latency-critical sequence: while one decodes, steps
	// are capped at Config.CriticalStepTime.
	Critical bool
	// TPOTTarget is the sequence's mean time per output token target (0
	// for none). With Config.TargetStepCap, while it decodes, steps are
	// capped at StepTargetShare of it.
	TPOTTarget time.Duration

	// PrefillOnly is the prefill leg of a disaggregated request (issue 28,
	// phases.go): the sequence prefills its prompt, produces its first
	// token and finishes (OutputTokens 1, whatever MaxTokens says), but
	// its KV blocks stay held for a decode worker to pull until ReleaseKV
	// or until HoldKV after it finished (0: DefaultHoldKV).
	PrefillOnly bool
	HoldKV      time.Duration
	// Transferred is the decode leg: the prompt's KV arrives from the
	// prefill worker, so the engine allocates blocks for it on admission
	// and computes none of it, and the first token is counted as already
	// generated there (MaxTokens N: N−1 generated here, OutputTokens N).
	Transferred bool
}

// Emit is the tokens one sequence produced in a step.
type Emit struct {
	ID     string
	Tokens int
}

// Finished reports a completed sequence.
type Finished struct {
	ID                                       string
	PromptTokens, CachedTokens, OutputTokens int
	Arrival, FirstTokenAt, FinishedAt        time.Time
	Preemptions                              int
	// GPUSeconds is this sequence's share of the GPU time of every step it
	// took part in, prefill-only steps and recomputation after preemption
	// included (see attribute).
	GPUSeconds float64
	// Handoff marks a PrefillOnly sequence whose KV the engine now holds
	// for the decode leg: HeldBlocks blocks until HeldUntil (or ReleaseKV).
	Handoff    bool
	HeldBlocks int
	HeldUntil  time.Time
}

// Step is one iteration's outcome. Its slices are reused by the next call
// to Step: copy what must outlive it.
type Step struct {
	// Duration is how long the iteration takes from Step's now; while
	// weights load it is the remaining load time and nothing else happens.
	Duration  time.Duration
	Emitted   []Emit
	Finished  []Finished
	Stored    []uint64 // block hashes newly cached
	Evicted   []uint64 // block hashes dropped from the cache
	Preempted []string
	// GPUSeconds is compute time across the replica's GPUs (Duration × TP;
	// 0 while loading).
	GPUSeconds float64
	// Batch is the shape the step was costed with.
	Batch perf.Batch
}

// State is what a heartbeat reports.
type State struct {
	Weights        string
	KVBlocksTotal  int
	KVBlocksFree   int // empty plus evictable cached blocks
	KVBlocksCached int // blocks holding a prefix hash (referenced or not)
	Running        int
	Waiting        int
	// WaitingByPriority splits Waiting by Sequence.Priority. The engine
	// admits in class order, so only a request's own class and higher
	// wait ahead of it for a slot; admission's queue-depth shedding counts
	// no others.
	WaitingByPriority [NumPriorities]int
	// Prefilling is the running sequences whose prompt is not all computed
	// yet: admitted to the batch, still waiting for their first token.
	// A prompt admitted past a full prefill queue (the short-yield policy
	// dispatches such prompts) waits here rather than in Waiting, so the
	// autoscaler counts these as backlog too.
	Prefilling int
	// QueuedTokens is prompt tokens not yet computed (waiting and mid-prefill).
	QueuedTokens int
	// QueuedTokensByPriority splits QueuedTokens by Sequence.Priority
	// (schemas.PriorityRank; out-of-range priorities clamp to the ends).
	// Prefill is served in class order, so a placement predicting a
	// request's queue counts only its own class and higher.
	QueuedTokensByPriority [NumPriorities]int
	// KVBlocksByPriority splits the blocks in use (KVBlocksTotal −
	// KVBlocksFree) by the Sequence.Priority of the running sequences
	// holding them; a shared prefix block counts once, under the highest
	// class (lowest rank) holding it, because it is freed only when every
	// holder is preempted. A waiting sequence preempts strictly lower
	// classes, so blocks of ranks above its own are what it can reclaim.
	KVBlocksByPriority [NumPriorities]int
	// HeldKV is the PrefillOnly sequences whose KV is held for a decode
	// worker and KVBlocksHeld the blocks they hold, shared or not (in use
	// and, as no preemption frees them, under rank 0 of
	// KVBlocksByPriority). A held KV is neither running nor waiting.
	HeldKV       int
	KVBlocksHeld int
	MaxBatch     int
	TokenBudget  int
	SpecDecode   bool
	// TokensPerSec and Utilization are exponentially decayed over ~10 s of
	// engine time (output tokens per second; busy fraction).
	TokensPerSec float64
	Utilization  float64
	// ReadyAt is when a load in progress completes (zero unless loading).
	ReadyAt time.Time
}

type seq struct {
	Sequence
	computed    int // tokens whose KV is computed
	generated   int
	hashed      []lru.Slot // pool slots of the prompt's leading full blocks
	private     int        // unhashed blocks held
	cached      int        // prefix-cache hit at first admission
	admitted    bool
	decoding    bool
	firstToken  time.Time
	preemptions int
	gpuSec      float64   // attributed GPU-seconds so far
	inRun       bool      // in the running list
	heldUntil   time.Time // when a held KV (PrefillOnly) expires
	planAt      int       // index in the current step's plan, -1 if not planned
}

func (s *seq) total() int { return s.PromptTokens + s.generated }

type planned struct {
	s      *seq
	n      int // tokens computed this step (1+k for a decode)
	decode bool
}

// Engine is one replica's scheduler. It is not safe for concurrent use.
type Engine struct {
	cfg Config
	rep perf.Replica
	// model is rep's step formula, built once: the engine asks it every
	// step, and more than once in a step a cap is binding.
	model   perf.StepModel
	kv      *kvPool
	running []*seq
	waiting []*seq // FIFO; preempted sequences go to the front
	byID    map[string]*seq
	spec    bool
	rng     *rand.Rand

	weights   string
	loadUntil time.Time
	// tier is where the weights sit (schemas.Tier*): hbm while hot or
	// loading; loading reads from loadFrom.
	tier, loadFrom string

	plan                  []planned
	cur                   perf.Batch // what the plan costs so far
	capSec                float64    // step-time cap this step, 0 for none
	pre                   []*seq     // prefill candidates of the step being planned
	out                   Step
	storedBuf, evictedBuf []uint64

	lastEnd                     time.Time
	emaTokens, emaTime, emaBusy float64

	// holds are the finished PrefillOnly sequences whose KV is kept for a
	// decode worker (phases.go), by id; nextExpiry is no later than the
	// earliest of their expiries, so a step with none due skips them.
	holds      map[string]*seq
	nextExpiry time.Time
	expBuf     []*seq
	// now is the start of the step being planned (what a sequence that
	// finishes on admission is stamped with).
	now time.Time
}

// rateTau is the decay time of TokensPerSec and Utilization.
const rateTau = 10.0

// New builds an Engine.
func New(cfg Config) (*Engine, error) {
	if cfg.Replica.TP < 1 || cfg.Replica.Model.Layers == 0 {
		return nil, errors.New("engine: config needs a perf.Replica (perf.NewReplica)")
	}
	if cfg.MaxBatch <= 0 {
		cfg.MaxBatch = DefaultMaxBatch
	}
	if cfg.TokenBudget <= 0 {
		cfg.TokenBudget = DefaultTokenBudget
	}
	if cfg.CriticalStepTime == 0 {
		cfg.CriticalStepTime = DefaultCriticalStepTime
	}
	if cfg.ChunkSize <= 0 || cfg.ChunkSize > cfg.TokenBudget {
		cfg.ChunkSize = cfg.TokenBudget
	}
	if cfg.MemUtil <= 0 {
		cfg.MemUtil = perf.DefaultMemUtil
	}
	if cfg.KVBlocks <= 0 {
		cfg.KVBlocks = cfg.Replica.KVBlocks(tokens.BlockSize, cfg.MemUtil)
	}
	if cfg.KVBlocks <= 0 {
		return nil, fmt.Errorf("engine: no KV blocks left after weights (%s on %d× %s)", cfg.Replica.Model.Name, cfg.Replica.TP, cfg.Replica.GPU.Name)
	}
	if cfg.Spec.K <= 0 {
		cfg.Spec.K = 3
	}
	if cfg.Spec.Acceptance <= 0 || cfg.Spec.Acceptance >= 1 {
		cfg.Spec.Acceptance = 0.7
	}
	if cfg.Spec.DraftLayers < 0 {
		cfg.Spec.DraftLayers = 0
	} else if cfg.Spec.DraftLayers == 0 {
		cfg.Spec.DraftLayers = 1
	}
	w := cfg.InitialWeights
	switch w {
	case "":
		w = schemas.WeightHot
	case schemas.WeightHot, schemas.WeightSleeping, schemas.WeightCold, schemas.WeightAbsent:
	default:
		return nil, fmt.Errorf("engine: unknown initial weight state %q", w)
	}
	return &Engine{
		cfg:     cfg,
		rep:     cfg.Replica,
		model:   cfg.Replica.StepModel(),
		kv:      newKVPool(cfg.KVBlocks),
		byID:    make(map[string]*seq),
		holds:   make(map[string]*seq),
		spec:    cfg.Spec.Enabled,
		rng:     rand.New(rand.NewPCG(cfg.Spec.Seed, 0x5eed)),
		weights: w,
		tier:    schemas.WeightTier(w),
	}, nil
}

// Errors from Add.
var (
	ErrDuplicate = errors.New("engine: sequence id already queued")
	ErrTooLong   = errors.New("engine: sequence cannot fit in the KV cache")
	ErrPhases    = errors.New("engine: a sequence cannot be both PrefillOnly and Transferred")
)

// Add queues a sequence. A sequence whose prompt plus output can never fit
// in the whole KV cache is refused rather than preempting forever.
func (e *Engine) Add(s Sequence) error {
	if _, ok := e.byID[s.ID]; ok {
		return ErrDuplicate
	}
	if s.PromptTokens < 1 {
		s.PromptTokens = 1
	}
	if s.MaxTokens < 1 {
		s.MaxTokens = 1
	}
	if s.PrefillOnly && s.Transferred {
		return ErrPhases
	}
	if s.PrefillOnly {
		s.MaxTokens = 1 // the first token is the leg's whole output
	}
	if need := (s.PromptTokens + s.MaxTokens + e.cfg.Spec.K + tokens.BlockSize - 1) / tokens.BlockSize; need > e.kv.total {
		return fmt.Errorf("%w: needs %d blocks, cache has %d", ErrTooLong, need, e.kv.total)
	}
	q := &seq{Sequence: s, planAt: -1}
	e.byID[s.ID] = q
	e.enqueue(q, false)
	return nil
}

// enqueue inserts s into the waiting queue behind every sequence of equal
// or higher priority — or, for a preempted sequence (front), ahead of its
// own priority's queue so it resumes first.
func (e *Engine) enqueue(s *seq, front bool) {
	i := len(e.waiting)
	for i > 0 {
		w := e.waiting[i-1]
		if w.Priority < s.Priority || (!front && w.Priority == s.Priority) {
			break
		}
		i--
	}
	e.waiting = append(e.waiting, nil)
	copy(e.waiting[i+1:], e.waiting[i:])
	e.waiting[i] = s
}

// Cancel drops a sequence, freeing its KV; false if it is unknown or done.
// A held KV (PrefillOnly) is released as ReleaseKV does.
func (e *Engine) Cancel(id string) bool {
	s, ok := e.byID[id]
	if !ok {
		return e.ReleaseKV(id)
	}
	e.releaseBlocks(s)
	delete(e.byID, id)
	s.inRun = false
	e.running = removeSeq(e.running, s)
	e.waiting = removeSeq(e.waiting, s)
	return true
}

func removeSeq(list []*seq, s *seq) []*seq {
	for i, x := range list {
		if x == s {
			copy(list[i:], list[i+1:])
			list[len(list)-1] = nil
			return list[:len(list)-1]
		}
	}
	return list
}

// HasWork reports whether any sequence is queued or running. A held KV
// is not work: it needs no step, and expires at Step or Settle.
func (e *Engine) HasWork() bool { return len(e.running)+len(e.waiting) > 0 }

// SetSpecDecode switches speculative decoding at run time (the control loop
// turns it off under load, where verification costs more than it saves).
func (e *Engine) SetSpecDecode(on bool) { e.spec = on }

// SetBudgets changes the batch and token budgets; values ≤ 0 keep the
// current one.
func (e *Engine) SetBudgets(maxBatch, tokenBudget int) {
	if maxBatch > 0 {
		e.cfg.MaxBatch = maxBatch
	}
	if tokenBudget > 0 {
		e.cfg.TokenBudget = tokenBudget
		e.cfg.ChunkSize = min(e.cfg.ChunkSize, tokenBudget)
		if e.cfg.ChunkSize <= 0 {
			e.cfg.ChunkSize = tokenBudget
		}
	}
}

// SetWeightState moves the model's weights to state: hot starts a load on
// the next Step if needed (Wake starts it at once); sleeping, cold and
// absent unload them to the tier the state implies (schemas.WeightTier)
// — which discards the KV cache, as vLLM's sleep mode does, held KV
// included — and are refused while sequences are running.
func (e *Engine) SetWeightState(state string) error {
	if state == schemas.WeightHot {
		return nil
	}
	return e.SetWeightTier(schemas.WeightTier(state))
}

// SetWeightTier moves the weights out of HBM to a colder tier: host memory
// (asleep: vLLM's sleep level 1), the page cache or local disk (the engine
// stops; cold), remote (absent). A later load or wake reads from there,
// at that tier's speed (perf.Replica.TierSeconds). Refused while sequences
// are running, and for hbm (use Wake).
func (e *Engine) SetWeightTier(tier string) error {
	state := schemas.TierState(tier)
	switch state {
	case schemas.WeightSleeping, schemas.WeightCold, schemas.WeightAbsent:
	default:
		return fmt.Errorf("engine: cannot unload to weight tier %q", tier)
	}
	if len(e.running) > 0 {
		return fmt.Errorf("engine: %d sequences running", len(e.running))
	}
	e.dropHolds()
	e.kv.evictAll()
	e.weights, e.tier, e.loadUntil, e.loadFrom = state, tier, time.Time{}, ""
	return nil
}

// Wake starts bringing the weights into HBM at now, from the tier they sit
// in — a wake from host memory, an engine start from the page cache or
// disk, a download — as vLLM's /wake_up or a model load does: the engine
// serves once that tier's load time has passed, whether or not work
// arrives meanwhile. A no-op when hot or already loading.
func (e *Engine) Wake(now time.Time) {
	if e.weights == schemas.WeightHot || e.weights == schemas.WeightLoading {
		return
	}
	e.startLoad(now)
}

// Settle completes a load whose time has passed by now, so a heartbeat
// sent then says hot, and frees the held KV that has expired by now.
func (e *Engine) Settle(now time.Time) {
	e.expireHolds(now)
	if e.weights == schemas.WeightLoading && !now.Before(e.loadUntil) {
		e.weights, e.tier, e.loadUntil, e.loadFrom = schemas.WeightHot, schemas.TierHBM, time.Time{}, ""
	}
}

func (e *Engine) startLoad(now time.Time) {
	from := e.tier
	if from == "" || from == schemas.TierHBM {
		from = schemas.WeightTier(e.weights)
	}
	e.loadUntil = now.Add(time.Duration(e.rep.TierSeconds(from) * float64(time.Second)))
	e.weights, e.tier, e.loadFrom = schemas.WeightLoading, schemas.TierHBM, from
}

// Tier is where the weights sit now (schemas.Tier*).
func (e *Engine) Tier() string { return e.tier }

// ReadySeconds is how long from now until the engine can serve: 0 when
// hot, what is left of a load in progress, else the load from the tier
// the weights sit in.
func (e *Engine) ReadySeconds(now time.Time) float64 {
	switch e.weights {
	case schemas.WeightHot:
		return 0
	case schemas.WeightLoading:
		return max(0, e.loadUntil.Sub(now).Seconds())
	}
	return e.rep.TierSeconds(e.tier)
}

// NumPriorities is the number of priority ranks State splits queued tokens
// by: one per schemas.Priorities class.
const NumPriorities = 4

// priorityIndex clamps a Sequence.Priority into State's per-rank arrays.
func priorityIndex(p int) int { return min(max(p, 0), NumPriorities-1) }

// ClassMap writes the State's nonzero QueuedTokensByPriority into m keyed
// by class name (schemas.Heartbeat.QueuedTokensByClass), clearing m first
// and allocating it only when nil and needed, so a caller heartbeating
// often can reuse one map.
func (st *State) ClassMap(m map[string]int) map[string]int {
	return classMap(m, &st.QueuedTokensByPriority)
}

// KVClassMap writes the State's nonzero KVBlocksByPriority into m keyed by
// class name (schemas.Heartbeat.KVBlocksByClass), reusing m as ClassMap
// does.
func (st *State) KVClassMap(m map[string]int) map[string]int {
	return classMap(m, &st.KVBlocksByPriority)
}

// WaitingClassMap writes the State's nonzero WaitingByPriority into m
// keyed by class name (schemas.Heartbeat.WaitingByClass), reusing m as
// ClassMap does.
func (st *State) WaitingClassMap(m map[string]int) map[string]int {
	return classMap(m, &st.WaitingByPriority)
}

func classMap(m map[string]int, byRank *[NumPriorities]int) map[string]int {
	clear(m)
	for rank, n := range byRank {
		if n == 0 {
			continue
		}
		if m == nil {
			m = make(map[string]int, NumPriorities)
		}
		m[schemas.Priorities[rank]] = n
	}
	return m
}

// State reports the engine for heartbeats.
func (e *Engine) State() State {
	st := State{
		Weights:        e.weights,
		KVBlocksTotal:  e.kv.total,
		KVBlocksFree:   e.kv.available(),
		KVBlocksCached: len(e.kv.byHash),
		Running:        len(e.running),
		Waiting:        len(e.waiting),
		MaxBatch:       e.cfg.MaxBatch,
		TokenBudget:    e.cfg.TokenBudget,
		SpecDecode:     e.spec,
	}
	for _, s := range e.running {
		if !s.decoding {
			st.Prefilling++
			st.QueuedTokens += s.total() - s.computed
			st.QueuedTokensByPriority[priorityIndex(s.Priority)] += s.total() - s.computed
		}
	}
	for _, s := range e.waiting {
		st.WaitingByPriority[priorityIndex(s.Priority)]++
		if s.Transferred && !s.admitted {
			continue // its KV arrives computed: nothing to prefill
		}
		st.QueuedTokens += s.total()
		st.QueuedTokensByPriority[priorityIndex(s.Priority)] += s.total()
	}
	st.KVBlocksHeld = e.countBlocksByPriority(&st.KVBlocksByPriority)
	st.HeldKV = len(e.holds)
	if e.emaTime > 0 {
		st.TokensPerSec = e.emaTokens / e.emaTime
		st.Utilization = e.emaBusy / e.emaTime
	}
	if e.weights == schemas.WeightLoading {
		st.ReadyAt = e.loadUntil
	}
	return st
}

// countBlocksByPriority attributes every block the running sequences hold
// to the highest class holding it: classes are visited from the highest
// down, and a shared block already counted by an earlier class is marked
// seen. Only running sequences and held KV hold blocks (a preempted or not
// yet admitted one holds none), so the counts sum to the blocks in use.
// Held KV is counted first, under rank 0 whatever its class, a block it
// shares with running sequences included: no preemption frees such a
// block, and rank 0 is the one nobody reclaims from. It returns the
// blocks held KV holds. It is
// O(running + held + blocks held) and does not allocate.
func (e *Engine) countBlocksByPriority(byRank *[NumPriorities]int) (held int) {
	e.kv.census++
	if e.kv.census == 0 { // wrapped: clear stale marks that could now match
		e.kv.blocks.EachSlot(func(b *kvBlock) { b.seen = 0 })
		e.kv.census = 1
	}
	for _, s := range e.holds {
		held += s.private
		for _, i := range s.hashed {
			if node := e.kv.blocks.At(i); node.seen != e.kv.census {
				node.seen = e.kv.census
				held++
			}
		}
	}
	for rank := range NumPriorities {
		n := 0
		for _, s := range e.running {
			if priorityIndex(s.Priority) != rank {
				continue
			}
			n += s.private
			for _, i := range s.hashed {
				if node := e.kv.blocks.At(i); node.seen != e.kv.census {
					node.seen = e.kv.census
					n++
				}
			}
		}
		byRank[rank] = n
	}
	byRank[0] += held
	return held
}

// ensure grows s's blocks to hold n tokens. Leading full prompt blocks are
// hashed (shared, cached); the rest are private.
func (e *Engine) ensure(s *seq, n int) bool {
	need := (n + tokens.BlockSize - 1) / tokens.BlockSize
	for held := len(s.hashed) + s.private; held < need; held++ {
		if s.private == 0 && held < len(s.BlockHashes) && (held+1)*tokens.BlockSize <= s.PromptTokens {
			i, ok := e.kv.allocHashed(s.BlockHashes[held])
			if !ok {
				return false
			}
			s.hashed = append(s.hashed, i)
			continue
		}
		if !e.kv.allocPrivate() {
			return false
		}
		s.private++
	}
	return true
}

// releaseBlocks frees s's KV. Hashed blocks are released tail first so the
// end of a prefix is evicted before its start (vLLM does the same).
func (e *Engine) releaseBlocks(s *seq) {
	for i := len(s.hashed) - 1; i >= 0; i-- {
		e.kv.release(s.hashed[i])
	}
	s.hashed = s.hashed[:0]
	e.kv.releasePrivate(s.private)
	s.private = 0
}

// admitPrefix takes references on the cached prefix of a waiting sequence.
// At least the last token is always recomputed, to produce logits.
func (e *Engine) admitPrefix(s *seq) {
	for i := 0; i < len(s.BlockHashes) && (i+1)*tokens.BlockSize <= s.PromptTokens; i++ {
		n, ok := e.kv.lookup(s.BlockHashes[i])
		if !ok {
			break
		}
		s.hashed = append(s.hashed, n)
	}
	s.computed = min(len(s.hashed)*tokens.BlockSize, s.total()-1)
}

// victim is the running sequence preemption takes: the lowest class,
// the latest admitted within it (vLLM's priority policy), or nil when no
// running sequence has a class rank of at least floor.
func (e *Engine) victim(floor int) *seq {
	var v *seq
	for i := len(e.running) - 1; i >= 0; i-- {
		if s := e.running[i]; s.Priority >= floor && (v == nil || s.Priority > v.Priority) {
			v = s
		}
	}
	return v
}

// preempt evicts running sequence v back to the front of its class's
// waiting queue, to be recomputed, and returns the index it had in the
// running list. Its tokens already planned this step go back to budget.
func (e *Engine) preempt(v *seq, budget *int) int {
	j := slices.Index(e.running, v)
	copy(e.running[j:], e.running[j+1:])
	e.running[len(e.running)-1] = nil
	e.running = e.running[:len(e.running)-1]
	v.inRun = false
	if v.planAt >= 0 {
		*budget += e.plan[v.planAt].n
		copy(e.plan[v.planAt:], e.plan[v.planAt+1:])
		e.plan = e.plan[:len(e.plan)-1]
		for _, p := range e.plan[v.planAt:] {
			p.s.planAt--
		}
		v.planAt = -1
		spec, draft := e.cur.SpecTokens, e.cur.DraftLayers
		e.cur = perf.Batch{SpecTokens: spec, DraftLayers: draft}
		for _, p := range e.plan {
			addTo(&e.cur, p.s, p.n, p.decode)
		}
	}
	e.releaseBlocks(v)
	v.computed, v.decoding = 0, false
	v.preemptions++
	e.enqueue(v, true)
	e.out.Preempted = append(e.out.Preempted, v.ID)
	return j
}

// add plans n tokens of running sequence s.
func (e *Engine) add(s *seq, n int, decode bool, budget *int) {
	*budget -= n
	s.planAt = len(e.plan)
	e.plan = append(e.plan, planned{s: s, n: n, decode: decode})
	addTo(&e.cur, s, n, decode)
}

func addTo(b *perf.Batch, s *seq, n int, decode bool) {
	if decode {
		b.DecodeSeqs++
		b.DecodeContextTokens += s.computed
		return
	}
	b.PrefillTokens += n
	b.PrefillContext += s.computed
	b.PrefillSeqs++
}

// chunk is how many prompt tokens of s to compute this step: the rest of
// its prompt, within the token budget and chunk size, and, under the
// step-time cap, no more than keeps the predicted step inside it. Prefill
// always moves by at least one block a step, so a cap that decodes alone
// exceed slows prompts down but never stalls them.
func (e *Engine) chunk(s *seq, budget int) int {
	n := min(s.total()-s.computed, budget, e.cfg.ChunkSize)
	if e.capSec <= 0 || n <= 0 {
		return n
	}
	fits := func(m int) bool {
		b := e.cur
		addTo(&b, s, m, false)
		return e.model.Step(b) <= e.capSec
	}
	if fits(n) {
		return n
	}
	lo, hi := 0, n // fits(lo) or lo == 0; !fits(hi)
	for hi-lo > 1 {
		if m := (lo + hi) / 2; fits(m) {
			lo = m
		} else {
			hi = m
		}
	}
	if lo < tokens.BlockSize && e.cur.PrefillTokens == 0 {
		lo = min(n, tokens.BlockSize)
	}
	return lo
}

// admit moves waiting sequence s into the running set and plans its first
// chunk, preempting lower-class running work when it lacks a batch slot
// or KV blocks. After a preemption in this step only a sequence that can
// displace a lower class is admitted: re-admitting what was just
// preempted would only thrash. false when s cannot start this step.
func (e *Engine) admit(s *seq, preempted bool, budget *int) bool {
	if preempted && e.victim(s.Priority+1) == nil {
		return false
	}
	for len(e.running) >= e.cfg.MaxBatch {
		v := e.victim(s.Priority + 1)
		if v == nil {
			return false
		}
		e.preempt(v, budget)
	}
	if s.Transferred && !s.admitted {
		return e.admitTransferred(s, budget)
	}
	for {
		e.admitPrefix(s)
		n := e.chunk(s, *budget)
		if n == 0 {
			e.releaseBlocks(s)
			return false // the step-time cap is reached
		}
		if e.ensure(s, s.computed+n) {
			if !s.admitted {
				s.cached, s.admitted = s.computed, true
			}
			e.waiting[0] = nil // s is the head
			e.waiting = e.waiting[1:]
			s.inRun = true
			e.running = append(e.running, s)
			e.add(s, n, false, budget)
			return true
		}
		e.releaseBlocks(s)
		v := e.victim(s.Priority + 1)
		if v == nil {
			return false
		}
		e.preempt(v, budget)
	}
}

// attribute splits a step's GPU-seconds over the sequences planned in it,
// in proportion to the tokens each computed (a decode's 1+k, a prefill
// chunk's length). Every step's time lands on someone: a prefill-only step
// is charged to the prompts it prefilled, not carried to whoever emits
// next, and work redone after a preemption is charged to its sequence.
// Tokens are the unit because the step's cost model is per token; a
// decode token in a long context costs more than its count says, which
// this rule does not try to model.
func (e *Engine) attribute(gpuSec float64) {
	n := 0
	for _, p := range e.plan {
		n += max(p.n, 1)
	}
	if n == 0 || gpuSec <= 0 {
		return
	}
	per := gpuSec / float64(n)
	for _, p := range e.plan {
		p.s.gpuSec += per * float64(max(p.n, 1))
	}
}

// Progress is how far a queued or running sequence has come: the output
// tokens it generated, its cached prompt tokens, and the GPU time
// attributed to it — what a cancel reports it spent. ok is false when the
// engine does not hold it.
func (e *Engine) Progress(id string) (generated, cached int, gpuSeconds float64, ok bool) {
	s, ok := e.byID[id]
	if !ok {
		return 0, 0, 0, false
	}
	return max(0, s.generated), s.cached, s.gpuSec, true
}

// account folds a step into the decayed rate counters, counting idle time
// since the previous step as well.
func (e *Engine) account(now time.Time, dur time.Duration, emitted int, busy bool) {
	gap := 0.0
	if !e.lastEnd.IsZero() && now.After(e.lastEnd) {
		gap = now.Sub(e.lastEnd).Seconds()
	}
	d := dur.Seconds()
	decay := math.Exp(-(gap + d) / rateTau)
	e.emaTokens = e.emaTokens*decay + float64(emitted)
	e.emaTime = e.emaTime*decay + gap + d
	e.emaBusy *= decay
	if busy {
		e.emaBusy += d
	}
	e.lastEnd = now.Add(dur)
}
