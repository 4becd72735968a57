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
	verbose := fs.Bool("v", false, "debug logging")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *rate <= 0 || *duration <= 0 || *inflight <= 0 {
		return fmt.Errorf("--rate, --duration and --max-inflight must be positive")
	}
	logger := newLogger(*verbose)
	wl := loadgen.DefaultWorkload(*duration, *seed)
	wl.Rate = *rate
	if !*burst {
		wl.BurstFactor = 0
	}
	wfTenant, err := retenant(&wl, *tenants)
	if err != nil {
		return err
	}
	arrivals := wl.Generate()

	nc, err := bus.Dial(ctx, *url, "switchyard-loadgen", 10*time.Second)
	if err != nil {
		return err
	}
	defer nc.Close()
	if !*jsonOut {
		fmt.Fprintf(stdout, "switchyard loadgen: %d requests over %s at %.1f/s to %s\n", len(arrivals), *duration, *rate, *url)
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
