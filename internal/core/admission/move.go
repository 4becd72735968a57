package admission

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/switchyard-ai/switchyard/schemas"
)

// Tasks recognised in metadata["task"] (or inferred from the prompt).
const (
	TaskClassify  = "classify"
	TaskExtract   = "extract"
	TaskSummarize = "summarize"
	TaskChat      = "chat"
	TaskCode      = "code"
	TaskReason    = "reason"
)

// taskTier is the smallest ladder tier expected to succeed at a task on a
// short prompt: small models classify and extract reliably; code and
// multi-step reasoning need a mid-size model to start with.
var taskTier = map[string]int{
	TaskClassify: 0, TaskExtract: 0, TaskSummarize: 1, TaskChat: 1, TaskCode: 2, TaskReason: 2,
}

// Complexity is the estimate of how large a model a request needs.
type Complexity struct {
	Task string
	// Tier is the index on the ladder of the smallest model expected to
	// succeed.
	Tier   int
	Reason string
}

// EstimateComplexity scores a request from its task (metadata["task"], or
// keywords in the prompt when absent), prompt length and output length.
// Long inputs and long outputs each add a tier because small models lose
// coherence over long contexts and generations first. Workflow steps start
// at tier 1: one failed step dooms the whole workflow, so the cheapest tier
// is not worth its failure rate there.
func EstimateComplexity(r *schemas.Request, promptTokens int) Complexity {
	task, src := strings.ToLower(strings.TrimSpace(r.Metadata["task"])), "metadata"
	if _, ok := taskTier[task]; !ok {
		task, src = inferTask(r.PromptText()), "inferred"
	}
	tier := taskTier[task]
	why := []string{fmt.Sprintf("task=%s (%s)", task, src)}
	if task == TaskChat && promptTokens < 64 && r.MaxTokens <= 256 {
		tier = 0
		why = append(why, "short chat")
	}
	switch {
	case promptTokens > 16000:
		tier += 2
		why = append(why, fmt.Sprintf("%d prompt tokens (>16k)", promptTokens))
	case promptTokens > 2000:
		tier++
		why = append(why, fmt.Sprintf("%d prompt tokens (>2k)", promptTokens))
	default:
		why = append(why, fmt.Sprintf("%d prompt tokens", promptTokens))
	}
	if r.MaxTokens > 1500 {
		tier++
		why = append(why, fmt.Sprintf("max_tokens %d (>1500)", r.MaxTokens))
	}
	if r.Workflow != nil && tier < 1 {
		tier = 1
		why = append(why, "workflow step: at least tier 1")
	}
	return Complexity{Task: task, Tier: tier, Reason: strings.Join(why, ", ")}
}

// inferTask guesses a task from cue words when the client gave no hint.
// The cues are deliberately few and unambiguous; anything else is chat.
func inferTask(p string) string {
	p = strings.ToLower(p)
	has := func(cues ...string) bool {
		for _, c := range cues {
			if strings.Contains(p, c) {
				return true
			}
		}
		return false
	}
	switch {
	case has("step by step", "prove ", "proof", "derive", "reason about", "think carefully"):
		return TaskReason
	case has("```", "func ", "def ", "write a function", "write code", "stack trace", "compile error"):
		return TaskCode
	case has("summarize", "summarise", "tl;dr", "summary of"):
		return TaskSummarize
	case has("classify", "categorize", "categorise", "sentiment", "which category"):
		return TaskClassify
	case has("extract", "as json", "parse the"):
		return TaskExtract
	}
	return TaskChat
}

// ModelMove is the outcome of choosing a model.
type ModelMove struct {
	Model  string
	Moved  bool
	Reason string
	Error  *schemas.Error
}

// ChooseModel resolves "auto" and applies a downgrade. The candidates are
// the ladder's models the tenant may use and the catalog knows (known may
// be nil); the pick is the smallest with tier >= the needed tier, or the
// largest candidate when none is big enough. A named model is only moved
// down, only along the ladder, and only when the tenant allows downgrades.
func ChooseModel(p Profile, ladder []string, known schemas.ModelLookup, r *schemas.Request, c Complexity) ModelMove {
	var cands []int // ladder tiers usable by this tenant
	for i, m := range ladder {
		if p.ModelAllowed(m) && (known == nil || known(m)) {
			cands = append(cands, i)
		}
	}
	pick := func(maxTier int) (int, bool) {
		if len(cands) == 0 {
			return -1, false
		}
		for _, i := range cands {
			if i >= c.Tier && i <= maxTier {
				return i, true
			}
		}
		// Nothing at the needed tier within bounds: the largest allowed.
		best := -1
		for _, i := range cands {
			if i <= maxTier {
				best = i
			}
		}
		return best, best >= 0
	}
	if r.Model == "auto" {
		if !p.AllowAuto {
			return ModelMove{Error: schemas.Errf(schemas.CodeModelNotAllowed, "model", "tenant %q does not allow model \"auto\"; name a model", p.Name)}
		}
		i, ok := pick(len(ladder) - 1)
		if !ok {
			return ModelMove{Error: schemas.Errf(schemas.CodeModelNotAllowed, "model", "no model on the ladder is allowed for tenant %q", p.Name)}
		}
		return ModelMove{Model: ladder[i], Moved: true,
			Reason: fmt.Sprintf("auto -> %s (tier %d): %s", ladder[i], i, c.Reason)}
	}
	cur := slices.Index(ladder, r.Model)
	if !p.AllowDowngrade || cur < 0 || c.Tier >= cur {
		return ModelMove{Model: r.Model}
	}
	i, ok := pick(cur - 1)
	if !ok || i >= cur {
		return ModelMove{Model: r.Model}
	}
	return ModelMove{Model: ladder[i], Moved: true,
		Reason: fmt.Sprintf("downgrade %s -> %s (tier %d of %d): %s", r.Model, ladder[i], i, cur, c.Reason)}
}

// Offer is what the live fleet can do for one model now.
type Offer struct {
	Model string
	// Hot is how many live workers serve the model now.
	Hot int
	// WarmSeconds is the shortest wait before some worker can serve it:
	// 0 when one is hot; otherwise the quickest live worker's own load
	// estimate for it (heartbeat load_s — what placement's warmth axis
	// charges a cold start), or a controller-sized pool's cold start.
	WarmSeconds float64
	// Via says where the offer comes from, for reasons.
	Via string
}

// ScalablePool is a pool a controller sizes (control.ReplicasMsg on
// sy.ctl.replicas.<pool>), as the message describes it: a worker for its
// model can be started even when none is live, on the message's replica
// kind (GPU, Dtype, TP), after the message's ColdStartSeconds.
type ScalablePool struct {
	Pool, GPU, Model string
	Dtype            string
	TP               int
	ColdStartSeconds float64
}

// ColdLoader prices a weight load on one replica kind;
// internal/core/perf's Predictor is one (the router prices a pool's cold
// start with it too, routing.notePool).
type ColdLoader interface {
	LoadSeconds(gpu, model, dtype string, tp int, fromState string) float64
}

// ColdStart is how long a replica of p started now takes to serve: the
// controller's own figure when the message carries one, else — from a
// controller that sends none — the cold weight load of the message's own
// replica kind (its TP, 1 when it names none; bf16 when it names no
// dtype) priced by load, as the router prices it. 0 when neither can
// say: such a pool offers nothing.
func (p ScalablePool) ColdStart(load ColdLoader) float64 {
	if p.ColdStartSeconds > 0 {
		return p.ColdStartSeconds
	}
	if load == nil || p.GPU == "" || p.Model == "" {
		return 0
	}
	dtype := p.Dtype
	if dtype == "" {
		dtype = "bf16"
	}
	s := load.LoadSeconds(p.GPU, p.Model, dtype, max(1, p.TP), schemas.WeightCold)
	if math.IsInf(s, 0) || math.IsNaN(s) || s <= 0 {
		return 0
	}
	return s
}

// FleetOffers is which models the live fleet can serve and how soon.
type FleetOffers struct {
	// Live is how many live, non-draining workers the view holds.
	Live   int
	Models map[string]Offer
	// Partial is set while the view has listened for less than its
	// staleness bound (FleetView.HeardAll): a live worker it has not heard
	// yet may serve a model it does not list, so Decide refuses nothing
	// unplaceable on it (moves still go only to models it has heard served).
	Partial bool
}

// Offers summarises the live fleet by model: each model a live worker
// reports resident (hot, sleeping, loading or cold), and each model of a
// pool a controller can scale up, at its ColdStart (load prices the cold
// start of a pool whose message gives none; nil offers such a pool
// nothing). A model is offered at the quickest of these.
func (f *FleetView) Offers(now time.Time, pools []ScalablePool, load ColdLoader) FleetOffers {
	o := FleetOffers{Models: map[string]Offer{}, Partial: !f.HeardAll(now)}
	better := func(c Offer) {
		if cur, ok := o.Models[c.Model]; ok {
			c.Hot += cur.Hot
			if cur.WarmSeconds <= c.WarmSeconds {
				c.WarmSeconds, c.Via = cur.WarmSeconds, cur.Via
			}
		}
		o.Models[c.Model] = c
	}
	for _, w := range f.live(now) {
		o.Live++
		for _, ms := range w.last.Models {
			switch ms.State {
			case schemas.WeightHot:
				better(Offer{Model: ms.Name, Hot: 1, Via: "hot on a live worker"})
			case schemas.WeightSleeping, schemas.WeightLoading, schemas.WeightCold:
				if ms.LoadSeconds > 0 {
					better(Offer{Model: ms.Name, WarmSeconds: ms.LoadSeconds,
						Via: fmt.Sprintf("%s on %s, load %.1fs", ms.State, w.last.WorkerID, ms.LoadSeconds)})
				}
			}
		}
	}
	for _, p := range pools {
		cold := p.ColdStart(load)
		if p.Model == "" || cold <= 0 {
			continue
		}
		better(Offer{Model: p.Model, WarmSeconds: cold,
			Via: fmt.Sprintf("scale-up of pool %s, cold start %.1fs", p.Pool, cold)})
	}
	return o
}

// Informed reports whether the view knows anything about the fleet. An
// uninformed view (no live worker, no scalable pool: a fresh admitter, or
// a fleet at zero) constrains nothing — the router holds the work for a
// worker that may yet start — rather than refuse everything.
func (o FleetOffers) Informed() bool { return o.Live > 0 || len(o.Models) > 0 }

// Serves reports whether model can be served within budget given its
// predicted service latency: a hot worker, or a warm-up that leaves room
// for the latency. A budget ≤ 0 means no bound.
func (o FleetOffers) Serves(model string, latency, budget time.Duration) (Offer, bool) {
	of, ok := o.Models[model]
	if !ok {
		return Offer{}, false
	}
	if of.Hot > 0 || budget <= 0 {
		return of, true
	}
	warm := time.Duration(of.WarmSeconds * float64(time.Second))
	return of, warm+latency <= budget
}

// Names lists the offered models, sorted, for reasons.
func (o FleetOffers) Names() []string {
	out := make([]string, 0, len(o.Models))
	for m := range o.Models {
		out = append(out, m)
	}
	slices.Sort(out)
	return out
}

// MoveCandidates is the model lookup the move step (ChooseModel, through
// Input.Known) should see so that "auto" and downgrades pick only models
// the fleet can serve: requested passes the catalog lookup known unchanged,
// so validation of the named model sees what it always saw; every other
// model is a candidate only when known accepts it and the fleet serves it
// within budget (its predicted latency from est on this request included).
// An uninformed view returns known as it is.
func (o FleetOffers) MoveCandidates(known schemas.ModelLookup, requested string, est Estimator, promptTokens, maxTokens int, budget time.Duration) schemas.ModelLookup {
	if !o.Informed() {
		return known
	}
	return func(m string) bool {
		if known != nil && !known(m) {
			return false
		}
		if m == requested {
			return true
		}
		lat := time.Duration(0)
		if est != nil {
			lat = est(m, promptTokens, maxTokens).Latency
		}
		_, ok := o.Serves(m, lat, budget)
		return ok
	}
}

// Unplaceable is the answer for a request no worker can ever take, or nil
// when some can (or the view cannot tell). A named model must be offered
// at all (hot, warmable on a live worker, or in a scalable pool); "auto"
// needs some model of candidates (the tenant's usable ladder) offered. The
// reason names what the fleet does serve, so the client can ask for it.
func (o FleetOffers) Unplaceable(model string, candidates []string) *schemas.Error {
	if !o.Informed() {
		return nil
	}
	serves := strings.Join(o.Names(), ", ")
	if serves == "" {
		serves = "none"
	}
	if model != "auto" {
		if _, ok := o.Models[model]; ok {
			return nil
		}
		return schemas.Errf(schemas.CodeUnplaceable, "model",
			"no live worker serves model %q and no scalable pool can start one (%d live workers serve: %s)", model, o.Live, serves)
	}
	for _, m := range candidates {
		if _, ok := o.Models[m]; ok {
			return nil
		}
	}
	return schemas.Errf(schemas.CodeUnplaceable, "model",
		"model \"auto\": no live worker serves any of %s and no scalable pool can start one (%d live workers serve: %s)",
		strings.Join(candidates, ", "), o.Live, serves)
}

// UsableLadder is the part of ladder tenant p may be moved to: the models
// its allowlist permits and known accepts (nil accepts all).
func UsableLadder(p Profile, ladder []string, known schemas.ModelLookup) []string {
	var out []string
	for _, m := range ladder {
		if p.ModelAllowed(m) && (known == nil || known(m)) {
			out = append(out, m)
		}
	}
	return out
}
