package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/switchyard-ai/switchyard/internal/adapter/bus"
	"github.com/switchyard-ai/switchyard/loadgen"
	"github.com/switchyard-ai/switchyard/loadgen/traces"
	"github.com/switchyard-ai/switchyard/schemas"
	"github.com/switchyard-ai/switchyard/subjects"
)

// runLoadgen publishes the demo's multi-tenant workload to a running system
// and accounts for every request with the same tally as the demo, so faults
// can be injected from outside while it runs and the counters say what was
// lost or duplicated.
func runLoadgen(ctx context.Context, args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("loadgen", flag.ContinueOnError)
	url := fs.String("nats", bus.DefaultURL, "NATS URL(s) of the running system, comma-separated")
	rate := fs.Float64("rate", 10, "steady request rate per second across tenants")
	duration := fs.Duration("duration", 10*time.Second, "how long to generate load")
	jsonOut := fs.Bool("json", false, "end with one JSON summary line on stdout")
	tenants := fs.String("tenants", "", "comma-separated tenants (default: the demo's acme,globex,initech,umbrella)")
	seed := fs.Uint64("seed", 1, "workload seed")
	burst := fs.Bool("burst", false, "include the demo's overload burst")
	inflight := fs.Int("max-inflight", 256, "most submissions awaiting their JetStream ack")
	drain := fs.Duration("drain", 30*time.Second, "longest wait for outstanding results after the load ends")
	pastDeadline := fs.Duration("past-deadline", 5*time.Second, "how long past the last deadline to wait for results before counting them lost")
	tracePath := fs.String("trace", "", "replay this trace's arrivals instead of the demo workload (mooncake JSONL or azure CSV; the same file `switchyard sim --trace` reads), its first --duration at --rate-scale")
	format := fs.String("format", "mooncake", "with --trace: mooncake | azure")
	rateScale := fs.Float64("rate-scale", 1, "with --trace: arrival-rate multiplier, as in `switchyard sim`")
	limit := fs.Int("limit", 0, "with --trace: read at most this many requests (0 = all)")
	model := fs.String("model", "llama-3.1-8b", "with --trace: the model of requests the trace does not assign one")
	verbose := fs.Bool("v", false, "debug logging")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *rate <= 0 || *duration <= 0 || *inflight <= 0 || *rateScale <= 0 {
		return fmt.Errorf("--rate, --duration, --rate-scale and --max-inflight must be positive")
	}
	logger := newLogger(*verbose)
	var arrivals []loadgen.Arrival
	wfTenant := ""
	if *tracePath != "" {
		if *format != "mooncake" && *format != "azure" {
			return fmt.Errorf("loadgen --format %q: want mooncake or azure (generated and closed-loop workloads run in `switchyard sim`)", *format)
		}
		tr, err := loadTrace(*format, *tracePath, traces.ReadOptions{Limit: *limit, Seed: int64(*seed)}, int64(*seed), 0, 0, 0, traces.ServeGenConfig{}, "", "")
		if err != nil {
			return err
		}
		arrivals, err = loadgen.FromTrace(tr.Scale(*rateScale).Window(*duration), *model)
		if err != nil {
			return fmt.Errorf("loadgen --trace %s: %w", *tracePath, err)
		}
	} else {
		wl := loadgen.DefaultWorkload(*duration, *seed)
		wl.Rate = *rate
		if !*burst {
			wl.BurstFactor = 0
		}
		var err error
		wfTenant, err = retenant(&wl, *tenants)
		if err != nil {
			return err
		}
		arrivals = wl.Generate()
	}

	nc, err := bus.Dial(ctx, *url, "switchyard-loadgen", 10*time.Second)
	if err != nil {
		return err
	}
	defer nc.Close()
	if !*jsonOut {
		what := fmt.Sprintf("at %.1f/s", *rate)
		if *tracePath != "" {
			what = fmt.Sprintf("from %s at %gx", *tracePath, *rateScale)
		}
		fmt.Fprintf(stdout, "switchyard loadgen: %d requests over %s %s to %s\n", len(arrivals), *duration, what, *url)
	}
	sum, took, err := loadgen.Run(ctx, nc, arrivals, loadgen.RunOptions{MaxInflight: *inflight, Drain: *drain, PastDeadline: *pastDeadline, WorkflowTenant: wfTenant, Logger: logger})
	if err != nil {
		return err
	}
	if !*jsonOut {
		printSummary(stdout, sum, took)
		return nil
	}
	b, err := json.Marshal(sum)
	if err != nil {
		return err
	}
	fmt.Fprintln(stdout, string(b))
	return nil
}

// retenant replaces the workload's tenants with the given names, keeping
// the demo's mix of priorities, deadlines and output lengths by cycling
// through it. The workload's agentic workflows run under a fixed tenant
// name; retenant returns the new tenant they run as instead (the first
// interactive one), or "" when the names are unchanged.
func retenant(wl *loadgen.Workload, list string) (workflowTenant string, err error) {
	if strings.TrimSpace(list) == "" {
		return "", nil
	}
	var names []string
	for _, n := range strings.Split(list, ",") {
		n = strings.TrimSpace(n)
		if n == "" {
			continue
		}
		if !subjects.ValidToken(n) {
			return "", fmt.Errorf("tenant %q is not a valid subject token", n)
		}
		names = append(names, n)
	}
	if len(names) == 0 {
		return "", fmt.Errorf("--tenants lists no tenant")
	}
	base := wl.Tenants
	mix := make([]loadgen.TenantMix, len(names))
	workflowTenant = names[0]
	found := false
	for i, n := range names {
		m := base[i%len(base)]
		m.Name = n
		m.Share = 1 / float64(len(names))
		mix[i] = m
		if !found && m.Priority == schemas.PriorityInteractive {
			workflowTenant, found = n, true
		}
	}
	wl.Tenants = mix
	return workflowTenant, nil
}
