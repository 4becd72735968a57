package control

import "time"

// Recent keeps what the controller reads from finished requests: SLO
// attainment per class over a sliding window, and a running mean of the
// request mix. The live controller and the simulator feed it the same way.
// The zero value measures over one minute.
type Recent struct {
	// Window is how far back attainment looks (default one minute).
	Window   time.Duration
	outcomes []recentOutcome
	mix      Mix
	n        int
}

type recentOutcome struct {
	at    time.Time
	class string
	met   bool
}

// mixHorizon is roughly how many recent requests the mix averages over.
const mixHorizon = 500

// ObserveCached records one final outcome. met is whether it succeeded
// within its SLO (shed and failed requests are misses: the tenant got no
// answer in time); a success with output also moves the mix, cachedTokens
// (schemas.Usage.CachedTokens; for a split request the prefill worker's)
// its CachedTokens: a prefill pool is sized by the tokens left to compute.
func (r *Recent) ObserveCached(at time.Time, class string, met, ok bool, promptTokens, outputTokens, cachedTokens int) {
	r.outcomes = append(r.outcomes, recentOutcome{at: at, class: class, met: met})
	if ok && outputTokens > 0 {
		r.n = min(r.n+1, mixHorizon)
		w := 1 / float64(r.n)
		r.mix.PromptTokens += w * (float64(promptTokens) - r.mix.PromptTokens)
		r.mix.OutputTokens += w * (float64(outputTokens) - r.mix.OutputTokens)
		r.mix.PromptTokensSquared += w * (float64(promptTokens)*float64(promptTokens) - r.mix.PromptTokensSquared)
		r.mix.CachedTokens += w * (float64(min(max(cachedTokens, 0), promptTokens)) - r.mix.CachedTokens)
		p := float64(promptTokens)
		r.mix.PromptTokensCubed += w * (p*p*p - r.mix.PromptTokensCubed)
		r.mix.PromptTokensFourth += w * (p*p*p*p - r.mix.PromptTokensFourth)
	}
}

// SLO returns attainment per class over the window ending at now, written
// into into (cleared first; allocated when nil), and forgets older outcomes.
func (r *Recent) SLO(now time.Time, into map[string]Attainment) map[string]Attainment {
	window := r.Window
	if window <= 0 {
		window = time.Minute
	}
	k := 0
	for k < len(r.outcomes) && now.Sub(r.outcomes[k].at) > window {
		k++
	}
	r.outcomes = r.outcomes[k:]
	if into == nil {
		into = map[string]Attainment{}
	}
	clear(into)
	for _, o := range r.outcomes {
		a := into[o.class]
		a.Total++
		if o.met {
			a.Met++
		}
		into[o.class] = a
	}
	return into
}

// Mix is the running mean of recent requests' sizes.
func (r *Recent) Mix() Mix { return r.mix }
