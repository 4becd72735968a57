package loadgen

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/switchyard-ai/switchyard/loadgen/tally"
	"github.com/switchyard-ai/switchyard/schemas"
	"github.com/switchyard-ai/switchyard/services/client"
	"github.com/switchyard-ai/switchyard/services/svc"
	"github.com/switchyard-ai/switchyard/subjects"
)

// RunOptions tunes Run. Zero values take the defaults.
type RunOptions struct {
	// MaxInflight bounds submissions awaiting their JetStream ack (256).
	MaxInflight int
	// Drain is the longest wait for outstanding results after the last
	// submission (30 s); the wait also ends PastDeadline (5 s) after the
	// last deadline. What has no result by then counts as lost.
	Drain        time.Duration
	PastDeadline time.Duration
	// AckWait bounds the wait for a submission's JetStream ack before it
	// is resubmitted (10 s).
	AckWait time.Duration
	// WorkflowTenant, when set, replaces the tenant of workflow steps.
	WorkflowTenant string
	Logger         *slog.Logger
}

// Run submits arrivals on their schedule through nc, accounts for every
// acknowledged submission with a tally fed by the RESULTS stream and the
// decision events, waits for the answers, and returns the summary and how
// long it took. The demo and `switchyard loadgen` both run load this way.
func Run(ctx context.Context, nc *nats.Conn, arrivals []Arrival, o RunOptions) (tally.Summary, time.Duration, error) {
	if o.MaxInflight <= 0 {
		o.MaxInflight = 256
	}
	if o.Drain <= 0 {
		o.Drain = 30 * time.Second
	}
	if o.PastDeadline <= 0 {
		o.PastDeadline = 5 * time.Second
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.AckWait <= 0 {
		o.AckWait = 10 * time.Second
	}
	cl, err := client.New(nc)
	if err != nil {
		return tally.Summary{}, 0, err
	}
	t := tally.New()
	rctx, stopResults := context.WithCancel(ctx)
	defer stopResults()
	resErr := make(chan error, 1)
	go func() { resErr <- cl.Results(rctx, "*", t.Observe) }()
	evSub, err := nc.Subscribe(subjects.EventAll, func(m *nats.Msg) {
		// One message may carry several events of a kind (svc.DecodeEvents).
		evs, _ := svc.DecodeEvents(m.Header, m.Data)
		for _, ev := range evs {
			t.Event(ev)
		}
	})
	if err != nil {
		return tally.Summary{}, 0, fmt.Errorf("subscribe events: %w", err)
	}
	defer evSub.Unsubscribe()
	// The result consumer is created asynchronously; results published
	// before it exists would be missed (it delivers new messages only).
	select {
	case err := <-resErr:
		return tally.Summary{}, 0, fmt.Errorf("results: %w", err)
	case <-time.After(300 * time.Millisecond):
	}

	var (
		wg           sync.WaitGroup
		sem          = make(chan struct{}, o.MaxInflight)
		mu           sync.Mutex
		lastDeadline time.Time
		submitErrs   int
	)
	start := time.Now()
	for _, a := range arrivals {
		if wait := time.Until(start.Add(a.Offset)); wait > 0 {
			select {
			case <-ctx.Done():
				return tally.Summary{}, 0, ctx.Err()
			case <-time.After(wait):
			}
		}
		tenant := a.Tenant
		if a.Request.Workflow != nil && o.WorkflowTenant != "" {
			tenant = o.WorkflowTenant
		}
		req := a.Request
		req.ID = client.NewID()
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
			return tally.Summary{}, 0, ctx.Err()
		}
		sentAt := time.Now()
		f, err := cl.SubmitAsync(tenant, &req)
		if err != nil {
			<-sem
			o.Logger.Warn("submit", "id", req.ID, "err", err)
			mu.Lock()
			submitErrs++
			mu.Unlock()
			continue
		}
		wg.Add(1)
		go func(tenant string, req schemas.Request) {
			defer wg.Done()
			err := awaitAck(ctx, f, o.AckWait)
			<-sem
			// A lost ack is not a lost request: resubmit with the same id,
			// which the SUBMIT stream dedupes, backing off while an
			// election runs — for at most 30 s, well inside the stream's
			// 2-minute duplicate window.
			if err != nil {
				sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
				_, err = cl.Resubmit(sctx, tenant, &req)
				cancel()
			}
			if err != nil {
				o.Logger.Warn("submit not acknowledged", "id", req.ID, "err", err)
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
	drainUntil := lastDeadline.Add(o.PastDeadline)
	mu.Unlock()
	if limit := loadEnd.Add(o.Drain); drainUntil.After(limit) {
		drainUntil = limit
	}
	for time.Now().Before(drainUntil) && t.Outstanding() > 0 && ctx.Err() == nil {
		time.Sleep(100 * time.Millisecond)
	}
	// Late duplicates, if any, get counted.
	time.Sleep(300 * time.Millisecond)
	// The live results consumer can miss messages that RESULTS holds: an
	// ordered consumer resets when the NATS node it rode on is killed, and
	// on a loaded machine a reset can fall behind for longer than the
	// drain. The durable answer is the stream, so every request still
	// outstanding is looked up there before it is called lost.
	if n := recoverFromStream(ctx, cl, t, start.Add(-time.Minute), o.Logger); n > 0 {
		o.Logger.Warn("results read back from RESULTS after the live consumer missed them", "count", n)
	}
	if submitErrs > 0 {
		o.Logger.Warn("submissions never acknowledged (not counted as submitted)", "count", submitErrs)
	}
	sum := t.Summary()
	if sum.Lost > 0 {
		o.Logger.Warn("requests with no result anywhere, not even in RESULTS (switchyard trail ID... says where each stopped)",
			"lost", sum.Lost, "ids", sum.LostIDs)
	}
	return sum, time.Since(start), nil
}

// awaitAck waits for a submission's JetStream ack, at most wait. An async
// publish's future can stay unresolved forever when its ack is lost — a
// NATS node killed between storing the message and the reply reaching
// the client (the chaos drill hung loadgen for minutes on one) — so a
// missing ack is treated as lost and the caller resubmits with the same
// id, which the SUBMIT stream dedupes.
func awaitAck(ctx context.Context, f jetstream.PubAckFuture, wait time.Duration) error {
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-f.Ok():
		return nil
	case err := <-f.Err():
		return err
	case <-t.C:
		return fmt.Errorf("no JetStream ack within %s", wait)
	case <-ctx.Done():
		return ctx.Err()
	}
}

// recoverFromStream reads RESULTS from the run's start, in one pass, for
// the final result of each request the tally still misses, and returns
// how many it found. A read that fails (a server of the cluster still
// rejoining) is tried again, for up to a minute in all.
func recoverFromStream(ctx context.Context, cl *client.Client, t *tally.Tally, since time.Time, log *slog.Logger) int {
	ids := t.OutstandingIDs()
	if len(ids) == 0 {
		return 0
	}
	want := make(map[string]bool, len(ids))
	for _, id := range ids {
		want[id] = true
	}
	found := 0
	rctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	for try := 1; len(want) > 0; try++ {
		err := cl.ReadResults(rctx, "*", since, func(r schemas.Result) {
			// Only a request's own stored answer counts, once.
			if want[r.ID] {
				delete(want, r.ID)
				t.Observe(r)
				found++
			}
		})
		if err == nil {
			break
		}
		log.Warn("reading RESULTS for the requests the live consumer missed", "try", try, "missing", len(want), "err", err)
		select {
		case <-rctx.Done():
			return found
		case <-time.After(time.Second):
		}
	}
	return found
}
