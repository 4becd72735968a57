package control

import (
	"fmt"
	"math"
	"sort"
	"time"

	"github.com/switchyard-ai/switchyard/internal/core/engine"
	"github.com/switchyard-ai/switchyard/internal/core/perf"
	"github.com/switchyard-ai/switchyard/internal/core/placement"
	"github.com/switchyard-ai/switchyard/schemas"
)

// Pools sized per phase (issue 28). A pool whose replicas serve one phase
// of disaggregated requests is sized for that phase alone, in the shape of
// NVIDIA Dynamo's SLA planner ("Planner Design", docs.nvidia.com/dynamo,
// design-docs/component-design/planner-design, step 4): the predicted
// prefill load — requests × input tokens per second — over one replica's
// prefill throughput at the TTFT target gives the prefill replicas, and the
// predicted decode load — requests × output tokens — over one replica's
// decode throughput at the ITL target the decode replicas. Where Dynamo
// interpolates a pre-deployment profile, the per-replica throughputs here
// come from the roofline model the engines run (internal/core/perf), and
// the prefill load counts only the uncached prompt tokens (Dynamo's
// profile assumes no KV reuse; its docs note that the result "might be
// inaccurate" when much of the cache is reused). The forecast, headroom,
// bursts, backlog and damping are the controller's own (scale.go), the
// same for every pool.

// PhaseCapacity is one replica's throughput in one phase at its target.
type PhaseCapacity struct {
	// TokensPerSec is the planned rate: uncached prompt tokens a second
	// (prefill) or output tokens a second (decode) at the target.
	TokensPerSec float64
	// Saturated is the rate at full load: a prefill engine whose every
	// step fills its token budget, a decode engine at Batch.
	Saturated float64
	// Utilization is TokensPerSec/Saturated: the load at which a prefill's
	// queueing keeps the first token within the target (1 for decode: the
	// batch is chosen at the target).
	Utilization float64
	// ServiceSeconds is one request's time in the phase: its prefill alone
	// on an idle replica (prefill), or its decode at Batch (decode).
	ServiceSeconds float64
	// Batch is the decode batch the TPOT target allows (decode only).
	Batch int
	// Slack is what the TTFT target leaves for queueing once the binding
	// prompt's own prefill is done (prefill only; ≤ 0 when even an idle
	// replica misses it).
	Slack float64
}

// RequestsPerSec is the planned rate in requests of the mix.
func (p PhaseCapacity) RequestsPerSec(tokensPerRequest float64) float64 {
	return p.TokensPerSec / math.Max(tokensPerRequest, 1)
}

// minPrefillUtilization is the load a prefill pool is planned at when the
// TTFT target cannot be met even by an idle replica (the model's prompts
// are too long for the target): it still grows with its load, at this
// fraction of the saturated rate, and the SLO-miss calibration does the
// rest.
const minPrefillUtilization = 0.1

// Uncached is the mean prompt tokens a prefill of the mix computes: the
// prompt less what was found cached, at least one token.
func Uncached(mix Mix) float64 {
	in := math.Max(mix.PromptTokens, 1)
	return math.Max(1, in-math.Min(math.Max(mix.CachedTokens, 0), in))
}

// PrefillCapacity is one prefill replica's uncached prompt tokens a second
// at the TTFT target t. A prefill-only engine takes its waiting prompts in
// order in chunks of its token budget (engine.DefaultTokenBudget, vLLM's
// chunked-prefill default), so at full load it computes Saturated tokens a
// second, the mean prompt's tokens over its mean prefill time; its first tokens come after the wait for the prompts ahead plus
// the request's own prefill. The wait is taken as an M/G/1 queue's mean
// (Pollaczek–Khinchine): W = ρ/(1−ρ) · E[S²]/(2E[S]), whose second
// moment of the service is where a long tail of prompts costs the wait. The planned load is the largest ρ whose wait
// fits the slack the target leaves the binding prompt — the mean or the
// size-biased one, whichever has less — after its own prefill. Mean, not
// tail: Dynamo's planner too plans on the interval's average TTFT, and the
// tail is what the controller's Poisson headroom, burst term and SLO-miss
// calibration buy (scale.go). The engine prefills in class order, so the
// high classes wait less than this FIFO figure says.
func PrefillCapacity(rep perf.Replica, mix Mix, t placement.ClassTargets) PhaseCapacity {
	in := math.Max(mix.PromptTokens, 1)
	u := Uncached(mix) / in // the uncached share of a prompt
	lsb := sizeBiasedPrompt(mix)
	// A prompt's prefill time grows faster than its length (each chunk
	// attends to all before it): S(L) = a·L + b·L², fitted through the
	// mean prompt's and the size-biased prompt's prefill on an idle
	// replica. E[S²] then needs the prompts' third and fourth moments:
	// the mix's own where it measured them (Recent does), else those of a
	// lognormal with the mix's two moments (the shape of the long tail of
	// Mooncake's conversation trace), E[L^k] = m^k·e^{k(k−1)σ²/2} — whose
	// uncut tail plans conservatively: on a sample cut at 120k tokens it
	// planned an H100 at 43 % of its prefill rate, the measured moments at
	// the 60 % where the engine holds the target.
	s1, s2 := prefillAlone(rep, in*u, in*(1-u)), prefillAlone(rep, lsb*u, lsb*(1-u))
	a, b := s1/in, 0.0
	if lsb > in*(1+1e-6) {
		b = math.Max(0, (s2/lsb-s1/in)/(lsb-in))
		a = math.Max(0, s1/in-b*in)
	}
	sigma2 := math.Log(math.Max(lsb/in, 1))
	moment := func(k float64) float64 {
		switch {
		case k == 3 && mix.PromptTokensCubed > 0:
			return mix.PromptTokensCubed
		case k == 4 && mix.PromptTokensFourth > 0:
			return mix.PromptTokensFourth
		}
		return math.Pow(in, k) * math.Exp(k*(k-1)*sigma2/2)
	}
	es := a*moment(1) + b*moment(2)
	es2 := a*a*moment(2) + 2*a*b*moment(3) + b*b*moment(4)
	if es <= 0 || math.IsInf(es, 1) {
		return PhaseCapacity{}
	}
	sat := in * u / es
	sbService := es2 / es // E[S²]/E[S]
	slack := math.Inf(1)
	alone := 0.0
	for _, l := range []float64{in, lsb} {
		s := prefillAlone(rep, l*u, l*(1-u))
		target := (t.TTFTBase + time.Duration(l*float64(t.PerPromptToken))).Seconds()
		if target-s < slack {
			slack, alone = target-s, s
		}
	}
	rho := minPrefillUtilization
	if slack > 0 && sbService > 0 {
		// ρ/(1−ρ) · sbService/2 ≤ slack.
		k := 2 * slack / sbService
		rho = math.Max(minPrefillUtilization, k/(1+k))
	}
	return PhaseCapacity{TokensPerSec: rho * sat, Saturated: sat, Utilization: rho, ServiceSeconds: alone, Slack: slack}
}

// prefillAlone is the time an idle replica takes to prefill uncached
// tokens after a cached prefix of cached tokens: chunks of the engine's
// token budget, each attending to everything before it.
func prefillAlone(rep perf.Replica, uncached, cached float64) float64 {
	budget := engine.DefaultTokenBudget
	n, ctx := int(math.Ceil(uncached)), int(math.Round(cached))
	total := 0.0
	for off := 0; off < n; off += budget {
		c := min(budget, n-off)
		total += rep.StepSeconds(perf.Batch{PrefillTokens: c, PrefillSeqs: 1, PrefillContext: ctx + off})
	}
	return total
}

// DecodeCapacity is one decode replica's output tokens a second at the
// TPOT target: the largest batch whose decode step stays within tpot (the
// context each sequence holds is its whole prompt, transferred, plus half
// its output on average), capped by the KV the replica holds and by
// engine.DefaultMaxBatch. A decode worker runs no prefill, so unlike
// TargetBatch no prefill chunk shares its steps.
func DecodeCapacity(rep perf.Replica, mix Mix, tpot time.Duration) PhaseCapacity {
	in, out := math.Max(mix.PromptTokens, 1), math.Max(mix.OutputTokens, 1)
	ctx := int(in + out/2)
	lo, hi := 1, engine.DefaultMaxBatch
	if kvCap := rep.KVBlocks(1, perf.DefaultMemUtil) / max(ctx, 1); kvCap >= 1 {
		hi = min(hi, kvCap)
	}
	for lo < hi {
		mid := (lo + hi + 1) / 2
		if rep.DecodeStepSeconds(mid, ctx) <= tpot.Seconds() {
			lo = mid
		} else {
			hi = mid - 1
		}
	}
	step := rep.DecodeStepSeconds(lo, ctx)
	if step <= 0 || math.IsInf(step, 1) {
		return PhaseCapacity{}
	}
	rate := float64(lo) / step
	return PhaseCapacity{TokensPerSec: rate, Saturated: rate, Utilization: 1, ServiceSeconds: step * out, Batch: lo}
}

// phaseModel is what scale plans one pool with: a replica's requests a
// second (steady and through a burst), a request's time in it, and what
// the reason says of it.
type phaseModel struct {
	capacity, burst, requestSeconds float64
	tokensPerRequest, tokenCapacity float64
	why                             string
}

// model is the pool's planning model for the mix: today's whole-request
// model for a pool without a fixed role, its phase's otherwise.
func (c *Controller) model(ps *poolState, mix Mix) phaseModel {
	switch ps.Role {
	case schemas.RolePrefill:
		pc := PrefillCapacity(ps.rep, mix, c.cfg.TTFTTarget)
		u := Uncached(mix)
		capReq := pc.RequestsPerSec(u)
		// A prefill replica starts a burst's requests no faster than it
		// computes their prompts: its burst rate is its steady one.
		return phaseModel{capacity: capReq, burst: capReq, requestSeconds: u / math.Max(pc.Saturated, 1e-9),
			tokensPerRequest: u, tokenCapacity: pc.TokensPerSec,
			why: fmt.Sprintf("prefill: %.0f uncached of %.0f prompt tokens a request; %.0f tokens/s per replica at %.0f%% of its saturated %.0f, the load whose mean queueing keeps TTFT within %s + %s/token (%.2fs of slack after the binding prompt's own %.2fs prefill)",
				u, mix.PromptTokens, pc.TokensPerSec, pc.Utilization*100, pc.Saturated, c.cfg.TTFTTarget.TTFTBase, c.cfg.TTFTTarget.PerPromptToken, pc.Slack, pc.ServiceSeconds)}
	case schemas.RoleDecode:
		dc := DecodeCapacity(ps.rep, mix, c.cfg.ITLTarget)
		out := math.Max(mix.OutputTokens, 1)
		capReq := dc.RequestsPerSec(out)
		// A decode replica at its target batch takes a new sequence only as
		// one finishes: through a burst it starts no more than it completes.
		return phaseModel{capacity: capReq, burst: capReq, requestSeconds: dc.ServiceSeconds,
			tokensPerRequest: out, tokenCapacity: dc.TokensPerSec,
			why: fmt.Sprintf("decode: %.0f output tokens a request; %.0f tokens/s per replica at batch %d, the largest whose step keeps TPOT within %s",
				out, dc.TokensPerSec, dc.Batch, c.cfg.ITLTarget)}
	}
	return phaseModel{capacity: Capacity(ps.rep, mix, c.cfg.ITLTarget), burst: BurstCapacity(ps.rep, mix, c.cfg.ITLTarget),
		requestSeconds: RequestSeconds(ps.rep, mix, c.cfg.ITLTarget)}
}

// phaseGroup is the demand of the pools with a fixed role, measured as one
// flow: every request they serve passes through a prefill pool and then a
// decode pool. A request's prefill leg is not counted where it ends (the
// live worker counts it as a completion, the simulated one does not, and
// both legs counted would count each request twice): arrivals are the
// decode legs completed, the prefill legs that failed, the growth of what
// the role pools' workers hold and the queue ahead of their prefills, and
// the requests turned away. Each pool takes its phase's share (phaseShares).
type phaseGroup struct {
	counted  map[string]uint64
	lastLoad float64
	have     bool
}

// phaseDemand is one role pool's part of the group's flow at a decision.
type phaseDemand struct {
	arrived float64 // requests arrived since the last decision (its share)
	queued  float64 // the queue ahead of the group, its share
	have    bool    // arrived is a measurement (false on the first)
}

// hasPhases reports whether any configured pool has a fixed role.
func (c *Controller) hasPhases() bool {
	for _, ps := range c.pools {
		if FixedRole(ps.Role) {
			return true
		}
	}
	return false
}

// phaseShares splits a phase's flow over the pools of that role in
// proportion to their provisioned capacity in it; with nothing provisioned
// in the phase, all of it goes to the pool that serves it cheapest.
func (c *Controller) phaseShares(role string, byPool map[string][]*schemas.Heartbeat, in Inputs) map[string]float64 {
	out := map[string]float64{}
	caps := map[string]float64{}
	total := 0.0
	for _, ps := range c.pools {
		if ps.Role != role {
			continue
		}
		caps[ps.Key()] = float64(provisioned(ps, byPool, in)) * c.model(ps, in.Mix).capacity
		total += caps[ps.Key()]
	}
	if total > 0 {
		for k, v := range caps {
			out[k] = v / total
		}
		return out
	}
	best, bestCost := "", 0.0
	for _, ps := range c.pools {
		if ps.Role != role || ps.Max == 0 {
			continue
		}
		cost := ps.rep.PricePerHour() / math.Max(c.model(ps, in.Mix).capacity, 1e-9)
		if best == "" || cost < bestCost {
			best, bestCost = ps.Key(), cost
		}
	}
	if best != "" {
		out[best] = 1
	}
	return out
}

// provisioned is a pool's live, not draining, replicas plus those starting.
func provisioned(ps *poolState, byPool map[string][]*schemas.Heartbeat, in Inputs) int {
	n := in.Starting[ps.Key()]
	for _, hb := range byPool[ps.Key()] {
		if !hb.Draining {
			n++
		}
	}
	return n
}

// phaseDemands measures the group's flow and splits it over the role
// pools. shares is the queue (with held demand) per pool, unserved the
// requests turned away since the last decision with their shares.
func (c *Controller) phaseDemands(byPool map[string][]*schemas.Heartbeat, in Inputs, shares map[string]float64, unserved float64, unservedShares map[string]float64) map[string]phaseDemand {
	g := &c.phases
	if g.counted == nil {
		g.counted = map[string]uint64{}
	}
	pre := c.phaseShares(schemas.RolePrefill, byPool, in)
	dec := c.phaseShares(schemas.RoleDecode, byPool, in)
	done, load, queue, turned := 0.0, 0.0, 0.0, 0.0
	seen := map[string]bool{}
	for _, ps := range c.pools {
		if !FixedRole(ps.Role) {
			continue
		}
		for _, hb := range byPool[ps.Key()] {
			seen[hb.WorkerID] = true
			load += float64(hb.Running + hb.Waiting)
			n := hb.ErrorsTotal
			if ps.Role == schemas.RoleDecode {
				n += hb.CompletedTotal
			}
			if prev, ok := g.counted[hb.WorkerID]; ok && n >= prev {
				done += float64(n - prev)
			}
			g.counted[hb.WorkerID] = n
		}
		if ps.Role == schemas.RolePrefill {
			// The queue ahead of the group waits for its prefills.
			queue += shares[ps.Key()]
			turned += unserved * unservedShares[ps.Key()]
		}
	}
	for id := range g.counted {
		if !seen[id] {
			delete(g.counted, id)
		}
	}
	load += queue
	arrived, have := 0.0, g.have
	if have {
		arrived = math.Max(0, done+load-g.lastLoad) + turned
	}
	g.lastLoad, g.have = load, true
	out := map[string]phaseDemand{}
	for _, ps := range c.pools {
		s := 0.0
		switch ps.Role {
		case schemas.RolePrefill:
			s = pre[ps.Key()]
		case schemas.RoleDecode:
			s = dec[ps.Key()]
		default:
			continue
		}
		pd := phaseDemand{arrived: arrived * s, queued: queue * s, have: have}
		if ps.Role == schemas.RoleDecode {
			// Held for a decode pool's cold start: its own.
			pd.queued += shares[ps.Key()]
		}
		out[ps.Key()] = pd
	}
	return out
}

// queueWeight is a pool's weight in the split of the router's queue: its
// provisioned requests a second for pools of whole requests (as before),
// its prefill rate for a prefill pool (a queued request waits for its
// prefill first) and none for a decode pool, which phaseDemands gives its
// share of the queue that reaches the prefill pools.
func (c *Controller) queueWeight(ps *poolState, mix Mix) float64 {
	if ps.Role == schemas.RoleDecode {
		return 0
	}
	return c.model(ps, mix).capacity
}

// decideRoles turns workers of a pool of whole requests into prefill
// workers, or back, when Config.AssignRoles is on. The router splits a
// request only when its uncached prompt is long enough to pay for moving
// its KV (placement's SplitMinUncached: one step's prefill budget, 8,192 tokens, by default); once the
// mix's uncached prompts are that long, the pool's work falls into the two
// phases in the proportion of their replica-seconds — a request's prefill
// at the TTFT target against its decode at the TPOT target (PrefillCapacity,
// DecodeCapacity) — and the pool dedicates that share of its workers,
// rounded, to prefill, keeping at least one of each; below the threshold
// it turns them back. One worker moves per decision and at most one move
// per RoleDwell, the least loaded first (a worker turned to prefill still
// finishes the decodes it holds). Only workers with a KV link take split
// legs, so only they are counted or moved. The pool keeps its whole-request
// sizing: the roles change what its replicas do, not how many it needs.
func (c *Controller) decideRoles(byPool map[string][]*schemas.Heartbeat, in Inputs, d *Decision) {
	if !c.cfg.AssignRoles {
		return
	}
	u := Uncached(in.Mix)
	for _, ps := range c.pools {
		if FixedRole(ps.Role) {
			continue
		}
		var both, pre []*schemas.Heartbeat
		for _, hb := range byPool[ps.Key()] {
			if hb.Draining || hb.Link == "" {
				continue
			}
			switch c.roleOf(hb, in.Now) {
			case schemas.RolePrefill:
				pre = append(pre, hb)
			case schemas.RoleDecode:
				// Not the controller's doing: left as it is.
			default:
				both = append(both, hb)
			}
		}
		n := len(both) + len(pre)
		want, why := 0, fmt.Sprintf("uncached prompt %.0f tokens < %d: too short to split", u, roleSplitMinUncached)
		if u >= roleSplitMinUncached && n >= 2 {
			pc := PrefillCapacity(ps.rep, in.Mix, c.cfg.TTFTTarget).RequestsPerSec(u)
			dc := DecodeCapacity(ps.rep, in.Mix, c.cfg.ITLTarget).RequestsPerSec(math.Max(in.Mix.OutputTokens, 1))
			if pc > 0 && dc > 0 {
				f := (1 / pc) / (1/pc + 1/dc)
				want = clamp(int(math.Round(float64(n)*f)), 1, n-1)
				why = fmt.Sprintf("uncached prompt %.0f of %.0f tokens (≥ %d splits): prefill is %.0f%% of the work (%.2f req/s a replica at the TTFT target, decode %.2f at the TPOT target), so %d of %d workers prefill",
					u, in.Mix.PromptTokens, roleSplitMinUncached, f*100, pc, dc, want, n)
			}
		}
		if want == len(pre) || (!ps.roleAt.IsZero() && in.Now.Sub(ps.roleAt) < c.cfg.RoleDwell) {
			continue
		}
		load := func(hb *schemas.Heartbeat) int { return hb.Running + hb.Waiting }
		var hb *schemas.Heartbeat
		from, to := schemas.RoleBoth, schemas.RolePrefill
		if want > len(pre) {
			sort.Slice(both, func(i, j int) bool {
				if load(both[i]) != load(both[j]) {
					return load(both[i]) < load(both[j])
				}
				return both[i].WorkerID < both[j].WorkerID
			})
			hb = both[0]
		} else {
			sort.Slice(pre, func(i, j int) bool {
				if load(pre[i]) != load(pre[j]) {
					return load(pre[i]) < load(pre[j])
				}
				return pre[i].WorkerID > pre[j].WorkerID
			})
			hb, from, to = pre[0], schemas.RolePrefill, schemas.RoleBoth
		}
		ps.roleAt = in.Now
		st := c.workers[hb.WorkerID]
		st.role, st.roleAt = to, in.Now
		reason := fmt.Sprintf("role %s → %s: %s", from, to, why)
		d.Roles = append(d.Roles, RoleDecision{Worker: hb.WorkerID, Pool: ps.Key(), Role: to, Reason: reason})
		d.change(KindRole, hb.WorkerID, from, to, reason)
	}
}

// roleSplitMinUncached is the uncached prompt below which the router does
// not split a request: placement.Options.SplitMinUncached's default.
const roleSplitMinUncached = placement.DefaultChunkTokens

// roleOf is a worker's role as the controller counts it: the one it last
// commanded until a heartbeat shows it or intentTTL passes, else the
// heartbeat's ("" read as both).
func (c *Controller) roleOf(hb *schemas.Heartbeat, now time.Time) string {
	role := hb.Role
	if role == "" {
		role = schemas.RoleBoth
	}
	st := c.workers[hb.WorkerID]
	if st == nil || st.role == "" {
		return role
	}
	if st.role == role || now.Sub(st.roleAt) > intentTTL {
		st.role = ""
		return role
	}
	return st.role
}

// tightestTTFT is the tightest first-token objective among classes in
// placement.DefaultTargets (the router's defaults for requests that name
// none): the least base, then the least per-token allowance.
func tightestTTFT(classes []string) placement.ClassTargets {
	best, ok := placement.ClassTargets{}, false
	for _, cl := range classes {
		t, found := placement.DefaultTargets[cl]
		if !found {
			continue
		}
		if !ok || t.TTFTBase < best.TTFTBase || (t.TTFTBase == best.TTFTBase && t.PerPromptToken < best.PerPromptToken) {
			best, ok = t, true
		}
	}
	if !ok {
		best = placement.DefaultTargets[schemas.PriorityCritical]
	}
	return best
}
