package placement

import (
	"math"
	"math/bits"
	"strings"

	"github.com/switchyard-ai/switchyard/internal/fleet"
	"github.com/switchyard-ai/switchyard/schemas"
)

// Cost-model answers depend on the worker only through its class (GPU, TP)
// and on the request's token counts, so within one placement they are
// computed once per class, and per distinct batch bucket or cached length.

type classKey struct {
	gpu string
	tp  int
}

// decodeBuckets are the batch sizes at which decode time is asked for;
// other batch sizes interpolate linearly between neighbours, which follows
// the roofline's piecewise-linear shape closely enough for ranking.
const decodeBuckets = 12 // 1, 2, 4, ... 2048

// queueRefTokens sizes the probe used to turn queued prompt tokens into
// seconds of wait.
const queueRefTokens = 1024

type class struct {
	gpu   string // the GPU the cost model is asked about
	tp    int
	epoch uint64 // placement these per-call values belong to

	prefillFull float64 // the whole prompt, nothing cached
	queueRate   float64 // seconds per queued prompt token
	price       float64 // $/hour

	decodeAt    [decodeBuckets]float64
	decodeEpoch [decodeBuckets]uint64
	load        [len(loadStates)]float64
	loadEpoch   [len(loadStates)]uint64
}

var loadStates = [...]string{schemas.WeightSleeping, schemas.WeightLoading, schemas.WeightCold, schemas.WeightAbsent}

// workerClass caches a worker's class id and architecture facts until its
// heartbeat changes them.
type workerClass struct {
	gpu, arch string
	tp        int
	id        int32
	fp8       bool
}

type cachedPrefill struct {
	class  *class
	cached int
	secs   float64
}

// classFor returns w's class, with this placement's values initialised.
func (p *Placer) classFor(w *fleet.Worker, r *Request) *class {
	wc := &p.wclass[w.Idx]
	if wc.id < 0 || wc.gpu != w.GPU || wc.tp != w.TP || wc.arch != w.Arch {
		wc.gpu, wc.tp, wc.arch = w.GPU, w.TP, w.Arch
		arch := w.Arch
		if arch == "" {
			arch = ArchOf(w.GPU)
		}
		wc.fp8 = false
		for _, a := range p.opts.FP8Arches {
			if strings.EqualFold(a, arch) {
				wc.fp8 = true
			}
		}
		key := classKey{gpu: w.GPU, tp: w.TP}
		if !p.on[axGPU] {
			key.gpu = p.opts.ReferenceGPU
		}
		id, ok := p.classIdx[key]
		if !ok {
			id = int32(len(p.classes))
			p.classes = append(p.classes, class{gpu: key.gpu, tp: key.tp})
			p.classIdx[key] = id
		}
		wc.id = id
	}
	cl := &p.classes[wc.id]
	if cl.epoch != p.epoch {
		cl.epoch = p.epoch
		cl.prefillFull = p.cost.PrefillSeconds(cl.gpu, r.Model, r.Dtype, cl.tp, r.PromptTokens, 0)
		cl.queueRate = p.cost.PrefillSeconds(cl.gpu, r.Model, r.Dtype, cl.tp, queueRefTokens, 0) / queueRefTokens
		cl.price = p.cost.PricePerHour(cl.gpu, cl.tp)
	}
	return cl
}

func (p *Placer) queueRate(cl *class, _ *Request) float64 { return cl.queueRate }

func (p *Placer) prefillCached(cl *class, r *Request, cached int) float64 {
	for i := range p.cached {
		if e := &p.cached[i]; e.class == cl && e.cached == cached {
			return e.secs
		}
	}
	s := p.cost.PrefillSeconds(cl.gpu, r.Model, r.Dtype, cl.tp, r.PromptTokens-cached, cached)
	p.cached = append(p.cached, cachedPrefill{class: cl, cached: cached, secs: s})
	return s
}

func (p *Placer) decodeBucket(cl *class, r *Request, i int) float64 {
	if cl.decodeEpoch[i] != p.epoch {
		cl.decodeEpoch[i] = p.epoch
		// The mean context during decode is the prompt plus half the output.
		ctx := r.PromptTokens + r.OutputTokens/2
		cl.decodeAt[i] = p.cost.DecodeSeconds(cl.gpu, r.Model, r.Dtype, cl.tp, r.OutputTokens, 1<<i, ctx)
	}
	return cl.decodeAt[i]
}

func (p *Placer) decode(cl *class, r *Request, batch int) float64 {
	if batch < 1 {
		batch = 1
	}
	lo := bits.Len(uint(batch)) - 1
	if lo >= decodeBuckets-1 {
		return p.decodeBucket(cl, r, decodeBuckets-1)
	}
	a := p.decodeBucket(cl, r, lo)
	if batch == 1<<lo {
		return a
	}
	b := p.decodeBucket(cl, r, lo+1)
	f := float64(batch-(1<<lo)) / float64(int(1)<<lo)
	return a + f*(b-a)
}

func (p *Placer) loadSeconds(cl *class, r *Request, state string) float64 {
	var i int
	switch state {
	case schemas.WeightSleeping:
		i = 0
	case schemas.WeightLoading:
		i = 1
	case schemas.WeightCold:
		i = 2
	case schemas.WeightAbsent:
		i = 3
	default:
		return math.Inf(1) // an unknown state: do not bet on it
	}
	if cl.loadEpoch[i] != p.epoch {
		cl.loadEpoch[i] = p.epoch
		cl.load[i] = p.cost.LoadSeconds(cl.gpu, r.Model, r.Dtype, cl.tp, state)
	}
	return cl.load[i]
}

// ArchOf maps a catalog GPU name to its architecture, for heartbeats that
// do not report one.
func ArchOf(gpu string) string {
	switch strings.ToLower(gpu) {
	case "h100", "h100-sxm", "h100-pcie", "h200", "h20", "gh200":
		return "hopper"
	case "b200", "b100", "gb200", "b300", "gb300":
		return "blackwell"
	case "a100", "a100-40g", "a100-80g", "a10", "a10g", "a30", "a40", "a6000":
		return "ampere"
	case "l4", "l40", "l40s", "rtx4090", "rtx6000-ada":
		return "ada"
	case "t4":
		return "turing"
	case "v100":
		return "volta"
	case "mi300x", "mi325x", "mi300a":
		return "cdna3"
	case "mi250", "mi250x", "mi210":
		return "cdna2"
	}
	return ""
}
