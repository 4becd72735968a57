// Package perf owns Switchyard's GPU performance model: a roofline estimate
// of one engine iteration (continuous batching, chunked prefill) on a replica
// of TP GPUs, following shared/research/gpu-model.md §4. Everything here is a
// pure function of a catalog entry and a batch shape; the worker engine, the
// simulator, the router's cost model and `switchyard gpu predict` all use it.
//
// Per layer and GPU, the GEMM time is hypot(compute, memory): the hypot form
// matches Vidur's kernel profiles around the compute/bandwidth knee (4.4 % /
// 7.6 % MAPE on A100 / H100) where a plain max() is ~25 % low. Attention adds
// FLOPs that grow with context and KV reads at paged-attention efficiency;
// tensor parallelism adds two all-reduces per layer. Fixed launch, sampler
// and per-request overheads come from BLIS's fitted step model and vLLM
// profiles. Calibration against published serving numbers is in
// calibration_test.go.
package perf

import (
	"fmt"
	"math"
	"strings"

	"github.com/switchyard-ai/switchyard/internal/core/catalog"
	"github.com/switchyard-ai/switchyard/schemas"
)

// Engine constants (gpu-model.md §4 unless noted).
const (
	// etaAttn is FlashAttention's fraction of peak on prefill attention.
	etaAttn = 0.5
	// etaKV is paged decode attention's fraction of HBM bandwidth when it
	// reads the KV cache (DistServe A100 fit ⇒ 64 %, BLIS ⇒ ~51 %).
	etaKV = 0.6
	// perLayerSeconds covers kernel launches, norms and rope per layer with
	// CUDA graphs (BLIS fit: 32 µs; gpu-model.md proposes 30 µs).
	perLayerSeconds = 30e-6
	// perStepSeconds is the scheduler, sampler and host sync per iteration.
	perStepSeconds = 0.3e-3
	// activationReserveBytes is kept free of KV for activations and CUDA
	// graphs (gpu-model.md §4 "~2 GB").
	activationReserveBytes = 2 << 30
	// DefaultMemUtil is vLLM's default gpu_memory_utilization.
	DefaultMemUtil = 0.9
)

// Serving engines whose host-side overheads differ (gpu-model.md §4).
const (
	EngineVLLM   = "vllm" // the default
	EngineSGLang = "sglang"
	EngineTRTLLM = "trtllm"
)

// engineOverhead is what the host side of a serving engine adds per step.
type engineOverhead struct {
	// perSeq is per-sequence scheduling and sampling bookkeeping: 20 µs for
	// the Python engines vLLM/SGLang, 5 µs for TensorRT-LLM's C++ runtime
	// (gpu-model.md §4; BLIS fitted 4.4 µs/request).
	perSeq float64
	// minStep is the CPU-bound floor of one iteration: small models at
	// batch 1 cannot go faster than the host loop. vLLM PR #11078 measured
	// 2.16 ms/token for Llama-3.2-1B on H100 where the roofline says 1.6 ms
	// (gpu-model.md §5 suggests a 1.5-2 ms floor). The C++ runtime's floor
	// is assumed at 0.5 ms (no measurement).
	minStep float64
}

var engines = map[string]engineOverhead{
	EngineVLLM:   {perSeq: 20e-6, minStep: 2.0e-3},
	EngineSGLang: {perSeq: 20e-6, minStep: 2.0e-3},
	EngineTRTLLM: {perSeq: 5e-6, minStep: 0.5e-3},
}

// Replica is one model served on TP GPUs of one type.
type Replica struct {
	GPU   catalog.GPU
	Model catalog.Model
	Dtype string
	TP    int
	// Engine is the serving engine (EngineVLLM when empty); it sets the
	// host-side overheads. Use WithEngine to change it.
	Engine string
	// cat is the catalog the replica was built from: its weight tiers price
	// LoadSeconds (nil: the default catalog's).
	cat *catalog.Catalog
}

// WithEngine returns r served by engine (vllm, sglang or trtllm).
func (r Replica) WithEngine(engine string) (Replica, error) {
	e := strings.ToLower(engine)
	if _, ok := engines[e]; !ok {
		return r, fmt.Errorf("perf: unknown engine %q (want vllm, sglang or trtllm)", engine)
	}
	r.Engine = e
	return r, nil
}

func (r *Replica) overhead() engineOverhead {
	// A switch, not a map lookup: StepSeconds runs thousands of times per
	// placement pass and per simulated second.
	switch r.Engine {
	case EngineTRTLLM:
		return engines[EngineTRTLLM]
	case EngineSGLang:
		return engines[EngineSGLang]
	}
	return engines[EngineVLLM]
}

// NewReplica validates and builds a replica. Errors: unknown GPU or model,
// unknown dtype, FP8 on a part without FP8 tensor cores, TP that does not
// divide the attention heads, or weights that leave no room for KV cache.
func NewReplica(c *catalog.Catalog, gpu, model, dtype string, tp int) (Replica, error) {
	if c == nil {
		c = catalog.Default()
	}
	g, ok := c.GPU(gpu)
	if !ok {
		return Replica{}, fmt.Errorf("perf: unknown gpu %q", gpu)
	}
	m, ok := c.Model(model)
	if !ok {
		return Replica{}, fmt.Errorf("perf: unknown model %q", model)
	}
	if dtype == "" {
		dtype = catalog.DtypeBF16
	}
	dtype = strings.ToLower(dtype)
	if catalog.DtypeBytes(dtype) == 0 {
		return Replica{}, fmt.Errorf("perf: unknown dtype %q (want bf16, fp16 or fp8)", dtype)
	}
	if !m.SupportsDtype(dtype) {
		return Replica{}, fmt.Errorf("perf: model %s is not offered in %s", m.Name, dtype)
	}
	if dtype == catalog.DtypeFP8 && !g.FP8 {
		return Replica{}, fmt.Errorf("perf: %s (%s) has no FP8 tensor cores", g.Name, g.Arch)
	}
	if tp < 1 {
		return Replica{}, fmt.Errorf("perf: tp must be >= 1, got %d", tp)
	}
	if m.Heads%tp != 0 {
		return Replica{}, fmt.Errorf("perf: tp %d does not divide %s's %d attention heads", tp, m.Name, m.Heads)
	}
	r := Replica{GPU: g, Model: m, Dtype: dtype, TP: tp, Engine: EngineVLLM, cat: c}
	// Require room for at least one max-length-ish sequence (or 4k tokens),
	// which is what vLLM checks at start-up before it serves anything.
	need := m.MaxContext
	if need > 4096 {
		need = 4096
	}
	if got := r.KVBlocks(1, DefaultMemUtil); got < need {
		return Replica{}, fmt.Errorf("perf: %s %s weights (%.1f GiB over %d× %s, %.0f GiB each) leave KV room for %d tokens, need %d",
			m.Name, dtype, r.WeightBytes()/(1<<30), tp, g.Name, g.HBMGiB, max(got, 0), need)
	}
	return r, nil
}

// Batch is the shape of one engine iteration.
type Batch struct {
	// PrefillTokens are new prompt tokens computed this step (all prefill
	// sequences together, including chunks).
	PrefillTokens int
	// PrefillContext is the tokens already in KV for those prefill
	// sequences (cached prefix plus earlier chunks), summed.
	PrefillContext int
	// PrefillSeqs is how many sequences the prefill tokens belong to; the
	// attention cost assumes they split evenly. 0 means 1.
	PrefillSeqs int
	// DecodeSeqs are sequences generating this step.
	DecodeSeqs int
	// DecodeContextTokens is the context summed over decode sequences.
	DecodeContextTokens int
	// SpecTokens is k, the draft tokens each decode sequence verifies this
	// step (speculative decoding); each decode sequence then runs k+1 query
	// tokens through the target model (gpu-model.md §8).
	SpecTokens int
	// DraftLayers is the cost of one draft forward pass in target-layer
	// units (an EAGLE head ≈ 1; an n-gram proposer = 0). It is paid SpecTokens
	// times per step at the decode batch.
	DraftLayers float64
}

func (r Replica) weightBytesPerParam() float64 { return catalog.DtypeBytes(r.Dtype) }

// kvBytesPerElem: FP8 deployments (TRT-LLM perf-overview, NIM) also quantise
// the KV cache to FP8; BF16/FP16 deployments keep a 16-bit cache.
func (r Replica) kvBytesPerElem() float64 { return catalog.DtypeBytes(r.Dtype) }

func (r Replica) flops() float64 {
	if r.Dtype == catalog.DtypeFP8 {
		return r.GPU.FP8TFLOPS * 1e12 * r.GPU.EtaF8
	}
	return r.GPU.BF16TFLOPS * 1e12 * r.GPU.EtaF
}

func (r Replica) bandwidth() float64 { return r.GPU.HBMTBps * 1e12 }

// WeightBytes is the size of all weights of the replica (all TP shards).
func (r Replica) WeightBytes() float64 {
	return float64(r.Model.Params) * r.weightBytesPerParam()
}

// KVBytesPerToken is the KV cache one token occupies across all layers and
// all TP shards: 2 (K and V) · layers · kv_heads · head_dim · bytes.
func (r Replica) KVBytesPerToken() float64 {
	m := r.Model
	return 2 * float64(m.Layers*m.KVHeads*m.HeadDim) * r.kvBytesPerElem()
}

// kvShards is how many ways the KV heads are split; with TP > kv_heads the
// heads are replicated, so each GPU still holds at least one.
func (r Replica) kvShards() float64 {
	return float64(min(r.TP, r.Model.KVHeads))
}

// KVBlocks is the KV capacity in blocks of blockSize tokens after weights
// and the activation reserve, with memUtil (0 = DefaultMemUtil) of HBM given
// to the engine. It can be negative when the weights do not fit.
func (r Replica) KVBlocks(blockSize int, memUtil float64) int {
	if memUtil <= 0 {
		memUtil = DefaultMemUtil
	}
	if blockSize <= 0 {
		blockSize = 1
	}
	perGPU := r.GPU.HBMBytes()*memUtil - r.WeightBytes()/float64(r.TP) - activationReserveBytes
	if perGPU <= 0 {
		return int(math.Floor(perGPU / r.KVBytesPerToken())) // negative: does not fit
	}
	perTokenPerGPU := r.KVBytesPerToken() / r.kvShards()
	return int(perGPU/perTokenPerGPU) / blockSize
}

// PricePerHour is the replica's on-demand price: all TP GPUs.
func (r Replica) PricePerHour() float64 { return r.GPU.PricePerHour * float64(r.TP) }

// StepSeconds is the duration of one engine iteration running b: the
// replica's StepModel asked once. A caller that asks many times (the
// simulated engine, every step) keeps the StepModel instead, since
// building it is most of one question's cost.
func (r *Replica) StepSeconds(b Batch) float64 {
	m := r.StepModel()
	return m.Step(b)
}

// StepModel is the one formula of a step's duration (gpu-model.md): a
// replica's factors of it evaluated once, and Step the per-batch rest.
// The predictor keeps one per replica it caches and the simulated engine
// one for its replica, since their questions (some hundred per placement,
// one per engine step) each re-derived the factors and looked the
// engine's overheads and the dtype's size up by string
// (BenchmarkPredictorByName 131-168 -> 61-65 ns). The zero value is not
// a model: build it with Replica.StepModel.
type StepModel struct {
	f         float64 // flops: dense FLOP/s at the dtype, derated
	twoPL     float64 // 2 · linear params per layer and GPU
	fourNQHD  float64 // 4 · query heads · head dim
	attnDen   float64 // FLOP/s for attention: tp · BF16 · etaAttn
	kvTokenL  float64 // KV bytes per token, layer and GPU
	weightsL  float64 // seconds to read one layer's weights
	kvReadBW  float64 // bytes/s reading KV (paged attention)
	writeBW   float64 // bytes/s writing
	layers    float64
	tp        bool // TP > 1: all-reduces per layer
	arLatency float64
	hidden    float64
	arBW      float64
	headW     float64 // seconds to read the LM head's weights
	twoVD     float64
	tpF       float64
	perSeq    float64
	minStep   float64
}

// StepModel evaluates r's factors of the step formula.
func (r *Replica) StepModel() StepModel {
	m := r.Model
	tp := float64(r.TP)
	F := r.flops()
	B := r.bandwidth()
	w := r.weightBytesPerParam()
	nqhd := float64(m.Heads * m.HeadDim)
	pl := m.LinearParamsPerLayer() / tp
	vd := float64(m.Vocab * m.Hidden)
	o := r.overhead()
	return StepModel{
		f:     F,
		twoPL: 2 * pl, fourNQHD: 4 * nqhd,
		attnDen: tp * r.GPU.BF16TFLOPS * 1e12 * etaAttn,
		// kvBytesPerElem is the weights' element size (see its comment):
		// one dtype lookup serves both.
		kvTokenL: 2 * float64(m.KVHeads*m.HeadDim) * w / r.kvShards(),
		weightsL: pl * w / (B * r.GPU.EtaB),
		kvReadBW: B * etaKV, writeBW: B * r.GPU.EtaB,
		layers: float64(m.Layers),
		tp:     r.TP > 1, arLatency: r.GPU.AllReduceLatencyUs * 1e-6, hidden: float64(m.Hidden), arBW: r.GPU.AllReduceGBps * 1e9,
		headW: vd * w / (tp * B * r.GPU.EtaB), twoVD: 2 * vd, tpF: tp * F,
		perSeq: o.perSeq, minStep: o.minStep,
	}
}

// Step is the duration of one engine iteration running b.
func (c *StepModel) Step(b Batch) float64 {
	k := max(b.SpecTokens, 0)
	decodeQ := b.DecodeSeqs * (1 + k)
	n := float64(b.PrefillTokens + decodeQ)
	nseq := b.DecodeSeqs
	if b.PrefillTokens > 0 {
		nseq += max(b.PrefillSeqs, 1)
	}
	if n <= 0 {
		return 0
	}
	// Attention FLOPs per layer: causal prefill over new tokens n with c
	// already cached is 4·n·(c + n/2)·nq·hd per sequence; split evenly over
	// the prefill sequences. Decode (and spec verification) is 4·c per query
	// token.
	ps := float64(max(b.PrefillSeqs, 1))
	pn, pc := float64(b.PrefillTokens), float64(b.PrefillContext)
	attnFLOPs := c.fourNQHD*(pn*pc/ps+pn*pn/(2*ps)) + c.fourNQHD*float64(1+k)*float64(b.DecodeContextTokens)
	tc := c.twoPL*n/c.f + attnFLOPs/c.attnDen
	kvRead := float64(b.PrefillContext+b.DecodeContextTokens) * c.kvTokenL
	kvWrite := n * c.kvTokenL
	tm := c.weightsL + kvRead/c.kvReadBW + kvWrite/c.writeBW
	layer := hypot(tc, tm) + perLayerSeconds
	if c.tp {
		// Two all-reduces of the activations (N·d·2 bytes) per layer.
		layer += 2 * (c.arLatency + n*c.hidden*2/c.arBW)
	}
	// LM head: V·d weights read once, 2·V·d FLOPs per sequence sampled.
	logitRows := float64(nseq + b.DecodeSeqs*k)
	head := hypot(c.headW, c.twoVD*logitRows/c.tpF)
	t := c.layers*layer + head + perStepSeconds + c.perSeq*float64(b.DecodeSeqs)
	if k > 0 && b.DraftLayers > 0 && b.DecodeSeqs > 0 {
		// Each draft token is one draft forward at the decode batch.
		dn := float64(b.DecodeSeqs)
		dtc := c.twoPL * dn / c.f
		t += float64(k) * b.DraftLayers * (hypot(dtc, c.weightsL) + perLayerSeconds)
	}
	return max(t, c.minStep)
}

// hypot is sqrt(a²+b²) without math.Hypot's overflow and NaN guards: the
// terms here are seconds, far from float64's range, and the guards cost a
// third of a step prediction.
func hypot(a, b float64) float64 { return math.Sqrt(a*a + b*b) }

// PrefillSeconds is the time to prefill newTokens on top of cachedTokens
// already in KV, alone on the replica, in one step (no chunking).
func (r *Replica) PrefillSeconds(newTokens, cachedTokens int) float64 {
	m := r.StepModel()
	return m.prefill(newTokens, cachedTokens)
}

// prefill is Replica.PrefillSeconds, for a caller that keeps the model.
func (c *StepModel) prefill(newTokens, cachedTokens int) float64 {
	if newTokens <= 0 {
		return 0
	}
	return c.Step(Batch{PrefillTokens: newTokens, PrefillContext: max(cachedTokens, 0), PrefillSeqs: 1})
}

// DecodeStepSeconds is one decode iteration of batch sequences with mean
// context meanContext.
func (r *Replica) DecodeStepSeconds(batch, meanContext int) float64 {
	m := r.StepModel()
	return m.decodeStep(batch, meanContext)
}

// decodeStep is Replica.DecodeStepSeconds, for a caller that keeps the
// model.
func (c *StepModel) decodeStep(batch, meanContext int) float64 {
	if batch <= 0 {
		return 0
	}
	return c.Step(Batch{DecodeSeqs: batch, DecodeContextTokens: batch * max(meanContext, 0)})
}

// SteadyState estimates steady-state serving of batch concurrent sequences,
// each input tokens in and output tokens out (gpu-model.md §5): every step
// decodes batch sequences at mean context input+output/2 and, to replace the
// sequences that finish, prefills batch·input/output new tokens. It returns
// the step time and output tokens per second. The batch is capped by KV
// capacity at DefaultMemUtil.
func (r Replica) SteadyState(input, output, batch int) (stepSeconds, outputTokensPerSec float64) {
	if batch <= 0 || output <= 0 {
		return 0, 0
	}
	if kvCap := r.KVBlocks(1, DefaultMemUtil) / max(input+output, 1); kvCap >= 1 && batch > kvCap {
		batch = kvCap
	}
	ctx := input + output/2
	pre := int(math.Round(float64(batch) * float64(input) / float64(output)))
	b := Batch{DecodeSeqs: batch, DecodeContextTokens: batch * ctx}
	if pre > 0 {
		b.PrefillTokens = pre
		b.PrefillSeqs = max(1, int(math.Ceil(float64(batch)/float64(output))))
	}
	step := r.StepSeconds(b)
	return step, float64(batch) / step
}

// LoadSeconds is the time until the model can serve from a weight state:
// the load from the tier the state implies (schemas.WeightTier: sleeping
// from host memory, cold from local disk, absent from remote), priced by
// the catalog's weight tiers (catalog/tiers.go, gpu-model.md §7). A load in
// progress is priced as one from disk; a model learned from the fleet
// cannot be fetched by a worker that does not have it.
func (r Replica) LoadSeconds(fromState string) float64 {
	switch fromState {
	case schemas.WeightHot, "":
		return 0
	case schemas.WeightAbsent:
		if r.Model.FromFleet {
			// Learned from the workers that serve it: no one else has its
			// weights, so a worker without it can never load it.
			return math.Inf(1)
		}
	}
	t := schemas.WeightTier(fromState)
	if fromState == schemas.WeightLoading {
		t = schemas.TierDisk
	}
	if t == "" {
		return math.Inf(1)
	}
	return r.TierSeconds(t)
}

// TierSeconds is the time to bring the replica's weights into HBM from a
// weight tier (catalog.TierLoadSeconds: each GPU copies its own shard
// where the tier says so); +Inf for a tier the catalog does not know.
func (r Replica) TierSeconds(tier string) float64 {
	c := r.cat
	if c == nil {
		c = catalog.Default()
	}
	return c.TierLoadSeconds(tier, r.WeightBytes(), r.TP)
}
