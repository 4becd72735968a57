package sim

// Capacity at SLO, the measure serving papers compare systems by
// (DistServe, Sarathi-Serve): the highest load a policy sustains while
// meeting an attainment bar, and the smallest fleet that carries the
// trace's own load within it. Two bars are searched: overall attainment
// ≥ 0.90, and each high class (critical, interactive) ≥ 0.99.
//
// Overall attainment is of tasks (Result.TaskAttainment): requests, or
// whole workflows on an agentic trace, where a chain whose steps each met
// their targets but which missed its workflow deadline is a failure — else
// a policy that runs doomed chains to the end would score as if it served
// them. The high bar is per request of each class, as ByPriority counts.

import (
	"context"
	"errors"
	"fmt"
	"github.com/switchyard-ai/switchyard/internal/core/stats"
	"math"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/switchyard-ai/switchyard/internal/core/perf"
	"github.com/switchyard-ai/switchyard/internal/core/placement"
	"github.com/switchyard-ai/switchyard/internal/core/routing"
	"github.com/switchyard-ai/switchyard/loadgen/traces"
	"github.com/switchyard-ai/switchyard/schemas"
)

// HighClasses are the classes the high bar holds each of.
var HighClasses = []string{schemas.PriorityCritical, schemas.PriorityInteractive}

// CapacitySearch configures FindCapacitySeeds; zero fields take the defaults.
type CapacitySearch struct {
	// SLOTarget is the overall attainment bar (default 0.90) and
	// HighTarget the bar each high class must meet (default 0.99).
	SLOTarget, HighTarget float64
	// The sweep starts at Start (default 1) and multiplies the rate scale
	// by Factor (default 2) until the bar fails, down to MinScale (default
	// 1/64) when it fails at the start, up to MaxScale (default 64).
	Start, Factor, MinScale, MaxScale float64
	// Tolerance ends the bisection once the failing scale is within
	// 1+Tolerance of the passing one (default 0.05: the answer is within
	// 5 % below the true crossing).
	Tolerance float64
	// MaxFleetFactor bounds the smallest-fleet search at this multiple of
	// the scenario's replicas (default 4); NoFleet skips it.
	MaxFleetFactor int
	NoFleet        bool
	// MinHighRequests lengthens a probe's window, where the given one is
	// shorter, until it holds this many high-class requests, or to the
	// whole trace where the trace holds fewer (default 1,000; negative:
	// the given window only). At a low scale the given window holds few of
	// them, and a bar of 0.99 over a hundred requests is decided by one
	// miss: the high bar moved ±30–50 % between seeds at 130–440 requests a
	// window.
	MinHighRequests int
	// Parallel is how many policies (and seeds) are searched at once
	// (default 1).
	Parallel int
	// OnProbe, when set, sees every probe as it finishes (progress on long
	// searches); calls may come from several goroutines at once.
	OnProbe func(policy string, p CapacityProbe, wallSeconds float64)
}

func (s *CapacitySearch) fill() {
	if s.SLOTarget <= 0 {
		s.SLOTarget = 0.90
	}
	if s.HighTarget <= 0 {
		s.HighTarget = 0.99
	}
	if s.Start <= 0 {
		s.Start = 1
	}
	if s.Factor <= 1 {
		s.Factor = 2
	}
	if s.MinScale <= 0 {
		s.MinScale = 1.0 / 64
	}
	if s.MaxScale <= 0 {
		s.MaxScale = 64
	}
	if s.Tolerance <= 0 {
		s.Tolerance = 0.05
	}
	if s.MaxFleetFactor <= 0 {
		s.MaxFleetFactor = 4
	}
	if s.Parallel <= 0 {
		s.Parallel = 1
	}
	if s.MinHighRequests == 0 {
		s.MinHighRequests = 1000
	}
}

// CapacityProbe is one run of a search.
type CapacityProbe struct {
	// Seed is the run's seed (CapacityRun.Seed).
	Seed     int64   `json:"seed,omitempty"`
	Scale    float64 `json:"rate_scale"`
	Replicas int     `json:"replicas"`
	// WindowSeconds is the probe's window (0: every row of the trace);
	// Requests and HighRequests count what it held.
	WindowSeconds float64 `json:"window_s"`
	Requests      int     `json:"requests"`
	HighRequests  int     `json:"high_requests"`
	// SLO is request attainment, Task task attainment (the overall bar's).
	SLO  float64 `json:"slo_attainment"`
	Task float64 `json:"task_attainment"`
	// High is each high class's attainment (absent: no such requests).
	High   map[string]float64 `json:"high"`
	Meets  bool               `json:"meets_slo90"`
	MeetsH bool               `json:"meets_high99"`
}

// PolicyCapacity is one policy's capacity at SLO. Scales multiply the
// trace's arrival rate at the scenario's 1× (0: not met even at MinScale).
type PolicyCapacity struct {
	Name          string  `json:"name"`
	ScaleAtSLO90  float64 `json:"scale_at_slo90"`
	ScaleAtHigh99 float64 `json:"scale_at_high99"`
	// FailSLO90 and FailHigh99 are the lowest scales seen to fail each bar
	// (the top of the bisection bracket; 0 when it never failed up to
	// MaxScale, and the scale reported is then MaxScale, a lower bound).
	FailSLO90  float64 `json:"fail_slo90"`
	FailHigh99 float64 `json:"fail_high99"`
	// MinReplicas is the smallest fleet, every pool scaled in proportion
	// (each keeps at least one replica), meeting both bars at 1×; 0 when
	// none up to MaxFleetFactor × Replicas did. MinGPUs counts its GPUs
	// (replicas × TP).
	MinReplicas int `json:"min_replicas"`
	MinGPUs     int `json:"min_gpus"`
	// MaxScale is the highest scale searched: CapacitySearch.MaxScale, or
	// less where the window would outrun the trace.
	MaxScale float64 `json:"max_scale"`
	Replicas int     `json:"replicas"`
	GPUs     int     `json:"gpus"`
	// AtFailHigh99 is each class's attainment at FailHigh99 (which class
	// broke the high bar first).
	AtFailHigh99 map[string]float64 `json:"at_fail_high99,omitempty"`
	Probes       []CapacityProbe    `json:"probes"`
	// Range and Seeds are set by FindCapacitySeeds, which reports the
	// fields above as medians over the seeds.
	Range *CapacityRange `json:"range,omitempty"`
	Seeds []SeedCapacity `json:"seeds,omitempty"`
}

// CapacityRange is the lowest and highest of each headline figure over the
// seeds. For MinReplicas, 0 ("none": not met up to the fleet search's
// bound) is the worst, so it sorts last: [5, 0] reads "5 to none".
type CapacityRange struct {
	ScaleAtSLO90  [2]float64 `json:"scale_at_slo90"`
	ScaleAtHigh99 [2]float64 `json:"scale_at_high99"`
	MinReplicas   [2]int     `json:"min_replicas"`
}

// SeedCapacity is one seed's search.
type SeedCapacity struct {
	Seed          int64   `json:"seed"`
	ScaleAtSLO90  float64 `json:"scale_at_slo90"`
	ScaleAtHigh99 float64 `json:"scale_at_high99"`
	FailSLO90     float64 `json:"fail_slo90"`
	FailHigh99    float64 `json:"fail_high99"`
	MinReplicas   int     `json:"min_replicas"`
	MinGPUs       int     `json:"min_gpus"`
	// HighRequests is what the 1× probe's window held.
	HighRequests int `json:"high_requests_at_1x"`
}

// CapacityRun is one seed's inputs to FindCapacitySeeds: the fleet and the
// trace as that seed draws them (tenants, arrivals, jitter) and the
// window.
type CapacityRun struct {
	Seed   int64
	Config Config
	Trace  *traces.Trace
	Window time.Duration
}

// checkCapacity validates a search's inputs and caps MaxScale where the
// window would outrun the trace.
func checkCapacity(tr *traces.Trace, window time.Duration, policies []string, s CapacitySearch) (CapacitySearch, error) {
	if window < 0 {
		return s, fmt.Errorf("sim: capacity: negative window %v", window)
	}
	if len(tr.Requests) == 0 {
		return s, errors.New("sim: capacity: empty trace")
	}
	if window > 0 {
		fit := float64(tr.Requests[len(tr.Requests)-1].Arrival) / float64(window)
		if fit < 1 {
			return s, fmt.Errorf("sim: capacity: the trace's arrivals span %v, less than the %v window", tr.Requests[len(tr.Requests)-1].Arrival, window)
		}
		s.MaxScale = min(s.MaxScale, roundDown(fit))
	}
	for _, n := range policies {
		if _, err := NewPolicy(n, perf.NewPredictor(nil)); err != nil {
			return s, err
		}
	}
	return s, nil
}

// FindCapacitySeeds searches each policy's capacity at SLO for each run's
// trace on its fleet, once per run (a seed each: its own draw of the trace
// and the fleet's jitter). Every probe scales the trace's arrivals
// (Trace.Scale) and, with the run's Window > 0, keeps the arrivals of the
// first window of the scaled trace, so a probe at x× is x times the
// requests over the same time: a sustained load, not the trace's fixed
// rows squeezed into a burst that the fleet's batch slots absorb whole.
// The search then stops at the scale where the window would outrun the
// trace (PolicyCapacity.MaxScale). With Window 0 every probe runs all of
// the trace's rows.
//
// Attainment is not strictly monotone in load (a heavier load can shift
// which requests meet their targets), so each bar's answer is the highest
// scale that met it below the first scale found to fail it: the geometric
// sweep stops at the first failure, and the bisection between the last
// pass and that failure keeps its bracket, never searching above it.
//
// It reports, per policy, the median over the runs of each headline
// figure — ScaleAtSLO90, ScaleAtHigh99, MinReplicas, and with them
// FailSLO90, FailHigh99 and MinGPUs — with their range and every seed's
// figures. With an even number of seeds the median is the lower middle
// value, a scale some search measured rather than one between two.
// AtFailHigh99 is that of the seed whose high-bar scale is the median;
// Probes are every seed's, each tagged with its seed. All (seed, policy)
// searches share s.Parallel. ctx ends the search between runs.
func FindCapacitySeeds(ctx context.Context, runs []CapacityRun, policies []string, s CapacitySearch) ([]PolicyCapacity, error) {
	if len(runs) == 0 {
		return nil, errors.New("sim: capacity: no seeds")
	}
	s.fill()
	searches := make([]CapacitySearch, len(runs))
	for k, r := range runs {
		var err error
		if searches[k], err = checkCapacity(r.Trace, r.Window, policies, s); err != nil {
			return nil, fmt.Errorf("seed %d: %w", r.Seed, err)
		}
	}
	each := make([][]PolicyCapacity, len(runs))
	for k := range each {
		each[k] = make([]PolicyCapacity, len(policies))
	}
	errs := make([]error, len(runs)*len(policies))
	sem := make(chan struct{}, s.Parallel)
	var wg sync.WaitGroup
	for k, r := range runs {
		for i, n := range policies {
			wg.Add(1)
			go func() {
				defer wg.Done()
				sem <- struct{}{}
				defer func() { <-sem }()
				each[k][i], errs[k*len(policies)+i] = searchPolicy(ctx, r.Config, r.Trace, r.Window, n, searches[k], r.Seed)
			}()
		}
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	out := make([]PolicyCapacity, len(policies))
	for i := range policies {
		per := make([]PolicyCapacity, len(runs))
		for k := range runs {
			per[k] = each[k][i]
		}
		out[i] = mergeSeeds(per, runs)
	}
	return out, nil
}

// mergeSeeds folds one policy's searches over the seeds into medians.
func mergeSeeds(per []PolicyCapacity, runs []CapacityRun) PolicyCapacity {
	// A "never" (0) failure scale is above every measured one, and a 0
	// smallest fleet ("none") is larger than any found.
	inf := func(x float64) float64 {
		if x == 0 {
			return math.Inf(1)
		}
		return x
	}
	fin := func(x float64) float64 {
		if math.IsInf(x, 1) {
			return 0
		}
		return x
	}
	col := func(get func(PolicyCapacity) float64) []float64 {
		v := make([]float64, len(per))
		for k, p := range per {
			v[k] = get(p)
		}
		sort.Float64s(v)
		return v
	}
	med := func(v []float64) float64 { return v[(len(v)-1)/2] }
	slo := col(func(p PolicyCapacity) float64 { return p.ScaleAtSLO90 })
	high := col(func(p PolicyCapacity) float64 { return p.ScaleAtHigh99 })
	reps := col(func(p PolicyCapacity) float64 { return inf(float64(p.MinReplicas)) })
	gpus := col(func(p PolicyCapacity) float64 { return inf(float64(p.MinGPUs)) })
	out := per[0]
	out.ScaleAtSLO90, out.ScaleAtHigh99 = med(slo), med(high)
	out.FailSLO90 = fin(med(col(func(p PolicyCapacity) float64 { return inf(p.FailSLO90) })))
	out.FailHigh99 = fin(med(col(func(p PolicyCapacity) float64 { return inf(p.FailHigh99) })))
	out.MinReplicas, out.MinGPUs = int(fin(med(reps))), int(fin(med(gpus)))
	out.MaxScale = 0
	out.Range = &CapacityRange{
		ScaleAtSLO90:  [2]float64{slo[0], slo[len(slo)-1]},
		ScaleAtHigh99: [2]float64{high[0], high[len(high)-1]},
		MinReplicas:   [2]int{int(fin(reps[0])), int(fin(reps[len(reps)-1]))},
	}
	out.Probes = nil
	out.AtFailHigh99 = nil
	for k, p := range per {
		out.MaxScale = max(out.MaxScale, p.MaxScale)
		if p.ScaleAtHigh99 == out.ScaleAtHigh99 && out.AtFailHigh99 == nil {
			out.AtFailHigh99 = p.AtFailHigh99
		}
		sc := SeedCapacity{Seed: runs[k].Seed, ScaleAtSLO90: p.ScaleAtSLO90, ScaleAtHigh99: p.ScaleAtHigh99, FailSLO90: p.FailSLO90,
			FailHigh99: p.FailHigh99, MinReplicas: p.MinReplicas, MinGPUs: p.MinGPUs}
		for _, pr := range p.Probes {
			if pr.Scale == 1 && pr.Replicas == p.Replicas {
				sc.HighRequests = pr.HighRequests
			}
		}
		out.Seeds = append(out.Seeds, sc)
		out.Probes = append(out.Probes, p.Probes...)
	}
	return out
}

// meetsHigh reports whether every high class present met the bar.
func meetsHigh(r *Result, bar float64) bool {
	for _, c := range HighClasses {
		if cr, ok := r.ByPriority[c]; ok && cr.Requests > 0 && cr.SLOAttainment < bar {
			return false
		}
	}
	return true
}

type capKey struct {
	scale    float64
	replicas int
}

type policySearch struct {
	ctx    context.Context
	window time.Duration
	// highAt is the arrival, unscaled, of the MinHighRequests-th
	// high-class request (0: the trace holds fewer; -1: not asked for).
	highAt time.Duration
	seed   int64
	cfg    Config
	tr     *traces.Trace
	name   string
	s      CapacitySearch
	base   int
	memo   map[capKey]*Result
	pc     *PolicyCapacity
	fleet  map[int][]GPUSpec
}

func searchPolicy(ctx context.Context, cfg Config, tr *traces.Trace, window time.Duration, name string, s CapacitySearch, seed int64) (PolicyCapacity, error) {
	base := cfg.Replicas()
	gpus := 0
	for _, g := range cfg.GPUs {
		gpus += g.Count * max(g.TP, 1)
	}
	pc := PolicyCapacity{Name: name, Replicas: base, GPUs: gpus, MaxScale: s.MaxScale}
	ps := &policySearch{ctx: ctx, window: window, highAt: highArrival(tr, s.MinHighRequests), seed: seed, cfg: cfg, tr: tr, name: name, s: s, base: base,
		memo: map[capKey]*Result{}, pc: &pc, fleet: map[int][]GPUSpec{}}
	var err error
	if pc.ScaleAtSLO90, pc.FailSLO90, err = ps.bar(func(r *Result) bool { return r.TaskAttainment >= s.SLOTarget }); err != nil {
		return pc, err
	}
	if pc.ScaleAtHigh99, pc.FailHigh99, err = ps.bar(func(r *Result) bool { return meetsHigh(r, s.HighTarget) }); err != nil {
		return pc, err
	}
	if pc.FailHigh99 > 0 {
		r := ps.memo[capKey{pc.FailHigh99, base}]
		pc.AtFailHigh99 = map[string]float64{}
		for c, cr := range r.ByPriority {
			pc.AtFailHigh99[c] = cr.SLOAttainment
		}
	}
	if !s.NoFleet {
		if pc.MinReplicas, err = ps.smallestFleet(); err != nil {
			return pc, err
		}
		for _, g := range ps.fleet[pc.MinReplicas] {
			pc.MinGPUs += g.Count * max(g.TP, 1)
		}
	}
	sort.Slice(pc.Probes, func(i, j int) bool {
		a, b := pc.Probes[i], pc.Probes[j]
		if a.Replicas != b.Replicas {
			return a.Replicas > b.Replicas
		}
		return a.Scale < b.Scale
	})
	return pc, nil
}

// run is one memoised probe: the policy at a scale on a fleet of n
// replicas.
func (ps *policySearch) run(scale float64, n int) (*Result, error) {
	k := capKey{scale, n}
	if r, ok := ps.memo[k]; ok {
		return r, nil
	}
	if err := ps.ctx.Err(); err != nil {
		return nil, fmt.Errorf("sim: capacity %s: %w", ps.name, err)
	}
	pol, err := NewPolicy(ps.name, perf.NewPredictor(nil))
	if err != nil {
		return nil, err
	}
	c := ps.cfg
	if n != ps.base {
		c.GPUs = ResizeFleet(ps.cfg.GPUs, n)
		c.Faults = faultsOn(ps.cfg.Faults, c.GPUs)
	}
	ps.fleet[n] = c.GPUs
	w := ps.windowAt(scale)
	tr := ps.tr.Scale(scale).Window(w)
	r, err := Run(c, tr, pol)
	if err != nil {
		return nil, fmt.Errorf("sim: capacity %s at %g× on %d replicas: %w", ps.name, scale, n, err)
	}
	ps.memo[k] = r
	p := CapacityProbe{Seed: ps.seed, Scale: scale, Replicas: n, WindowSeconds: w.Seconds(), Requests: len(tr.Requests), HighRequests: countHigh(tr),
		SLO: r.SLOAttainment, Task: r.TaskAttainment, High: map[string]float64{},
		Meets: r.TaskAttainment >= ps.s.SLOTarget, MeetsH: meetsHigh(r, ps.s.HighTarget)}
	for _, cl := range HighClasses {
		if cr, ok := r.ByPriority[cl]; ok {
			p.High[cl] = cr.SLOAttainment
		}
	}
	ps.pc.Probes = append(ps.pc.Probes, p)
	if ps.s.OnProbe != nil {
		ps.s.OnProbe(ps.name, p, r.WallSeconds)
	}
	return r, nil
}

// windowAt is the window of a probe at scale (ProbeWindow).
func (ps *policySearch) windowAt(scale float64) time.Duration {
	return probeWindow(ps.window, ps.highAt, scale)
}

// ProbeWindow is the window a capacity probe at scale runs of tr (scaled):
// window, lengthened until it holds minHigh high-class requests, or the
// whole trace (0) where tr holds fewer; window itself when window ≤ 0 or
// minHigh < 0. The trace is the same at every scale, so a lengthened
// window runs the same load for longer: the rate is what the scale says,
// only the count grows.
func ProbeWindow(tr *traces.Trace, window time.Duration, scale float64, minHigh int) time.Duration {
	return probeWindow(window, highArrival(tr, minHigh), scale)
}

func probeWindow(window, highAt time.Duration, scale float64) time.Duration {
	switch {
	case window <= 0 || highAt < 0:
		return window
	case highAt == 0:
		return 0
	}
	return max(window, time.Duration(float64(highAt)/scale)+1)
}

// highArrival is the arrival of the n-th high-class request of tr: 0 when
// tr holds fewer, -1 when n < 0 (no minimum).
func highArrival(tr *traces.Trace, n int) time.Duration {
	if n < 0 {
		return -1
	}
	seen := 0
	for i := range tr.Requests {
		if isHigh(tr.Requests[i].Priority) {
			if seen++; seen >= n {
				return tr.Requests[i].Arrival
			}
		}
	}
	return 0
}

func isHigh(p string) bool {
	for _, c := range HighClasses {
		if p == c {
			return true
		}
	}
	return false
}

func countHigh(tr *traces.Trace) int {
	n := 0
	for i := range tr.Requests {
		if isHigh(tr.Requests[i].Priority) {
			n++
		}
	}
	return n
}

// bar finds the highest scale meeting ok below the first that fails it,
// and that first failure (0 when none up to MaxScale).
func (ps *policySearch) bar(ok func(*Result) bool) (pass, fail float64, err error) {
	s := ps.s
	pass, fail = 0, 0
	// Geometric sweep from Start: up while it passes, down while it fails.
	x := s.Start
	r, err := ps.run(x, ps.base)
	if err != nil {
		return 0, 0, err
	}
	if ok(r) {
		pass = x
		for pass < s.MaxScale {
			// The last step lands on MaxScale itself, so "never failed"
			// means it met the bar at the top of the search.
			x = min(pass*s.Factor, s.MaxScale)
			if r, err = ps.run(x, ps.base); err != nil {
				return 0, 0, err
			}
			if !ok(r) {
				fail = x
				break
			}
			pass = x
		}
		if fail == 0 {
			return pass, 0, nil
		}
	} else {
		fail = x
		for fail > s.MinScale {
			x = max(fail/s.Factor, s.MinScale)
			if r, err = ps.run(x, ps.base); err != nil {
				return 0, 0, err
			}
			if ok(r) {
				pass = x
				break
			}
			fail = x
		}
		if pass == 0 {
			return 0, fail, nil
		}
	}
	// Bisection, geometric, between the last pass and the first failure.
	for fail/pass > 1+s.Tolerance {
		mid := roundScale(math.Sqrt(pass * fail))
		if mid <= pass || mid >= fail {
			break
		}
		if r, err = ps.run(mid, ps.base); err != nil {
			return 0, 0, err
		}
		if ok(r) {
			pass = mid
		} else {
			fail = mid
		}
	}
	return pass, fail, nil
}

// roundDown is x to 3 significant digits, rounded down.
func roundDown(x float64) float64 {
	if x <= 0 {
		return x
	}
	p := math.Pow(10, 2-math.Floor(math.Log10(x)))
	return math.Floor(x*p) / p
}

// roundScale keeps probe scales short in tables (4 significant digits).
func roundScale(x float64) float64 {
	if x <= 0 {
		return x
	}
	p := math.Pow(10, 3-math.Floor(math.Log10(x)))
	return math.Round(x*p) / p
}

// smallestFleet is the fewest replicas, every pool scaled in proportion,
// meeting both bars at 1×: a binary search between the fewest the pools
// allow (one each) and the scenario's fleet, or upward by doubling when the
// scenario's fleet itself fails. 0 when MaxFleetFactor × its size fails.
func (ps *policySearch) smallestFleet() (int, error) {
	okAt := func(n int) (bool, error) {
		r, err := ps.run(1, n)
		if err != nil {
			return false, err
		}
		return r.TaskAttainment >= ps.s.SLOTarget && meetsHigh(r, ps.s.HighTarget), nil
	}
	lo, hi := len(ps.cfg.GPUs)-1, ps.base // lo fails (fewer than one per pool), hi to check
	good, err := okAt(hi)
	if err != nil {
		return 0, err
	}
	for !good {
		if hi >= ps.base*ps.s.MaxFleetFactor {
			return 0, nil
		}
		lo, hi = hi, min(hi*2, ps.base*ps.s.MaxFleetFactor)
		if good, err = okAt(hi); err != nil {
			return 0, err
		}
	}
	for hi-lo > 1 {
		mid := (lo + hi) / 2
		g, err := okAt(mid)
		if err != nil {
			return 0, err
		}
		if g {
			hi = mid
		} else {
			lo = mid
		}
	}
	return hi, nil
}

// rejectionNames turns a fail reason carrying routing.Summarize's counts
// ("2 deadline_unreachable, 1 excluded") into "deadline_unreachable+excluded".
// routing.Explain follows the counts with the first workers' details in
// parentheses ("(h100-00 deadline_unreachable: model llama-3.1-8b hot,
// 2.16s to the deadline; …)"), which are not counts: only the words that
// name a placement reason after a count are kept, so those details, and a
// message with no counts, add nothing.
func rejectionNames(reason string) string {
	if i := strings.Index(reason, " ("); i >= 0 {
		reason = reason[:i]
	}
	if i := strings.LastIndex(reason, ": "); i >= 0 {
		reason = reason[i+2:]
	}
	var names []string
	for _, part := range strings.Split(reason, ", ") {
		n, name, ok := strings.Cut(part, " ")
		if _, err := strconv.Atoi(n); ok && err == nil && reasonNames[name] {
			names = append(names, name)
		}
	}
	sort.Strings(names)
	return strings.Join(names, "+")
}

// reasonNames are placement's rejection reasons by name.
var reasonNames = func() map[string]bool {
	m := map[string]bool{}
	for r := placement.ReasonNone + 1; r < placement.NumReasons; r++ {
		m[r.String()] = true
	}
	return m
}()

// ResizeFleet scales every pool in proportion to n replicas in all, each
// pool keeping at least one (largest remainders take the rest), so a
// mixed fleet keeps its mix as it grows or shrinks.
func ResizeFleet(pools []GPUSpec, n int) []GPUSpec {
	total := 0
	for _, g := range pools {
		total += g.Count
	}
	n = max(n, len(pools))
	out := make([]GPUSpec, len(pools))
	copy(out, pools)
	type rem struct {
		i int
		f float64
	}
	var rems []rem
	used := 0
	for i, g := range pools {
		exact := float64(n) * float64(g.Count) / float64(total)
		out[i].Count = max(int(math.Floor(exact)), 1)
		used += out[i].Count
		rems = append(rems, rem{i, exact - math.Floor(exact)})
	}
	sort.SliceStable(rems, func(a, b int) bool { return rems[a].f > rems[b].f })
	for k := 0; used < n; k = (k + 1) % len(rems) {
		out[rems[k].i].Count++
		used++
	}
	// Floors of one can overshoot n on tiny fleets: take back from the
	// largest pools.
	for used > n {
		big := 0
		for i := range out {
			if out[i].Count > out[big].Count {
				big = i
			}
		}
		if out[big].Count <= 1 {
			break
		}
		out[big].Count--
		used--
	}
	return out
}

// faultsOn keeps the faults that name a worker of the fleet.
func faultsOn(fs []Fault, pools []GPUSpec) []Fault {
	names := map[string]bool{}
	for _, w := range workerNames(pools) {
		names[w] = true
	}
	var out []Fault
	for _, f := range fs {
		if names[f.Worker] {
			out = append(out, f)
		}
	}
	return out
}

// ClassDiagnosis is where one class's requests for one model on one GPU
// type lost or
// kept their SLO, from the outcomes a run resolved (Config.OnResolve).
type ClassDiagnosis struct {
	Class string `json:"class"`
	// Model is the model the requests asked for.
	Model string `json:"model"`
	// Pool is the GPU type that served the request's last attempt ("-"
	// for requests never placed).
	Pool     string `json:"pool"`
	Requests int    `json:"requests"`
	Met      int    `json:"met"`
	// MissTTFT finished late to the first token, MissTPOT met TTFT but
	// decoded too slowly; Failed and Shed never finished.
	MissTTFT int `json:"miss_ttft"`
	MissTPOT int `json:"miss_tpot"`
	Failed   int `json:"failed"`
	Shed     int `json:"shed"`
	// QueueWaitMeanMs is submission to placement; TTFT and ITL are of
	// finished requests.
	QueueWaitMeanMs float64 `json:"queue_wait_mean_ms"`
	QueueWaitP99Ms  float64 `json:"queue_wait_p99_ms"`
	TTFTP99Ms       float64 `json:"ttft_p99_ms"`
	ITLMeanMs       float64 `json:"itl_mean_ms"`
	ITLP99Ms        float64 `json:"itl_p99_ms"`
	// Codes counts the error codes of the failed and shed requests.
	Codes map[string]int `json:"codes,omitempty"`
}

// Diagnosis is one run's outcomes broken down: requests by class and GPU
// type, and workflows by class (none on traffic without workflows).
type Diagnosis struct {
	Classes   []ClassDiagnosis    `json:"classes"`
	Workflows []WorkflowDiagnosis `json:"workflows,omitempty"`
}

// Diagnose runs policy on tr and breaks its outcomes down by class and
// GPU type: which class misses, on which generation, and whether by
// queueing (wait), first token or inter-token latency; and, on agentic
// traffic, which part of a late workflow's time outgrew its deadline.
func Diagnose(cfg Config, tr *traces.Trace, policy string) (*Result, Diagnosis, error) {
	pol, err := NewPolicy(policy, perf.NewPredictor(nil))
	if err != nil {
		return nil, Diagnosis{}, err
	}
	wd := newWorkflowDiagnoser(&cfg)
	type acc struct {
		d               ClassDiagnosis
		wait, ttft, itl []float64
	}
	by := map[[3]string]*acc{}
	// Why the router failed each request it failed: the placement
	// rejections behind an unplaceable, from its fail Action.
	why := map[string]string{}
	prevIn := cfg.OnInput
	cfg.OnInput = func(in routing.Input, acts []routing.Action) {
		if prevIn != nil {
			prevIn(in, acts)
		}
		for _, a := range acts {
			if a.Kind == routing.ActFail && a.Err != nil && a.Err.Code == schemas.CodeUnplaceable {
				why[a.ID] = rejectionNames(a.Reason)
			}
		}
	}
	prev := cfg.OnResolve
	cfg.OnResolve = func(o Outcome) {
		if prev != nil {
			prev(o)
		}
		wd.observe(o)
		pool := poolOf(o.Worker)
		model := o.Request.Model
		if model == "" {
			model = cfg.Model
		}
		k := [3]string{o.Request.Priority, model, pool}
		a := by[k]
		if a == nil {
			a = &acc{d: ClassDiagnosis{Class: k[0], Model: k[1], Pool: k[2]}}
			by[k] = a
		}
		a.d.Requests++
		if !o.Placed.IsZero() {
			a.wait = append(a.wait, o.Placed.Sub(o.Submitted).Seconds())
		}
		switch o.Status {
		case "ok":
			a.ttft = append(a.ttft, o.TTFT)
			a.itl = append(a.itl, o.ITL)
			switch {
			case o.SLOMet:
				a.d.Met++
			case o.TTFT > o.Request.TTFTTarget.Seconds():
				a.d.MissTTFT++
			default:
				a.d.MissTPOT++
			}
		case "shed":
			a.d.Shed++
		default:
			a.d.Failed++
		}
		if o.Status != "ok" {
			if a.d.Codes == nil {
				a.d.Codes = map[string]int{}
			}
			code := o.Code
			if w := why[o.Request.ID]; w != "" {
				code += "(" + w + ")"
			}
			a.d.Codes[code]++
		}
	}
	res, err := Run(cfg, tr, pol)
	if err != nil {
		return nil, Diagnosis{}, err
	}
	var out []ClassDiagnosis
	for _, a := range by {
		sort.Float64s(a.wait)
		sort.Float64s(a.ttft)
		sort.Float64s(a.itl)
		a.d.QueueWaitMeanMs = 1000 * mean(a.wait)
		a.d.QueueWaitP99Ms = 1000 * stats.Quantile(a.wait, 0.99)
		a.d.TTFTP99Ms = 1000 * stats.Quantile(a.ttft, 0.99)
		a.d.ITLMeanMs = 1000 * mean(a.itl)
		a.d.ITLP99Ms = 1000 * stats.Quantile(a.itl, 0.99)
		out = append(out, a.d)
	}
	rank := map[string]int{}
	for i, p := range schemas.Priorities {
		rank[p] = i
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Class != out[j].Class {
			return rank[out[i].Class] < rank[out[j].Class]
		}
		if out[i].Model != out[j].Model {
			return out[i].Model < out[j].Model
		}
		return out[i].Pool < out[j].Pool
	})
	return res, Diagnosis{Classes: out, Workflows: wd.summary()}, nil
}
