package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/switchyard-ai/switchyard/internal/bus"
	"github.com/switchyard-ai/switchyard/loadgen"
	"github.com/switchyard-ai/switchyard/loadgen/tally"
	"github.com/switchyard-ai/switchyard/schemas"
	"github.com/switchyard-ai/switchyard/services/client"
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
	cl, err := client.New(nc)
	if err != nil {
		return err
	}
	t := tally.New()
	rctx, stopResults := context.WithCancel(ctx)
	defer stopResults()
	resErr := make(chan error, 1)
	go func() { resErr <- cl.Results(rctx, "*", t.Observe) }()
	evSub, err := nc.Subscribe(subjects.EventAll, func(m *nats.Msg) {
		var ev schemas.Event
		if f, err := schemas.FormatFromContentType(m.Header.Get(schemas.HeaderContentType)); err == nil && schemas.Unmarshal(f, m.Data, &ev) == nil {
			t.Event(ev)
		}
	})
	if err != nil {
		return fmt.Errorf("subscribe events: %w", err)
	}
	defer evSub.Unsubscribe()
	// The result consumer is created asynchronously; results published
	// before it exists would be missed (it delivers new messages only).
	select {
	case err := <-resErr:
		return fmt.Errorf("results: %w", err)
	case <-time.After(300 * time.Millisecond):
	}
	if !*jsonOut {
		fmt.Fprintf(stdout, "switchyard loadgen: %d requests over %s at %.1f/s to %s\n", len(arrivals), *duration, *rate, *url)
	}

	var (
		wg           sync.WaitGroup
		sem          = make(chan struct{}, *inflight)
		mu           sync.Mutex
		lastDeadline time.Time
		submitErrs   int
	)
	start := time.Now()
	for _, a := range arrivals {
		if wait := time.Until(start.Add(a.Offset)); wait > 0 {
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(wait):
			}
		}
		tenant := a.Tenant
		if a.Request.Workflow != nil && wfTenant != "" {
			tenant = wfTenant
		}
		req := a.Request
		req.ID = client.NewID()
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
			return ctx.Err()
		}
		sentAt := time.Now()
		f, err := cl.SubmitAsync(tenant, &req)
		if err != nil {
			<-sem
			logger.Warn("submit", "id", req.ID, "err", err)
			mu.Lock()
			submitErrs++
			mu.Unlock()
			continue
		}
		wg.Add(1)
		go func(tenant string, req schemas.Request) {
			defer wg.Done()
			var err error
			select {
			case <-f.Ok():
			case err = <-f.Err():
			}
			<-sem
			// A lost ack is not a lost request: resubmit synchronously
			// with the same id, which the SUBMIT stream dedupes.
			for try := 0; err != nil && try < 3 && ctx.Err() == nil; try++ {
				sctx, cancel := context.WithTimeout(ctx, 5*time.Second)
				_, err = cl.Submit(sctx, tenant, &req)
				cancel()
			}
			if err != nil {
				logger.Warn("submit not acknowledged", "id", req.ID, "err", err)
				mu.Lock()
				submitErrs++
				mu.Unlock()
				return
			}
			// Only acknowledged submissions count: the system owes those
			// an answer.
			t.Submitted(req.ID, req.Priority, sentAt)
			dl := req.EffectiveDeadline(sentAt, time.Minute)
			mu.Lock()
			if dl.After(lastDeadline) {
				lastDeadline = dl
			}
			mu.Unlock()
		}(tenant, req)
	}
	wg.Wait()
	loadEnd := time.Now()

	// Drain: every request is owed a final result by its deadline (+5 s for
	// the result to travel); stop early once nothing is outstanding.
	mu.Lock()
	drainUntil := lastDeadline.Add(5 * time.Second)
	mu.Unlock()
	if limit := loadEnd.Add(*drain); drainUntil.After(limit) {
		drainUntil = limit
	}
	for time.Now().Before(drainUntil) && t.Outstanding() > 0 && ctx.Err() == nil {
		time.Sleep(100 * time.Millisecond)
	}
	// Late duplicates, if any, get counted.
	time.Sleep(300 * time.Millisecond)
	sum := t.Summary()
	if submitErrs > 0 {
		logger.Warn("submissions never acknowledged (not counted as submitted)", "count", submitErrs)
	}
	if !*jsonOut {
		printSummary(stdout, sum, time.Since(start))
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
