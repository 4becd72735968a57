package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"sort"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/switchyard-ai/switchyard/internal/driver/sim"
)

type capacityOptions struct {
	search sim.CapacitySearch
	// diagnose > 0 also breaks each policy's outcomes down by class and
	// GPU type at that rate scale.
	diagnose float64
	json     bool
	// progress, when set, gets a line per probe.
	progress io.Writer
}

// runCapacity is `switchyard sim --capacity`: each policy's capacity at
// SLO on the trace at its 1× load, searched once per seed (runs[0] is the
// first seed), as a table of the medians with their ranges and, with
// --json, a last line {"capacity":[{"name","scale_at_slo90",
// "scale_at_high99","min_replicas","range",...}],"bound_scale",...}.
func runCapacity(ctx context.Context, stdout io.Writer, runs []sim.CapacityRun, policies []string, fleet string, o capacityOptions) error {
	s := o.search
	minHigh := s.MinHighRequests
	if minHigh == 0 {
		minHigh = 1000
	}
	first := runs[0]
	w1 := sim.ProbeWindow(first.Trace, first.Window, 1, minHigh)
	st := first.Trace.Window(w1).Summarise()
	fmt.Fprintf(stdout, "trace %s: 1× load %d requests over %v (%.2f req/s), mean prompt %.0f, mean output %.0f; a probe at x× keeps the first %v of the trace scaled by x, lengthened until it holds %d critical and interactive requests (or the whole trace)\n",
		first.Trace.Name, st.Requests, st.Span.Round(time.Second), st.RatePerSec, st.MeanPrompt, st.MeanOutput, windowText(first.Window), minHigh)
	fmt.Fprintln(stdout, fleet)
	// The roofline bound of each seed's draw, at its 1× window.
	type seedBound struct {
		Seed   int64            `json:"seed"`
		Scale  float64          `json:"bound_scale"`
		Models []sim.ModelBound `json:"models"`
	}
	var bounds []seedBound
	var bscales, bySeed []float64
	for _, r := range runs {
		b, models, err := sim.BoundScale(r.Config, r.Trace, sim.ProbeWindow(r.Trace, r.Window, 1, minHigh))
		if err != nil {
			return err
		}
		bounds = append(bounds, seedBound{r.Seed, b, models})
		bscales = append(bscales, b)
	}
	bySeed = append(bySeed, bscales...)
	sort.Float64s(bscales)
	bound := bscales[(len(bscales)-1)/2]
	boundOf := map[int64]float64{}
	for _, b := range bounds {
		boundOf[b.Seed] = b.Scale
	}
	if o.progress != nil {
		var mu sync.Mutex
		s.OnProbe = func(policy string, p sim.CapacityProbe, wall float64) {
			mu.Lock()
			defer mu.Unlock()
			fmt.Fprintf(o.progress, "capacity: %s seed %d at %g× on %d replicas (%d requests, %d high, window %.0fs): task attainment %.3f, high %v (%.1fs)\n",
				policy, p.Seed, p.Scale, p.Replicas, p.Requests, p.HighRequests, p.WindowSeconds, p.Task, p.High, wall)
		}
	}
	caps, err := sim.FindCapacitySeeds(ctx, runs, policies, s)
	if err != nil {
		return err
	}
	tol := s.Tolerance
	if tol <= 0 {
		tol = 0.05
	}
	seeds := make([]string, len(runs))
	for i, r := range runs {
		seeds[i] = fmt.Sprint(r.Seed)
	}
	fmt.Fprintf(stdout, "\ncapacity at SLO, median of %d seeds (%s) [range] (overall: task attainment — workflows on agentic traces; high: critical and interactive requests each; rate scale × the trace's 1× load; geometric sweep ×2 from 1×, then bisection to within %.0f %%; the highest scale that met the bar below the first that failed it):\n",
		len(runs), strings.Join(seeds, ", "), 100*tol)
	fmt.Fprintf(stdout, "roofline bound: %g× (median; demand meets the fleet's throughput with every engine at its largest batch; by seed %s); \"of bound\" is the median over seeds of each seed's scale ÷ its own bound\n", bound, boundsText(bySeed))
	tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "policy\tscale@SLO≥0.90\t[range]\tfails at\tof bound\tscale@high≥0.99\t[range]\tfails at\tof bound\tsearched to\tmin replicas\t[range]\tmin GPUs\tof\tprobes\t")
	for _, c := range caps {
		minRep, repRange := "-", "-"
		if !s.NoFleet {
			minRep, repRange = replicasText(c.MinReplicas), replicasText(c.Range.MinReplicas[0])+"–"+replicasText(c.Range.MinReplicas[1])
		}
		fmt.Fprintf(tw, "%s\t%g\t%s\t%s\t%s\t%g\t%s\t%s\t%s\t%g\t%s\t%s\t%d\t%d\t%d\t\n", c.Name,
			c.ScaleAtSLO90, rangeText(c.Range.ScaleAtSLO90), failText(c.FailSLO90), shareText(medianShare(c, boundOf, sloOf)),
			c.ScaleAtHigh99, rangeText(c.Range.ScaleAtHigh99), failText(c.FailHigh99), shareText(medianShare(c, boundOf, highOf)),
			c.MaxScale, minRep, repRange, c.MinGPUs, c.Replicas, len(c.Probes))
	}
	tw.Flush()
	best := func(get func(sim.PolicyCapacity) float64) (string, float64) {
		var name string
		var v float64
		for _, c := range caps {
			if !strings.HasPrefix(c.Name, "switchyard") && get(c) > v {
				name, v = c.Name, get(c)
			}
		}
		return name, v
	}
	for _, c := range caps {
		if c.Name != "switchyard" {
			continue
		}
		for _, m := range []struct {
			label string
			get   func(sim.PolicyCapacity) float64
		}{{"SLO≥0.90", func(c sim.PolicyCapacity) float64 { return c.ScaleAtSLO90 }}, {"high≥0.99", func(c sim.PolicyCapacity) float64 { return c.ScaleAtHigh99 }}} {
			if n, v := best(m.get); v > 0 {
				fmt.Fprintf(stdout, "switchyard / best baseline (%s) at %s: %.2f× (medians)\n", n, m.label, m.get(c)/v)
			}
		}
	}
	fmt.Fprintln(stdout, "\nclass attainment at the first scale that broke the high bar (the median seed's):")
	for _, c := range caps {
		if c.AtFailHigh99 == nil {
			continue
		}
		var kv []string
		for _, p := range []string{"critical", "interactive", "standard", "batch"} {
			if v, ok := c.AtFailHigh99[p]; ok {
				kv = append(kv, fmt.Sprintf("%s %.3f", p, v))
			}
		}
		fmt.Fprintf(stdout, "  %-14s %s\n", c.Name, strings.Join(kv, ", "))
	}
	type diag struct {
		Name      string                  `json:"name"`
		Scale     float64                 `json:"rate_scale"`
		Classes   []sim.ClassDiagnosis    `json:"classes"`
		Workflows []sim.WorkflowDiagnosis `json:"workflows,omitempty"`
	}
	var diags []diag
	if o.diagnose > 0 {
		// One seed, the first: the breakdown says where misses are, and
		// which seed does not change that.
		dw := sim.ProbeWindow(first.Trace, first.Window, o.diagnose, minHigh)
		fmt.Fprintf(stdout, "\nby class and GPU type at %g× (seed %d, window %s):\n", o.diagnose, first.Seed, windowText(dw))
		tw = tabwriter.NewWriter(stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintln(tw, "policy\tclass\tmodel\tGPU\treqs\tmet\tmiss TTFT\tmiss TPOT\tfailed\tshed\twait mean ms\twait p99 ms\tTTFT p99 ms\tITL mean ms\tITL p99 ms\tcodes\t")
		for _, p := range policies {
			_, dg, err := sim.Diagnose(first.Config, first.Trace.Scale(o.diagnose).Window(dw), p)
			if err != nil {
				return err
			}
			diags = append(diags, diag{p, o.diagnose, dg.Classes, dg.Workflows})
			for _, d := range dg.Classes {
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%d\t%d\t%d\t%d\t%d\t%.0f\t%.0f\t%.0f\t%.1f\t%.1f\t%s\t\n", p, d.Class, d.Model, d.Pool, d.Requests, d.Met,
					d.MissTTFT, d.MissTPOT, d.Failed, d.Shed, d.QueueWaitMeanMs, d.QueueWaitP99Ms, d.TTFTP99Ms, d.ITLMeanMs, d.ITLP99Ms, codesText(d.Codes))
			}
		}
		tw.Flush()
		if len(diags) > 0 && len(diags[0].Workflows) > 0 {
			// A workflow can miss while each of its steps meets its SLO: its
			// late time, split into the parts it is made of, names the one
			// that outgrew the deadline.
			fmt.Fprintf(stdout, "\nlate workflows by class at %g× (per late workflow, mean seconds; decode@1 is the same decodes alone on their GPUs):\n", o.diagnose)
			tw = tabwriter.NewWriter(stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
			fmt.Fprintln(tw, "policy\tclass\tworkflows\tmet\tlate\tbroken\tdeadline\telapsed\toverrun p50\twait\tTTFT\tdecode\tdecode@1\ttool gaps\tlate steps by GPU\t")
			for _, dg := range diags {
				for _, w := range dg.Workflows {
					fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%d\t%d\t%.1f\t%.1f\t%.1f%%\t%.2f\t%.2f\t%.1f\t%.1f\t%.1f\t%s\t\n", dg.Name, w.Class, w.Workflows, w.Succeeded, w.Late, w.Broken,
						w.LateDeadlineS, w.LateElapsedS, 100*w.LateOverrunP50, w.LateWaitS, w.LateTTFTS, w.LateDecodeS, w.LateDecode1S, w.LateToolGapS, codesText(w.LateStepsByPool))
				}
			}
			tw.Flush()
		}
	}
	if o.json {
		// Each row is the policy's sim.PolicyCapacity (its contract fields
		// the medians) with its shares of the bound beside it.
		type row struct {
			sim.PolicyCapacity
			SLO90OfBound  float64 `json:"slo90_of_bound"`
			High99OfBound float64 `json:"high99_of_bound"`
		}
		rows := make([]row, len(caps))
		for i, c := range caps {
			rows[i] = row{c, round3(medianShare(c, boundOf, sloOf)), round3(medianShare(c, boundOf, highOf))}
		}
		b, err := json.Marshal(struct {
			Capacity        []row       `json:"capacity"`
			Trace           string      `json:"trace"`
			BoundScale      float64     `json:"bound_scale"`
			Bounds          []seedBound `json:"bounds"`
			Seeds           []int64     `json:"seeds"`
			MinHighRequests int         `json:"min_high_requests"`
			Diagnosis       []diag      `json:"diagnosis,omitempty"`
		}{rows, first.Trace.Name, bound, bounds, seedList(runs), minHigh, diags})
		if err != nil {
			return err
		}
		fmt.Fprintln(stdout, string(b))
	}
	return nil
}

func seedList(runs []sim.CapacityRun) []int64 {
	out := make([]int64, len(runs))
	for i, r := range runs {
		out[i] = r.Seed
	}
	return out
}

func sloOf(s sim.SeedCapacity) float64  { return s.ScaleAtSLO90 }
func highOf(s sim.SeedCapacity) float64 { return s.ScaleAtHigh99 }

// medianShare is the median over c's seeds of each seed's scale as a
// share of that seed's own bound: the seeds draw different loads, so a
// median scale over a median bound would mix draws. -1 without bounds.
func medianShare(c sim.PolicyCapacity, boundOf map[int64]float64, get func(sim.SeedCapacity) float64) float64 {
	var v []float64
	for _, s := range c.Seeds {
		if b := boundOf[s.Seed]; b > 0 {
			v = append(v, get(s)/b)
		}
	}
	if len(v) == 0 {
		return -1
	}
	sort.Float64s(v)
	return v[(len(v)-1)/2]
}

func round3(x float64) float64 { return math.Round(1000*x) / 1000 }

func shareText(x float64) string {
	if x < 0 {
		return "-"
	}
	return fmt.Sprintf("%.0f%%", 100*x)
}

func rangeText(r [2]float64) string {
	if r[0] == r[1] {
		return fmt.Sprintf("[%g]", r[0])
	}
	return fmt.Sprintf("[%g–%g]", r[0], r[1])
}

func replicasText(n int) string {
	if n <= 0 {
		return "none"
	}
	return fmt.Sprint(n)
}

func boundsText(v []float64) string {
	parts := make([]string, len(v))
	for i, x := range v {
		parts[i] = fmt.Sprintf("%g×", x)
	}
	return strings.Join(parts, ", ")
}

func codesText(c map[string]int) string {
	if len(c) == 0 {
		return "-"
	}
	var kv []string
	for k, v := range c {
		if k == "" {
			k = "?"
		}
		kv = append(kv, fmt.Sprintf("%s:%d", k, v))
	}
	sort.Strings(kv)
	return strings.Join(kv, ",")
}

func windowText(d time.Duration) string {
	if d <= 0 {
		return "all (no window: every probe runs every row)"
	}
	return d.String()
}

func failText(x float64) string {
	if x == 0 {
		return "never"
	}
	return fmt.Sprintf("%g", x)
}

// runCheapest is `sim --capacity --cheapest-fleet`: the cheapest fleet of
// each family that serves the runs' traces at 1× within both bars.
func runCheapest(ctx context.Context, stdout io.Writer, runs []sim.CapacityRun, policy string, gpus []string, maxReplicas int, link string, jsonOut bool) error {
	for i := range gpus {
		gpus[i] = strings.TrimSpace(gpus[i])
	}
	cands := sim.FleetMixes(gpus, maxReplicas, link, sim.CatalogPrice(runs[0].Config))
	out, err := sim.CheapestFleets(ctx, runs, cands, policy, sim.CapacitySearch{OnProbe: func(name string, p sim.CapacityProbe, _ float64) {
		fmt.Fprintf(os.Stderr, "cheapest: %s serves at 1×: %v\n", name, p.Meets)
	}})
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "cheapest fleet serving the trace at 1× (task ≥ 0.90, critical and interactive ≥ 0.99; majority of %d seeds), policy %s, %d candidates tried of %d:\n", len(runs), policy, len(out), len(cands))
	best := map[string]sim.FleetMixOutcome{}
	for _, o := range out {
		mark := ""
		if o.Serves {
			mark = "  ← cheapest " + o.Family
			best[o.Family] = o
		}
		fmt.Fprintf(stdout, "  %-12s %-36s $%6.2f/h  task %s  high-min %s  split %d%s\n", o.Family, o.Fleet, o.PricePerHour, floats(o.Task), floats(o.High), o.Split, mark)
	}
	if h, ok := best[sim.FamilyHomogeneous]; ok {
		for _, fam := range []string{sim.FamilySplit, sim.FamilyMixed} {
			if b, ok := best[fam]; ok {
				fmt.Fprintf(stdout, "%s %s costs %.2f× the cheapest homogeneous fleet %s ($%.2f vs $%.2f/h)\n", fam, b.Fleet, b.PricePerHour/h.PricePerHour, h.Fleet, b.PricePerHour, h.PricePerHour)
			}
		}
	}
	if jsonOut {
		return json.NewEncoder(stdout).Encode(map[string]any{"policy": policy, "tried": out, "candidates": len(cands)})
	}
	return nil
}

func floats(xs []float64) string {
	var b []string
	for _, x := range xs {
		b = append(b, fmt.Sprintf("%.3f", x))
	}
	return strings.Join(b, "/")
}
