package schemas

import "time"

// Priority classes, highest first. The class names appear in subjects
// (sy.admitted.<class>...), metrics labels and reports.
const (
	PriorityCritical    = "critical"
	PriorityInteractive = "interactive"
	PriorityStandard    = "standard"
	PriorityBatch       = "batch"
)

// Priorities lists the classes from highest to lowest.
var Priorities = []string{PriorityCritical, PriorityInteractive, PriorityStandard, PriorityBatch}

// PriorityRank returns 0 for the highest class, len(Priorities)-1 for the
// lowest, and -1 for an unknown class.
func PriorityRank(p string) int {
	for i, c := range Priorities {
		if c == p {
			return i
		}
	}
	return -1
}

// Message is one chat message, in the OpenAI shape.
type Message struct {
	Role    string `json:"role"`
	Content string `json:"content"`
}

// Workflow places a request inside a multi-step agentic workflow.
type Workflow struct {
	ID   string `json:"id"`
	Step int    `json:"step"` // 1-based
	Of   int    `json:"of"`   // total steps, 0 when unknown
	// DeadlineMs is the whole workflow's latency budget from its first step,
	// in milliseconds. Optional: without it only per-step deadlines apply.
	DeadlineMs int64 `json:"deadline_ms,omitempty"`
	// ToolState is an opaque digest of the tool results the step depends on;
	// the semantic cache keys on it so a changed tool result never replays a
	// stale answer.
	ToolState string `json:"tool_state,omitempty"`
}

// Request is what a client publishes on sy.submit.<tenant>. The tenant is
// taken from the subject, never from this payload.
type Request struct {
	V           int       `json:"v,omitempty"`
	ID          string    `json:"id,omitempty"`
	Model       string    `json:"model"`
	Prompt      string    `json:"prompt,omitempty"`
	Messages    []Message `json:"messages,omitempty"`
	MaxTokens   int       `json:"max_tokens"`
	Temperature *float64  `json:"temperature,omitempty"`
	Seed        *int64    `json:"seed,omitempty"`
	// TopP, Stop, ResponseFormat and Tools are OpenAI's fields of the same
	// names. Each can change the answer, so each is part of a response
	// cache key (internal/core/cache): two requests that differ in one
	// never share a cached answer. ResponseFormat and Tools are kept as
	// decoded JSON (or msgpack) values, so either encoding carries them.
	TopP           *float64         `json:"top_p,omitempty"`
	Stop           []string         `json:"stop,omitempty"`
	ResponseFormat map[string]any   `json:"response_format,omitempty"`
	Tools          []map[string]any `json:"tools,omitempty"`
	// Priority is one of Priorities; empty means the tenant's default.
	Priority string `json:"priority,omitempty"`
	// DeadlineMs is the latency budget from submission to final result.
	DeadlineMs int64 `json:"deadline_ms,omitempty"`
	// Deadline is an absolute deadline; when both are set the earlier wins.
	Deadline *time.Time `json:"deadline,omitempty"`
	// TTFTTargetMs and TPOTTargetMs are the caller's latency objective
	// beyond the deadline: time to first token, and mean time per output
	// token after it. A result's slo_met holds them (internal/core/slo);
	// zero promises only the deadline.
	TTFTTargetMs float64           `json:"ttft_target_ms,omitempty"`
	TPOTTargetMs float64           `json:"tpot_target_ms,omitempty"`
	Workflow     *Workflow         `json:"workflow,omitempty"`
	SessionID    string            `json:"session_id,omitempty"`
	PrefixHint   string            `json:"prefix_hint,omitempty"`
	Stream       bool              `json:"stream,omitempty"`
	NoCache      bool              `json:"no_cache,omitempty"`
	Metadata     map[string]string `json:"metadata,omitempty"`
}

// Deterministic reports whether the same request always yields the same
// answer, which is what makes an exact response cache safe.
func (r *Request) Deterministic() bool {
	return (r.Temperature != nil && *r.Temperature == 0) || r.Seed != nil
}

// Admitted is the envelope the admitter publishes on
// sy.admitted.<class>.<bucket>.<tenant> and the router consumes: the
// client's request plus everything admission decided or measured.
type Admitted struct {
	V       int     `json:"v,omitempty"`
	Request Request `json:"request"`
	Tenant  string  `json:"tenant"`
	// Priority is the effective class after tenant defaults.
	Priority string `json:"priority"`
	// Model is the effective model after a Move decision (may differ from
	// Request.Model when `auto` or a downgrade applied).
	Model       string    `json:"model"`
	SubmittedAt time.Time `json:"submitted_at"`
	Deadline    time.Time `json:"deadline"`
	// PromptTokens is the tokenizer's count of the prompt.
	PromptTokens int `json:"prompt_tokens"`
	// BlockHashes are the chained hashes of the prompt's full KV blocks
	// (internal/core/tokens), used for prefix-aware placement.
	BlockHashes []uint64 `json:"block_hashes,omitempty"`
	// Attempt is 0 for the first placement and counts retries after.
	Attempt int `json:"attempt,omitempty"`
	// ExcludeWorkers lists workers a retry must avoid.
	ExcludeWorkers []string `json:"exclude_workers,omitempty"`
	ResultFormat   string   `json:"result_format,omitempty"`
	// WorkflowStartedAt is when the request's workflow began (its first
	// step's submission), zero for a lone request: placement splits the
	// workflow's remaining budget over its remaining steps from it.
	WorkflowStartedAt time.Time `json:"workflow_started_at,omitempty"`
	// TTFTTargetMs and TPOTTargetMs are the request's latency objective
	// beyond its deadline (time to first token, mean time per output token
	// after it); zero means only the deadline is promised (internal/core/slo).
	TTFTTargetMs float64 `json:"ttft_target_ms,omitempty"`
	TPOTTargetMs float64 `json:"tpot_target_ms,omitempty"`
}

// Dispatch is what the router publishes on sy.dispatch.<worker>.
type Dispatch struct {
	V        int       `json:"v,omitempty"`
	Admitted Admitted  `json:"admitted"`
	WorkerID string    `json:"worker_id"`
	RouterID string    `json:"router_id,omitempty"`
	PlacedAt time.Time `json:"placed_at"`
	// PredictedSeconds is the placement's predicted completion time, kept so
	// the breaker can compare it with what happened.
	PredictedSeconds float64 `json:"predicted_s,omitempty"`
	CachedTokens     int     `json:"cached_tokens,omitempty"`
	// Phase is which leg of a disaggregated request this dispatch runs:
	// "" (PhaseBoth) runs the whole request, PhasePrefill the prompt and
	// its first token only, PhaseDecode the rest from KV another worker
	// computed. See docs/architecture.md, "Disaggregated serving".
	Phase string `json:"phase,omitempty"`
	// DecodeWorker, on a prefill leg, is the worker the router planned to
	// decode on (the handoff may still go elsewhere if it died).
	DecodeWorker string `json:"decode_worker,omitempty"`
	// Handoff, on a decode leg, is the prefill leg's KV handle: where the
	// KV sits, how much of it, until when, and the first token.
	Handoff *KVHandle `json:"handoff,omitempty"`
	// TransferSeconds, on a decode leg, is the KV transfer time the
	// placement priced (the simulated worker waits it).
	TransferSeconds float64 `json:"transfer_s,omitempty"`
}

// Dispatch phases and worker roles. A worker's role (Heartbeat.Role) says
// which phases it takes: RoleBoth (the default, "" reads as it) takes all.
const (
	PhaseBoth    = ""
	PhasePrefill = "prefill"
	PhaseDecode  = "decode"

	RoleBoth    = "both"
	RolePrefill = "prefill"
	RoleDecode  = "decode"
)

// ValidRole reports whether r is a worker role ("" reads as RoleBoth).
func ValidRole(r string) bool {
	switch r {
	case "", RoleBoth, RolePrefill, RoleDecode:
		return true
	}
	return false
}

// RoleTakes reports whether a worker of role takes a dispatch of phase.
func RoleTakes(role, phase string) bool {
	switch role {
	case RolePrefill:
		return phase == PhasePrefill
	case RoleDecode:
		return phase == PhaseDecode
	}
	return true
}

// KVHandle is what a prefill leg leaves on the bus (sy.handoff.<tenant>.<id>)
// when it is done: the prompt's KV on Worker, held until ExpiresAt, and
// the first token it produced. The router answers it with the decode
// leg's dispatch. A handle with Failed set is a leg that could not go on
// (the decode worker could not pull the KV: expired, source gone,
// transfer timed out): the router re-places the request under its retry
// budget. vLLM's NixlConnector calls the same facts kv_transfer_params.
type KVHandle struct {
	V         int    `json:"v,omitempty"`
	RequestID string `json:"request_id"`
	Tenant    string `json:"tenant"`
	// Attempt is the dispatch attempt whose prefill this is; a handle of
	// an attempt the router has re-placed is stale and ignored.
	Attempt int `json:"attempt,omitempty"`
	// Worker is the prefill worker holding the KV; Link its network link
	// (catalog name) and DecodeWorker the worker the router planned.
	Worker       string `json:"worker"`
	Link         string `json:"link,omitempty"`
	DecodeWorker string `json:"decode_worker,omitempty"`
	// PromptTokens is the prompt the KV covers, CachedTokens how much of
	// it the prefill worker found already cached, Blocks the KV blocks it
	// holds for the request and BlockIDs their ids where the engine has
	// them (vLLM's remote_block_ids).
	PromptTokens int      `json:"prompt_tokens"`
	CachedTokens int      `json:"cached_tokens,omitempty"`
	Blocks       int      `json:"blocks"`
	BlockIDs     []int    `json:"block_ids,omitempty"`
	BlockHashes  []uint64 `json:"block_hashes,omitempty"`
	// FirstToken is the first generated token's text (already streamed
	// to the client when the request streams), FirstTokenAt when it was
	// produced.
	FirstToken   string    `json:"first_token,omitempty"`
	FirstTokenAt time.Time `json:"first_token_at"`
	ExpiresAt    time.Time `json:"expires_at"`
	// GPUSeconds is the prefill leg's GPU time, carried into the final
	// result's cost.
	GPUSeconds float64 `json:"gpu_seconds,omitempty"`
	// CostUSD is the prefill leg's GPU cost at the prefill worker's own
	// price: the decode worker adds it to its leg's cost, since pricing
	// both legs at the decode GPU's rate misprices a split across GPU
	// generations (the point of splitting). Zero from an older prefill
	// worker: the decode worker then prices GPUSeconds at its own rate.
	CostUSD float64 `json:"cost_usd,omitempty"`
	// Engine carries an engine's own transfer parameters (vLLM's
	// kv_transfer_params as the prefill response returned them).
	Engine map[string]any `json:"engine,omitempty"`
	// Failed, set by a decode worker, says the leg could not go on.
	Failed *Error `json:"failed,omitempty"`
}

// Result statuses. Every final result has exactly one.
const (
	StatusOK       = "ok"
	StatusRejected = "rejected" // the request was invalid or not allowed
	StatusShed     = "shed"     // refused to protect deadlines under load
	StatusFailed   = "failed"   // accepted but could not be completed
)

// Usage counts tokens, OpenAI style, plus cached prompt tokens.
type Usage struct {
	PromptTokens     int `json:"prompt_tokens"`
	CompletionTokens int `json:"completion_tokens"`
	CachedTokens     int `json:"cached_tokens,omitempty"`
}

// Timing breaks down where a request's time went, in milliseconds.
type Timing struct {
	QueueMs float64 `json:"queue_ms"`
	TTFTMs  float64 `json:"ttft_ms"`
	// ITLMs is the mean inter-token latency of the decode phase.
	ITLMs   float64 `json:"itl_ms"`
	TotalMs float64 `json:"total_ms"`
}

// Result is the one final answer for a request, published on
// sy.result.<tenant>.<id>.
type Result struct {
	V            int        `json:"v,omitempty"`
	ID           string     `json:"id"`
	Tenant       string     `json:"tenant"`
	Status       string     `json:"status"`
	Error        *Error     `json:"error,omitempty"`
	Model        string     `json:"model,omitempty"`
	Text         string     `json:"text,omitempty"`
	FinishReason string     `json:"finish_reason,omitempty"`
	Usage        Usage      `json:"usage"`
	Timing       Timing     `json:"timing"`
	WorkerID     string     `json:"worker_id,omitempty"`
	GPU          string     `json:"gpu,omitempty"`
	Simulated    bool       `json:"simulated"`
	FromCache    string     `json:"from_cache,omitempty"` // "exact" or "semantic"
	Priority     string     `json:"priority,omitempty"`
	Attempt      int        `json:"attempt,omitempty"`
	GPUSeconds   float64    `json:"gpu_seconds,omitempty"`
	CostUSD      float64    `json:"cost_usd,omitempty"`
	SLOMet       bool       `json:"slo_met"`
	Deadline     *time.Time `json:"deadline,omitempty"`
	FinishedAt   time.Time  `json:"finished_at"`
	// Reliability is set when the request was resumed mid-stream after a
	// worker loss (see Reliability).
	Reliability *Reliability `json:"reliability,omitempty"`
}

// ModelState is one model's residency on a worker.
type ModelState struct {
	Name  string `json:"name"`
	Dtype string `json:"dtype,omitempty"`
	// State is one of WeightHot, WeightSleeping, WeightLoading, WeightCold.
	State string `json:"state"`
	// LoadSeconds is the worker's own estimate of the time until the model
	// serves from where its weights are now: the wake for a sleeping one,
	// what is left of a load in progress, the load from disk for a cold one
	// (a hot one gives its cold load, what an unload would cost).
	LoadSeconds float64 `json:"load_s,omitempty"`
	// Tier says where the weights sit (TierHBM, TierHost, TierPageCache,
	// TierDisk, TierRemote; the catalog's weight tiers): State says what the
	// engine does with them, Tier what a load would read from. Empty from
	// workers that do not say; WeightTier gives the tier a state implies.
	Tier string `json:"tier,omitempty"`
	// TierSeconds is the worker's estimate of the load from each tier it
	// can fall to (key: tier name), so the controller can price a sleep or
	// an unload before commanding it. Optional.
	TierSeconds map[string]float64 `json:"tier_s,omitempty"`
	// TierMeasured names the tiers whose TierSeconds are this worker's own
	// measure of a real load or wake from that tier (a real engine's: an
	// Ollama reload through the page cache, a vLLM wake from host memory);
	// the others are estimates. Optional.
	TierMeasured []string `json:"tier_measured,omitempty"`
	// ContextLength is the model's context window in tokens as this worker
	// serves it (vLLM's max_model_len), 0 when the worker does not know.
	// The admitter checks prompt + max_tokens against it for models the
	// catalog does not know, and in preference to the catalog's figure.
	ContextLength int `json:"context_length,omitempty"`
	// Spec describes a model the built-in catalog may not know (modelspec.go).
	Spec *ModelSpec `json:"spec,omitempty"`
}

// Weight residency states.
const (
	WeightHot      = "hot"      // in HBM, serving
	WeightSleeping = "sleeping" // offloaded to host memory; fast wake
	WeightLoading  = "loading"
	WeightCold     = "cold" // on local disk only
	WeightAbsent   = "absent"
)

// Weight tiers (ModelState.Tier), hottest first: in HBM and serving; asleep
// in host memory (a wake of about a second, the GPU still held); in the
// host's page cache or on local NVMe (the engine starts and reads them at
// disk speed); in a registry or object store only (downloaded first).
const (
	TierHBM       = "hbm"
	TierHost      = "host"
	TierPageCache = "page_cache"
	TierDisk      = "disk"
	TierRemote    = "remote"
)

// WeightTier is the tier a weight state implies when a worker names none:
// hot and loading weights are (or are becoming) HBM-resident, sleeping ones
// sit in host memory, cold ones on local disk, absent ones remotely.
func WeightTier(state string) string {
	switch state {
	case WeightHot, WeightLoading:
		return TierHBM
	case WeightSleeping:
		return TierHost
	case WeightCold:
		return TierDisk
	case WeightAbsent:
		return TierRemote
	}
	return ""
}

// TierState is the weight state of weights that sit in tier: the inverse
// of WeightTier (the page cache is cold, as local disk is).
func TierState(tier string) string {
	switch tier {
	case TierHBM:
		return WeightHot
	case TierHost:
		return WeightSleeping
	case TierPageCache, TierDisk:
		return WeightCold
	case TierRemote:
		return WeightAbsent
	}
	return ""
}

// Heartbeat is what a worker publishes on sy.hb.<pool>.<worker> about once a
// second. The router's fleet view is built from these and from KV events.
type Heartbeat struct {
	V         int    `json:"v,omitempty"`
	WorkerID  string `json:"worker_id"`
	Pool      string `json:"pool"`
	GPU       string `json:"gpu"`                // catalog name, e.g. "h100"
	GPUName   string `json:"gpu_name,omitempty"` // NVML's device name when real
	Arch      string `json:"arch,omitempty"`
	Simulated bool   `json:"simulated"`
	Backend   string `json:"backend"`
	TP        int    `json:"tp"`
	// Role is which phases the worker takes (RolePrefill, RoleDecode,
	// RoleBoth; "" reads as RoleBoth) and Link its network link for KV
	// transfers, a catalog link name ("" when it has none: it takes no
	// split leg).
	Role string `json:"role,omitempty"`
	Link string `json:"link,omitempty"`

	HBMTotalBytes uint64  `json:"hbm_total_bytes"`
	HBMFreeBytes  uint64  `json:"hbm_free_bytes"`
	KVBlocksTotal int     `json:"kv_blocks_total"`
	KVBlocksFree  int     `json:"kv_blocks_free"`
	BlockSize     int     `json:"block_size"`
	Utilization   float64 `json:"utilization"`

	Models []ModelState `json:"models"`

	Running      int `json:"running"`
	Waiting      int `json:"waiting"`
	QueuedTokens int `json:"queued_tokens"` // prompt tokens not yet prefilled
	// Prefilling is how many of Running have not produced their first
	// token (their prompt is still being prefilled): the simulated
	// engine's own count; in front of a real engine, the worker's requests
	// sent with no byte back beyond the engine's waiting count (no engine
	// reports the split).
	Prefilling int `json:"prefilling,omitempty"`
	// StepCap: the engine cuts its prefill chunks to what fits in a step
	// beside its decodes' TPOT targets (Switchyard's engine,
	// engine.Config.TargetStepCap), so the prompts it is prefilling share
	// each step rather than run one after another. A real engine's
	// worker leaves it false: vLLM, SGLang and Ollama fix their token
	// budget at start.
	StepCap        bool      `json:"step_cap,omitempty"`
	MaxBatch       int       `json:"max_batch"`
	TokensPerSec   float64   `json:"tokens_per_s"`
	SpecDecode     bool      `json:"spec_decode"`
	Draining       bool      `json:"draining"`
	KVSeq          uint64    `json:"kv_seq"` // last KV event sequence number published
	Seq            uint64    `json:"seq"`
	SentAt         time.Time `json:"sent_at"`
	PricePerHour   float64   `json:"price_per_hour"`
	CompletedTotal uint64    `json:"completed_total"`
	ErrorsTotal    uint64    `json:"errors_total"`

	// QueuedTokensByClass splits QueuedTokens by priority class (absent
	// classes have none). The engine prefills in class order, so the router
	// counts only a request's own class and higher as work ahead of it; a
	// heartbeat without it is read as all of QueuedTokens ahead of everyone.
	QueuedTokensByClass map[string]int `json:"queued_tokens_by_class,omitempty"`
	// WaitingByClass splits Waiting by priority class (absent classes have
	// none). The engine admits in class order, so admission's queue-depth
	// shedding counts only a request's own class and higher as waiting
	// ahead of it; a heartbeat without it (a real engine, whose metrics do
	// not split its queue) is read as all of Waiting ahead of everyone.
	WaitingByClass map[string]int `json:"waiting_by_class,omitempty"`
	// KVBlocksByClass splits the KV blocks in use (KVBlocksTotal −
	// KVBlocksFree) by the class of the running sequences holding them; a
	// block several sequences share counts once, under the highest class
	// among them, since only preempting all of them frees it. The engine
	// preempts strictly lower classes for a waiting sequence, so the router
	// counts lower classes' blocks as reclaimable by a higher one; a
	// heartbeat without it is read as every used block held by the highest
	// class (nothing reclaimable).
	KVBlocksByClass map[string]int `json:"kv_blocks_by_class,omitempty"`
}

// KV event kinds.
const (
	KVStored   = "stored"
	KVEvicted  = "evicted"
	KVCleared  = "cleared"
	KVSnapshot = "snapshot" // the full set of resident block hashes
)

// KVEvent reports block-level prefix cache changes on one worker, on
// sy.kv.<worker>. Seq increases by one per event so a receiver can detect a
// gap and ask for a snapshot.
type KVEvent struct {
	V        int       `json:"v,omitempty"`
	WorkerID string    `json:"worker_id"`
	Seq      uint64    `json:"seq"`
	Kind     string    `json:"kind"`
	Hashes   []uint64  `json:"hashes,omitempty"`
	At       time.Time `json:"at"`
}

// Event is a decision with its reasons, published on sy.event.<service>.<kind>.
type Event struct {
	V         int            `json:"v,omitempty"`
	At        time.Time      `json:"at"`
	Service   string         `json:"service"`
	Kind      string         `json:"kind"`
	RequestID string         `json:"request_id,omitempty"`
	Tenant    string         `json:"tenant,omitempty"`
	WorkerID  string         `json:"worker_id,omitempty"`
	Reason    string         `json:"reason,omitempty"`
	Fields    map[string]any `json:"fields,omitempty"`
}

// Cancel asks workers (and routers) to stop work on a request, on
// sy.ctl.cancel.<tenant>.
type Cancel struct {
	V         int       `json:"v,omitempty"`
	RequestID string    `json:"request_id"`
	Tenant    string    `json:"tenant"`
	Reason    string    `json:"reason"`
	At        time.Time `json:"at"`
}

// TokenChunk is one piece of a streamed answer, published at
// sy.tok.<tenant>.<id> as tokens are generated. Seq starts at 1 and
// increases by one per chunk so a follower can detect a gap; the chunk with
// Done set is the last. Followers receive chunks as core NATS messages; the
// TOKENS stream also keeps them for a few minutes, so that a worker which
// takes over a request whose worker died mid-stream continues it from what
// was already sent: its first chunk has Seq one past the last stored one
// and a higher Attempt. A follower therefore drops a chunk whose Seq it has
// already delivered, and chunks of an attempt older than one it has seen.
// The durable answer is the Result in RESULTS, which a late subscriber
// still gets.
type TokenChunk struct {
	V    int       `json:"v,omitempty"`
	ID   string    `json:"id"`
	Seq  uint64    `json:"seq"`
	Text string    `json:"text"`
	Done bool      `json:"done,omitempty"`
	At   time.Time `json:"at"`
	// Tokens is how many output tokens Text holds (0 when the producer
	// cannot tell, e.g. a gateway relaying words). A worker resuming the
	// request sums it over the stored chunks to know how far it got.
	Tokens int `json:"tokens,omitempty"`
	// Attempt is the dispatch attempt that produced the chunk (Admitted.Attempt).
	Attempt int `json:"attempt,omitempty"`
}

// Reliability says what the control plane's failover did for one request:
// set on a final result whose request continued on this worker after the
// worker of an earlier attempt was lost mid-stream.
type Reliability struct {
	// ResumedFromSeq is the last chunk the earlier attempts had streamed;
	// this worker's chunks started after it.
	ResumedFromSeq uint64 `json:"resumed_from_seq"`
	// ResumedTokens is how many output tokens had been streamed before the
	// loss; they are in Usage.CompletionTokens and in Text.
	ResumedTokens int `json:"resumed_tokens"`
	// ReprefillTokens is what this worker prefilled to continue: the prompt
	// plus the resumed tokens, less what its prefix cache held.
	ReprefillTokens int `json:"reprefill_tokens"`
	// ReprefillGPUSeconds is that prefill's GPU time (included in the
	// result's GPUSeconds and CostUSD): the price of the lost KV cache.
	ReprefillGPUSeconds float64 `json:"reprefill_gpu_seconds"`
	// LostWorkers are the workers earlier attempts were lost on.
	LostWorkers []string `json:"lost_workers,omitempty"`
}
