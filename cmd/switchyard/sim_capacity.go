package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/switchyard-ai/switchyard/internal/driver/sim"
	"github.com/switchyard-ai/switchyard/loadgen/traces"
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
// SLO on the trace at its 1× load, as a table and, with --json, a last
// line {"capacity":[{"name","scale_at_slo90","scale_at_high99","min_replicas",...}]}.
func runCapacity(ctx context.Context, stdout io.Writer, cfg sim.Config, tr *traces.Trace, window time.Duration, policies []string, fleet string, o capacityOptions) error {
	st := tr.Window(window).Summarise()
	fmt.Fprintf(stdout, "trace %s: 1× load %d requests over %v (%.2f req/s), mean prompt %.0f, mean output %.0f; a probe at x× keeps the first %v of the trace scaled by x\n",
		tr.Name, st.Requests, st.Span.Round(time.Second), st.RatePerSec, st.MeanPrompt, st.MeanOutput, windowText(window))
	fmt.Fprintln(stdout, fleet)
	s := o.search
	if o.progress != nil {
		var mu sync.Mutex
		s.OnProbe = func(policy string, p sim.CapacityProbe, wall float64) {
			mu.Lock()
			defer mu.Unlock()
			fmt.Fprintf(o.progress, "capacity: %s at %g× on %d replicas: task attainment %.3f, high %v (%.1fs)\n", policy, p.Scale, p.Replicas, p.Task, p.High, wall)
		}
	}
	caps, err := sim.FindCapacity(ctx, cfg, tr, window, policies, s)
	if err != nil {
		return err
	}
	tol := s.Tolerance
	if tol <= 0 {
		tol = 0.05
	}
	fmt.Fprintf(stdout, "\ncapacity at SLO (overall: task attainment — workflows on agentic traces; high: critical and interactive requests each; rate scale × the trace's 1× load; geometric sweep ×2 from 1×, then bisection to within %.0f %%; the highest scale that met the bar below the first that failed it):\n", 100*tol)
	tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "policy\tscale@SLO≥0.90\tfails at\tscale@high≥0.99\tfails at\tsearched to\tmin replicas\tmin GPUs\tof\tprobes\t")
	for _, c := range caps {
		minRep := "-"
		if c.MinReplicas > 0 {
			minRep = fmt.Sprint(c.MinReplicas)
		} else if !s.NoFleet {
			minRep = "none"
		}
		fmt.Fprintf(tw, "%s\t%g\t%s\t%g\t%s\t%g\t%s\t%d\t%d\t%d\t\n", c.Name, c.ScaleAtSLO90, failText(c.FailSLO90), c.ScaleAtHigh99, failText(c.FailHigh99),
			c.MaxScale, minRep, c.MinGPUs, c.Replicas, len(c.Probes))
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
				fmt.Fprintf(stdout, "switchyard / best baseline (%s) at %s: %.2f×\n", n, m.label, m.get(c)/v)
			}
		}
	}
	fmt.Fprintln(stdout, "\nclass attainment at the first scale that broke the high bar:")
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
		fmt.Fprintf(stdout, "  %-14s at %g×: %s\n", c.Name, c.FailHigh99, strings.Join(kv, ", "))
	}
	type diag struct {
		Name    string               `json:"name"`
		Scale   float64              `json:"rate_scale"`
		Classes []sim.ClassDiagnosis `json:"classes"`
	}
	var diags []diag
	if o.diagnose > 0 {
		fmt.Fprintf(stdout, "\nby class and GPU type at %g×:\n", o.diagnose)
		tw = tabwriter.NewWriter(stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintln(tw, "policy\tclass\tmodel\tGPU\treqs\tmet\tmiss TTFT\tmiss TPOT\tfailed\tshed\twait mean ms\twait p99 ms\tTTFT p99 ms\tITL mean ms\tITL p99 ms\tcodes\t")
		for _, p := range policies {
			_, ds, err := sim.Diagnose(cfg, tr.Scale(o.diagnose).Window(window), p)
			if err != nil {
				return err
			}
			diags = append(diags, diag{p, o.diagnose, ds})
			for _, d := range ds {
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%d\t%d\t%d\t%d\t%d\t%.0f\t%.0f\t%.0f\t%.1f\t%.1f\t%s\t\n", p, d.Class, d.Model, d.Pool, d.Requests, d.Met,
					d.MissTTFT, d.MissTPOT, d.Failed, d.Shed, d.QueueWaitMeanMs, d.QueueWaitP99Ms, d.TTFTP99Ms, d.ITLMeanMs, d.ITLP99Ms, codesText(d.Codes))
			}
		}
		tw.Flush()
	}
	if o.json {
		b, err := json.Marshal(struct {
			Capacity  []sim.PolicyCapacity `json:"capacity"`
			Trace     string               `json:"trace"`
			Diagnosis []diag               `json:"diagnosis,omitempty"`
		}{caps, tr.Name, diags})
		if err != nil {
			return err
		}
		fmt.Fprintln(stdout, string(b))
	}
	return nil
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

// describeFleet prints pools as --gpus spells them.
func describeFleet(pools []sim.GPUSpec) string {
	var out []string
	for _, g := range pools {
		s := fmt.Sprintf("%s:%d", g.GPU, g.Count)
		if g.TP > 1 {
			s += fmt.Sprintf(":%d", g.TP)
		}
		if g.Model != "" {
			s += "@" + g.Model
		}
		out = append(out, s)
	}
	return strings.Join(out, ",")
}
