package stack

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/switchyard-ai/switchyard/internal/adapter/batch"
	"github.com/switchyard-ai/switchyard/internal/adapter/bus"
	"github.com/switchyard-ai/switchyard/loadgen"
	"github.com/switchyard-ai/switchyard/loadgen/tally"
	"github.com/switchyard-ai/switchyard/schemas"
	"github.com/switchyard-ai/switchyard/services/client"
	"github.com/switchyard-ai/switchyard/subjects"
)

// The isolation scenario: one interactive tenant with a steady open-loop
// load, one batch tenant that drops a 10,000-line OpenAI batch file into the
// system a few seconds in. The interactive deadline comes from its profile.
const (
	isoInteractive  = "globex"
	isoBatch        = "umbrella"
	isoBatchLines   = 10000
	isoLoad         = 20 * time.Second
	isoRate         = 16.0 // interactive requests per second
	isoBatchAt      = 3 * time.Second
	isoDeadlineMs   = 5000
	isoSpeedUp      = 20
	isoWorkers      = 4
	isoMaxTokens    = 96
	isoBatchMaxToks = 256
)

var isoTenants = fmt.Sprintf(`{"tenants":{
	%q:{"priority":"interactive","slo":{"ttft_ms":800,"tpot_ms":60},"default_deadline_ms":%d},
	%q:{"priority":"batch","slo":{"ttft_ms":10000,"tpot_ms":500},"default_deadline_ms":600000}}}`,
	isoInteractive, isoDeadlineMs, isoBatch)

// isoRun is what one run of the scenario measured.
type isoRun struct {
	Interactive tally.Summary
	// TTFTp99 is the p99 of the workers' reported time to first token
	// (router queue plus simulated GPU time); E2Ep99 is the p99 of the
	// client-observed submit-to-result latency, both of interactive
	// requests that completed.
	TTFTp99, TTFTp50, E2Ep99 time.Duration
	Batch                    batchFate
}

// batchFate says where every batch request is at the end of a run.
type batchFate struct {
	Published int
	// Completed and Errored are final results (ok / anything else).
	Completed, Errored int
	// InFlight were dispatched to a worker and have no result yet; Queued
	// are admitted and held by the router's batch consumer; Scheduled wait
	// in a JetStream message schedule for a trough.
	InFlight, Queued, Scheduled int
	// RouterPending is the router batch consumer's pending plus unacked
	// count, which must cover Queued.
	RouterPending int
	// Lost are requests in none of the states above.
	Lost []string
}

// TestBatchIsolation is the issue's batch clause: "a 10,000-line file must
// not disturb interactive tenants' SLOs". It runs the same interactive load
// twice on fresh four-worker stacks — alone, then with a 10,000-line batch
// submitted through internal/adapter/batch's real path (Parse and Publish, as
// `switchyard batch submit` does) — and requires, with the batch, that the
// interactive tenant meets its deadline on at least 99 % of requests with
// none lost, that batch work completes some requests, and that every batch
// request not yet answered is held durably (scheduled, queued at the router
// or in flight on a worker) with no error result.
func TestBatchIsolation(t *testing.T) {
	if testing.Short() {
		t.Skip("runs two 20 s loads on a whole stack")
	}
	base := runIsolation(t, false)
	with := runIsolation(t, true)
	report := func(name string, r isoRun) {
		s := r.Interactive
		t.Logf("%-10s interactive: submitted %d completed %d shed %d failed %d lost %d; SLO attainment %.4f; TTFT p50 %s p99 %s; e2e p99 %s",
			name, s.Submitted, s.Completed, s.Shed, s.Failed, s.Lost, s.SLOAttainment, r.TTFTp50, r.TTFTp99, r.E2Ep99)
	}
	report("baseline", base)
	report("with batch", with)
	b := with.Batch
	t.Logf("batch: published %d completed %d errored %d in flight %d queued %d (router pending %d) scheduled %d lost %d",
		b.Published, b.Completed, b.Errored, b.InFlight, b.Queued, b.RouterPending, b.Scheduled, len(b.Lost))
	if os.Getenv("SY_ISOLATION_JSON") != "" {
		out, _ := json.Marshal(map[string]any{"baseline": base, "with_batch": with})
		t.Logf("json: %s", out)
	}

	for name, r := range map[string]isoRun{"baseline": base, "with batch": with} {
		s := r.Interactive
		if !s.Check() || s.Submitted == 0 {
			t.Errorf("%s: inconsistent accounting %+v", name, s)
		}
		if s.Lost != 0 || s.Duplicates != 0 {
			t.Errorf("%s: interactive lost %d, duplicates %d", name, s.Lost, s.Duplicates)
		}
		if s.SLOAttainment < 0.99 {
			t.Errorf("%s: interactive SLO attainment %.4f < 0.99 (errors %v)", name, s.SLOAttainment, s.ErrorsByCode)
		}
	}
	if b.Published != isoBatchLines {
		t.Errorf("batch: published %d of %d", b.Published, isoBatchLines)
	}
	if b.Completed == 0 {
		t.Errorf("batch made no progress: nothing completed")
	}
	if b.Errored != 0 {
		t.Errorf("batch: %d requests got an error result", b.Errored)
	}
	if b.Queued > b.RouterPending {
		t.Errorf("batch: %d admitted requests without a dispatch, but the router's batch consumer holds only %d", b.Queued, b.RouterPending)
	}
	if len(b.Lost) > 0 {
		t.Errorf("batch: %d requests in no durable state, e.g. %v", len(b.Lost), b.Lost[:min(5, len(b.Lost))])
	}
	if sum := b.Completed + b.Errored + b.InFlight + b.Queued + b.Scheduled + len(b.Lost); sum != isoBatchLines {
		t.Errorf("batch: states add up to %d, want %d", sum, isoBatchLines)
	}
}

// runIsolation runs the interactive load on a fresh stack, with or without
// the batch, and measures it.
func runIsolation(t *testing.T, withBatch bool) isoRun {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	path := filepath.Join(t.TempDir(), "tenants.json")
	if err := os.WriteFile(path, []byte(isoTenants), 0o600); err != nil {
		t.Fatal(err)
	}
	st, err := Start(ctx, Config{Workers: isoWorkers, SpeedUp: isoSpeedUp, Tenants: path,
		Logger: slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelError}))})
	if err != nil {
		t.Fatalf("start stack: %v", err)
	}
	defer st.Close()
	nc, err := st.Connect("isolation-client")
	if err != nil {
		t.Fatal(err)
	}
	cl, err := client.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	js, err := bus.JetStream(nc)
	if err != nil {
		t.Fatal(err)
	}

	tl := tally.New()
	var mu sync.Mutex
	sentAt := map[string]time.Time{}
	var e2e, ttft []time.Duration
	rctx, stopResults := context.WithCancel(ctx)
	defer stopResults()
	go cl.Results(rctx, isoInteractive, func(r schemas.Result) {
		tl.Observe(r)
		mu.Lock()
		defer mu.Unlock()
		if at, ok := sentAt[r.ID]; ok && r.Status == schemas.StatusOK {
			e2e = append(e2e, r.FinishedAt.Sub(at))
			ttft = append(ttft, time.Duration(r.Timing.TTFTMs*float64(time.Millisecond)))
			delete(sentAt, r.ID)
		}
	})
	// Results() subscribes from "new": let the consumer exist first.
	time.Sleep(200 * time.Millisecond)

	w := loadgen.Workload{Seed: 8, Duration: isoLoad, Rate: isoRate, Model: "llama-3.1-8b",
		Tenants: []loadgen.TenantMix{{Name: isoInteractive, Priority: schemas.PriorityInteractive, Share: 1, MaxTokens: isoMaxTokens}}}
	arrivals := w.Generate()

	var fate batchFate
	var batchErr error
	var batchWG sync.WaitGroup
	var rec batch.Record
	start := time.Now()
	if withBatch {
		batchWG.Add(1)
		go func() {
			defer batchWG.Done()
			time.Sleep(isoBatchAt)
			rec, batchErr = submitIsoBatch(ctx, js, nc)
		}()
	}
	for _, a := range arrivals {
		if d := time.Until(start.Add(a.Offset)); d > 0 {
			time.Sleep(d)
		}
		req := a.Request
		req.ID = client.NewID()
		mu.Lock()
		sentAt[req.ID] = time.Now()
		mu.Unlock()
		tl.Submitted(req.ID, req.Priority, time.Now())
		if _, err := cl.SubmitAsync(a.Tenant, &req); err != nil {
			t.Fatalf("submit: %v", err)
		}
	}
	select {
	case <-cl.PublishAsyncComplete():
	case <-ctx.Done():
		t.Fatal("interactive submits not acked")
	}
	// Every interactive request has a 5 s deadline: after that plus the
	// router's overdue grace each has a final result or never will.
	drain := time.Now().Add(time.Duration(isoDeadlineMs)*time.Millisecond + 8*time.Second)
	for tl.Outstanding() > 0 && time.Now().Before(drain) {
		time.Sleep(100 * time.Millisecond)
	}
	batchWG.Wait()
	if batchErr != nil {
		t.Fatalf("batch submit: %v", batchErr)
	}
	out := isoRun{Interactive: tl.Summary()}
	mu.Lock()
	out.TTFTp50, out.TTFTp99, out.E2Ep99 = quantile(ttft, 0.5), quantile(ttft, 0.99), quantile(e2e, 0.99)
	mu.Unlock()
	if withBatch {
		fate.Published = rec.Published
		if err := accountBatch(ctx, js, rec, &fate); err != nil {
			t.Fatal(err)
		}
		out.Batch = fate
	}
	return out
}

// submitIsoBatch writes a 10,000-line OpenAI batch file with realistic
// chat bodies and submits it exactly as `switchyard batch submit` does.
func submitIsoBatch(ctx context.Context, js jetstream.JetStream, nc *nats.Conn) (batch.Record, error) {
	var in bytes.Buffer
	for i := 0; i < isoBatchLines; i++ {
		body := map[string]any{
			"model": "llama-3.1-8b",
			"messages": []map[string]string{
				{"role": "system", "content": "You are a research analyst. Summarise sources faithfully, separate facts from inference, and flag uncertainty."},
				{"role": "user", "content": fmt.Sprintf("Summarise document %d of the archive: quarterly revenue, main risks, and the outlook in three bullet points.", i)},
			},
			"max_tokens": isoBatchMaxToks/2 + i%(isoBatchMaxToks/2+1),
		}
		line, err := json.Marshal(map[string]any{"custom_id": fmt.Sprintf("doc-%05d", i), "method": "POST", "url": batch.EndpointChat, "body": body})
		if err != nil {
			return batch.Record{}, err
		}
		in.Write(line)
		in.WriteByte('\n')
	}
	st, err := batch.OpenStore(ctx, js, batch.StoreOptions{})
	if err != nil {
		return batch.Record{}, err
	}
	cl, err := client.New(nc, client.WithJSON())
	if err != nil {
		return batch.Record{}, err
	}
	rec, _, err := batch.Submit(ctx, st, cl, batch.Submission{Tenant: isoBatch, Source: "archive.jsonl", Content: in.Bytes()}, time.Now())
	return rec, err
}

// accountBatch places every batch request in exactly one state, from the
// streams. The reads go admitted → router consumer → dispatches → results
// so a request moving on meanwhile is found in its later state, never in
// none.
func accountBatch(ctx context.Context, js jetstream.JetStream, rec batch.Record, f *batchFate) error {
	// Let the admitter decide everything submitted, on both lanes (batch
	// files go to sy.batch.<tenant>, decided by their own consumer): until
	// then a request is only in SUBMIT.
	for _, lane := range []string{subjects.AdmitterConsumer, subjects.AdmitterBatchConsumer} {
		adm, err := js.Consumer(ctx, subjects.StreamSubmit, lane)
		if err != nil {
			return err
		}
		for {
			info, err := adm.Info(ctx)
			if err != nil {
				return err
			}
			if info.NumPending == 0 && info.NumAckPending == 0 {
				break
			}
			if ctx.Err() != nil {
				return fmt.Errorf("admitter never caught up: %d pending, %d unacked", info.NumPending, info.NumAckPending)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	scheduled, err := msgIDs(ctx, js, subjects.StreamAdmitted, subjects.Schedule(isoBatch, "*"))
	if err != nil {
		return err
	}
	admitted, err := msgIDs(ctx, js, subjects.StreamAdmitted, subjects.AdmittedClass(schemas.PriorityBatch))
	if err != nil {
		return err
	}
	rc, err := js.Consumer(ctx, subjects.StreamAdmitted, subjects.RouterConsumer(schemas.PriorityBatch))
	if err != nil {
		return err
	}
	ri, err := rc.Info(ctx)
	if err != nil {
		return err
	}
	f.RouterPending = int(ri.NumPending) + ri.NumAckPending
	dispatched, err := msgIDs(ctx, js, subjects.StreamDispatch, subjects.Dispatch("*"))
	if err != nil {
		return err
	}
	results := map[string]string{}
	if err := scan(ctx, js, subjects.StreamResults, subjects.Result(isoBatch, "*"), func(m jetstream.Msg) {
		if _, id, err := subjects.ParseResult(m.Subject()); err == nil {
			if r, err := client.DecodeResult(m.Headers(), m.Data()); err == nil {
				results[id] = r.Status
			}
		}
	}); err != nil {
		return err
	}
	for line := 1; line <= isoBatchLines; line++ {
		id := batch.RequestID(rec.ID, line)
		switch {
		case results[id] == schemas.StatusOK:
			f.Completed++
		case results[id] != "":
			f.Errored++
		case dispatched[id]:
			f.InFlight++
		case admitted[id]:
			f.Queued++
		case scheduled[id]:
			f.Scheduled++
		default:
			f.Lost = append(f.Lost, id)
		}
	}
	return nil
}

// msgIDs collects the request ids (Nats-Msg-Id, less a dispatch's attempt
// suffix) of every message on filter.
func msgIDs(ctx context.Context, js jetstream.JetStream, stream, filter string) (map[string]bool, error) {
	ids := map[string]bool{}
	err := scan(ctx, js, stream, filter, func(m jetstream.Msg) {
		id := m.Headers().Get(schemas.HeaderMsgID)
		if stream == subjects.StreamDispatch {
			if i := bytes.LastIndex([]byte(id), []byte("-a")); i > 0 {
				id = id[:i]
			}
		}
		ids[id] = true
	})
	return ids, err
}

// scan reads every message on filter that the stream holds now.
func scan(ctx context.Context, js jetstream.JetStream, stream, filter string, fn func(jetstream.Msg)) error {
	s, err := js.Stream(ctx, stream)
	if err != nil {
		return err
	}
	info, err := s.Info(ctx, jetstream.WithSubjectFilter(filter))
	if err != nil {
		return err
	}
	var want uint64
	for _, n := range info.State.Subjects {
		want += n
	}
	if want == 0 {
		return nil
	}
	cons, err := js.OrderedConsumer(ctx, stream, jetstream.OrderedConsumerConfig{FilterSubjects: []string{filter}})
	if err != nil {
		return err
	}
	var got uint64
	for got < want {
		mb, err := cons.Fetch(1000, jetstream.FetchMaxWait(2*time.Second))
		if err != nil {
			return err
		}
		n := 0
		for m := range mb.Messages() {
			n++
			got++
			fn(m)
			if md, err := m.Metadata(); err == nil && md.NumPending == 0 {
				got = want
			}
		}
		if n == 0 {
			return fmt.Errorf("scan %s %s: stalled at %d of %d", stream, filter, got, want)
		}
	}
	return nil
}

func quantile(ds []time.Duration, q float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[min(len(s)-1, int(q*float64(len(s))))]
}

// testWriter sends the stack's error log lines to the test log.
type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(string(bytes.TrimRight(p, "\n")))
	return len(p), nil
}
