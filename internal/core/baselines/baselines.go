// Package baselines owns faithful re-implementations of the routing
// policies Switchyard is compared against, each as a placement.Policy over
// the same fleet view the Switchyard Placer sees, so the simulator and the
// live router can run any of them unchanged.
//
// Each file names the public document it follows and the defaults it
// uses. Where the original system reads a signal the fleet view carries
// differently (a Prometheus scrape instead of a heartbeat, a router-side
// counter), the file says what was mapped to what. Policies that keep
// router-side state (outstanding requests, an approximate prefix tree)
// learn completions through Done(requestID, workerID), which the simulator
// and the router shell call when a request finishes.
//
// Ties are broken by a seeded generator, so runs are reproducible.
package baselines

import (
	"fmt"
	"math/rand/v2"
	"sort"
	"time"

	"github.com/switchyard-ai/switchyard/internal/core/fleet"
	"github.com/switchyard-ai/switchyard/internal/core/placement"
	"github.com/switchyard-ai/switchyard/schemas"
)

// Seed seeds every baseline's tie-breaking.
const Seed = 42

var registry = map[string]func(cost placement.CostModel) placement.Policy{
	"round-robin":     func(placement.CostModel) placement.Policy { return NewRoundRobin() },
	"random":          func(placement.CostModel) placement.Policy { return NewRandom(Seed) },
	"least-loaded":    func(placement.CostModel) placement.Policy { return NewLeastLoaded() },
	"llm-d":           func(placement.CostModel) placement.Policy { return NewLLMD(LLMDDefaults) },
	"llm-d-load":      func(placement.CostModel) placement.Policy { return NewLLMD(LLMDLoadOnly) },
	"llm-d-slo":       func(cost placement.CostModel) placement.Policy { return NewLLMDSLO(LLMDSLODefaults, cost) },
	"llm-d-slo-least": func(cost placement.CostModel) placement.Policy { return NewLLMDSLO(LLMDSLOLeast, cost) },
	"dynamo":          func(placement.CostModel) placement.Policy { return NewDynamo(DynamoDefaults) },
	"sglang":          func(placement.CostModel) placement.Policy { return NewSGLang(SGLangDefaults) },
	"dynamo-disagg":   func(cost placement.CostModel) placement.Policy { return NewDynamoDisagg(DynamoDisaggDefaults, cost) },
	"llm-d-pd":        func(cost placement.CostModel) placement.Policy { return NewLLMDPD(LLMDPDDefaults, cost) },
	"sglang-pd":       func(cost placement.CostModel) placement.Policy { return NewSGLangPD(SGLangPDDefaults, cost) },
}

// Names lists the baselines New knows, sorted.
func Names() []string {
	out := make([]string, 0, len(registry))
	for n := range registry {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// New returns a fresh baseline by name. cost is the router's roofline
// model: llm-d-slo predicts TTFT and TPOT with it (llm-d's latency
// predictor, at its best); the disaggregated baselines (dynamo-disagg,
// llm-d-pd, sglang-pd) only report their splits' prefill and transfer
// seconds from it; the others read no prediction.
func New(name string, cost placement.CostModel) (placement.Policy, error) {
	f, ok := registry[name]
	if !ok {
		return nil, fmt.Errorf("baselines: unknown policy %q", name)
	}
	return f(cost), nil
}

// base holds what every baseline needs: a candidate buffer, a decision to
// return, a seeded tie-breaker, and outstanding requests per worker as the
// router counts them (dispatched and not yet done).
type base struct {
	name  string
	cands []*fleet.Worker
	dec   placement.Decision
	rng   *rand.Rand
	// outstanding counts the router's in-flight requests per worker id;
	// where tracks which worker each in-flight request went to.
	outstanding map[string]int
	where       map[string]string
	// unserved is how many live workers the last candidates call found
	// when none served the model in the phase asked (0 otherwise).
	unserved int
	// prefillOf is, for a split request, the prefill worker whose leg has
	// not been reported done; outstanding counts that leg there too.
	prefillOf map[string]string
	// gateDecode makes the gate judge decode-capable workers rather than
	// role-both ones: set by the disaggregated baselines, whose
	// aggregated counterpart's gate (Dynamo's busy check, llm-d's
	// saturation detector) watches the pool that serves decodes.
	gateDecode bool
}

func newBase(name string) base { return newBaseSeed(name, Seed) }

func newBaseSeed(name string, seed uint64) base {
	return base{
		name: name, rng: rand.New(rand.NewPCG(seed, 0x62617365)),
		outstanding: make(map[string]int), where: make(map[string]string), prefillOf: make(map[string]string),
	}
}

// Name implements placement.Policy.
func (b *base) Name() string { return b.name }

// candidates are the workers a Kubernetes Service or a gateway would send
// to: ready (heartbeat fresh), not draining, serving the request's model
// (each system routes a model within its own pool of servers) and taking
// the dispatch's phase (schemas.RoleTakes: a whole request, phase "",
// never goes to a prefill-only or decode-only worker), in stable id order.
func (b *base) candidates(f *fleet.Fleet, model, phase string, now time.Time) []*fleet.Worker {
	b.cands = f.Candidates(now, b.cands[:0])
	live := len(b.cands)
	kept := b.cands[:0]
	for _, w := range b.cands {
		if !schemas.RoleTakes(w.Role, phase) {
			continue
		}
		if _, ok := w.Model(model, ""); model == "" || ok {
			kept = append(kept, w)
		}
	}
	b.cands = kept
	b.unserved = 0
	if len(kept) == 0 {
		b.unserved = live
	}
	return b.cands
}

func (b *base) decide(req *placement.Request, w *fleet.Worker) *placement.Decision {
	b.dec = placement.Decision{Policy: b.name, RequestID: req.ID, Worker: w}
	if w == nil && b.unserved > 0 {
		// Live workers, none serving the model in this phase: no pool
		// of this model exists, and waiting will not make one.
		b.dec.Unresolvable = true
		b.dec.Counts[placement.ReasonCannotRun] = b.unserved
	}
	if w != nil {
		b.outstanding[w.ID]++
		b.where[req.ID] = w.ID
	}
	return &b.dec
}

// decideSplit is decide for a split request: decode runs on dec after
// the prompt's prefill on pre, and both count the request as outstanding
// until their leg is done.
func (b *base) decideSplit(req *placement.Request, pre, dec *fleet.Worker) *placement.Decision {
	d := b.decide(req, dec)
	d.Prefill = pre
	b.outstanding[pre.ID]++
	b.prefillOf[req.ID] = pre.ID
	return d
}

// gatePhase is the phase whose workers a gate judges for req.
func (b *base) gatePhase(req *placement.Request) string {
	if b.gateDecode && req.Phase == schemas.PhaseBoth {
		return schemas.PhaseDecode
	}
	return req.Phase
}

// Done implements the completion hook: the request left workerID.
func (b *base) Done(requestID, workerID string) { b.done(requestID, workerID) }

// done releases what the request held on workerID and reports whether the
// request itself is done (false when only a split's prefill leg ended).
// The end of the decode leg releases the prefill leg too, so a router
// that reports only the request's end leaks nothing.
func (b *base) done(requestID, workerID string) bool {
	if pre, ok := b.prefillOf[requestID]; ok {
		delete(b.prefillOf, requestID)
		if b.outstanding[pre] > 0 {
			b.outstanding[pre]--
		}
		if workerID == pre {
			return false
		}
	}
	if _, ok := b.where[requestID]; !ok {
		return true
	}
	delete(b.where, requestID)
	if b.outstanding[workerID] > 0 {
		b.outstanding[workerID]--
	}
	return true
}
