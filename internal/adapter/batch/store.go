package batch

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/switchyard-ai/switchyard/internal/adapter/bus"
	"github.com/switchyard-ai/switchyard/schemas"
	"github.com/switchyard-ai/switchyard/subjects"
)

// Bucket is the JetStream KV bucket holding batch records.
const Bucket = "sy_batches"

// chunkSize bounds how many items one KV value holds: a 10,000-line batch
// would not fit in one value under NATS's default 1 MiB payload limit.
const chunkSize = 1000

// Record is a batch's state. The header lives under key <id>; its items
// (request id ↔ custom_id) under <id>.items.<k> and its bad lines under
// <id>.errors.<k>, chunkSize to a value.
type Record struct {
	V        int       `json:"v"`
	ID       string    `json:"id"`
	Tenant   string    `json:"tenant"`
	Source   string    `json:"source,omitempty"`
	Created  time.Time `json:"created"`
	Deadline time.Time `json:"deadline"`
	// Requests counts the lines that became requests, Invalid those that
	// did not.
	Requests  int `json:"requests"`
	Invalid   int `json:"invalid"`
	Published int `json:"published"`
	// Completed and Failed count final results seen by the last status or
	// wait (ok, and any other status).
	Completed  int        `json:"completed"`
	Failed     int        `json:"failed"`
	ItemChunks int        `json:"item_chunks"`
	ErrChunks  int        `json:"error_chunks"`
	FinishedAt *time.Time `json:"finished_at,omitempty"`
	// CancelledAt is when a cancel was asked for; the batch is cancelled
	// once every request has a final result (cancelled or not).
	CancelledAt *time.Time `json:"cancelled_at,omitempty"`
}

// Finished reports whether every request has a final result.
func (r Record) Finished() bool { return r.Completed+r.Failed >= r.Requests }

// Store reads and writes batch records.
type Store struct {
	js jetstream.JetStream
	kv jetstream.KeyValue
}

// StoreOptions sizes the bucket.
type StoreOptions struct {
	Replicas int
	// TTL is how long a record is kept; zero means 30 days, OpenAI's
	// retention for batch files.
	TTL time.Duration
}

// OpenStore creates the bucket if needed and returns a Store.
func OpenStore(ctx context.Context, js jetstream.JetStream, o StoreOptions) (*Store, error) {
	if o.Replicas == 0 {
		o.Replicas = 1
	}
	if o.TTL == 0 {
		o.TTL = 30 * 24 * time.Hour
	}
	// Kept as found: the gateway opens the store with default options
	// and must not scale down a bucket `switchyard batch` made.
	kv, err := bus.OpenKV(ctx, js, jetstream.KeyValueConfig{
		Bucket:      Bucket,
		Description: "batch records: counts and request id <-> custom_id",
		TTL:         o.TTL,
		Replicas:    o.Replicas,
		Storage:     jetstream.FileStorage,
	}, bus.KVKeep)
	if err != nil {
		return nil, fmt.Errorf("batch store: %w", err)
	}
	return &Store{js: js, kv: kv}, nil
}

// ErrNotFound is returned for an unknown batch id.
var ErrNotFound = errors.New("batch not found")

// Create writes a new record with its items and bad lines. The chunks go
// first and the header last, so a header that exists always has its
// chunks.
func (s *Store) Create(ctx context.Context, rec Record, items []Item, bad []LineError) (Record, error) {
	rec.V = 1
	rec.Requests, rec.Invalid = len(items), len(bad)
	rec.ItemChunks, rec.ErrChunks = 0, 0
	for i := 0; i < len(items); i += chunkSize {
		if err := s.putJSON(ctx, fmt.Sprintf("%s.items.%d", rec.ID, rec.ItemChunks), items[i:min(i+chunkSize, len(items))]); err != nil {
			return rec, err
		}
		rec.ItemChunks++
	}
	for i := 0; i < len(bad); i += chunkSize {
		if err := s.putJSON(ctx, fmt.Sprintf("%s.errors.%d", rec.ID, rec.ErrChunks), bad[i:min(i+chunkSize, len(bad))]); err != nil {
			return rec, err
		}
		rec.ErrChunks++
	}
	return rec, s.Put(ctx, rec)
}

// Put writes the header.
func (s *Store) Put(ctx context.Context, rec Record) error { return s.putJSON(ctx, rec.ID, rec) }

func (s *Store) putJSON(ctx context.Context, key string, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("encode %s: %w", key, err)
	}
	if _, err := s.kv.Put(ctx, key, b); err != nil {
		return fmt.Errorf("kv put %s: %w", key, err)
	}
	return nil
}

func (s *Store) getJSON(ctx context.Context, key string, v any) error {
	e, err := s.kv.Get(ctx, key)
	if err != nil {
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			return fmt.Errorf("%s: %w", key, ErrNotFound)
		}
		return fmt.Errorf("kv get %s: %w", key, err)
	}
	if err := json.Unmarshal(e.Value(), v); err != nil {
		return fmt.Errorf("decode %s: %w", key, err)
	}
	return nil
}

// Get reads a header.
func (s *Store) Get(ctx context.Context, id string) (Record, error) {
	var rec Record
	err := s.getJSON(ctx, id, &rec)
	return rec, err
}

// List returns tenant's batch records, newest first.
func (s *Store) List(ctx context.Context, tenant string) ([]Record, error) {
	lister, err := s.kv.ListKeys(ctx)
	if err != nil {
		return nil, fmt.Errorf("kv list %s: %w", Bucket, err)
	}
	defer lister.Stop()
	var out []Record
	for key := range lister.Keys() {
		// Headers are the keys without a '.': <id>.items.<k> and
		// <id>.errors.<k> are chunks.
		if strings.Contains(key, ".") {
			continue
		}
		rec, err := s.Get(ctx, key)
		if err != nil {
			if errors.Is(err, ErrNotFound) {
				continue // expired between the listing and the read
			}
			return nil, err
		}
		if rec.Tenant == tenant {
			out = append(out, rec)
		}
	}
	sort.Slice(out, func(i, j int) bool {
		if !out[i].Created.Equal(out[j].Created) {
			return out[i].Created.After(out[j].Created)
		}
		return out[i].ID > out[j].ID
	})
	return out, nil
}

// Cancel asks for every request of batch id that has no final result yet
// to be stopped (a cancel on sy.ctl.cancel.<tenant>: the router drops a
// queued one, a worker aborts a running one) and marks the record
// cancelled. It returns the record and how many cancels it sent. A batch
// already finished is returned unchanged.
func Cancel(ctx context.Context, js jetstream.JetStream, st *Store, id, tenant, reason string, now time.Time) (Record, int, error) {
	rec, err := st.Get(ctx, id)
	if err != nil {
		return rec, 0, err
	}
	if rec.Tenant != tenant {
		return rec, 0, fmt.Errorf("%s: %w", id, ErrNotFound)
	}
	items, err := st.Items(ctx, rec)
	if err != nil {
		return rec, 0, err
	}
	results, err := Collect(ctx, js, rec, items, false, nil)
	if err != nil {
		return rec, 0, err
	}
	rec = Tally(rec, results, now)
	if rec.Finished() {
		return rec, 0, st.Put(ctx, rec)
	}
	sent := 0
	for _, it := range items {
		if _, done := results[it.RequestID]; done {
			continue
		}
		c := schemas.Cancel{V: schemas.Version, RequestID: it.RequestID, Tenant: tenant, Reason: reason, At: now.UTC()}
		m := nats.NewMsg(subjects.Cancel(tenant))
		m.Data = schemas.MustMarshal(schemas.JSON, c)
		m.Header.Set(schemas.HeaderContentType, schemas.ContentJSON)
		m.Header.Set(schemas.HeaderMsgID, "cancel-"+it.RequestID)
		if _, err := js.PublishMsg(ctx, m); err != nil {
			return rec, sent, fmt.Errorf("cancel %s: %w", it.RequestID, err)
		}
		sent++
	}
	if rec.CancelledAt == nil {
		t := now.UTC()
		rec.CancelledAt = &t
	}
	return rec, sent, st.Put(ctx, rec)
}

// State is the batch's OpenAI status: in_progress, cancelling, cancelled,
// completed or expired.
func (r Record) State(now time.Time) string {
	switch {
	case r.Finished() && r.CancelledAt != nil:
		return "cancelled"
	case r.Finished():
		return "completed"
	case r.CancelledAt != nil:
		return "cancelling"
	case now.After(r.Deadline):
		return "expired"
	}
	return "in_progress"
}

// Items reads a record's items in line order.
func (s *Store) Items(ctx context.Context, rec Record) ([]Item, error) {
	out := make([]Item, 0, rec.Requests)
	for k := 0; k < rec.ItemChunks; k++ {
		var chunk []Item
		if err := s.getJSON(ctx, fmt.Sprintf("%s.items.%d", rec.ID, k), &chunk); err != nil {
			return nil, err
		}
		out = append(out, chunk...)
	}
	return out, nil
}

// LineErrors reads a record's bad lines in line order.
func (s *Store) LineErrors(ctx context.Context, rec Record) ([]LineError, error) {
	out := make([]LineError, 0, rec.Invalid)
	for k := 0; k < rec.ErrChunks; k++ {
		var chunk []LineError
		if err := s.getJSON(ctx, fmt.Sprintf("%s.errors.%d", rec.ID, k), &chunk); err != nil {
			return nil, err
		}
		out = append(out, chunk...)
	}
	return out, nil
}

// PublishWindow bounds in-flight async publishes. It sits well under the
// client's own pending limit so a submit of a huge file never trips
// JetStream's stall error and never floods the SUBMIT stream faster than
// it acks.
const PublishWindow = 256

// Submitter publishes one request on a tenant's batch lane
// (sy.batch.<tenant>) and returns the pending JetStream ack;
// services/client.Client is one. An interface, so this adapter does not
// import services/.
type Submitter interface {
	SubmitBatchAsync(tenant string, req *schemas.Request) (jetstream.PubAckFuture, error)
}

// Publish submits every item for tenant with a bounded async window and
// reports progress as acks arrive. Each request's Nats-Msg-Id is its
// deterministic id, so publishing the same batch again is deduplicated by
// the SUBMIT stream.
func Publish(ctx context.Context, c Submitter, tenant string, items []Item, progress func(acked int)) (int, error) {
	inflight := make([]jetstream.PubAckFuture, 0, PublishWindow)
	acked := 0
	wait := func(f jetstream.PubAckFuture) error {
		select {
		case <-f.Ok():
			acked++
			if progress != nil {
				progress(acked)
			}
			return nil
		case err := <-f.Err():
			return fmt.Errorf("publish %s: %w", f.Msg().Header.Get(schemas.HeaderMsgID), err)
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	for i := range items {
		if len(inflight) == PublishWindow {
			if err := wait(inflight[0]); err != nil {
				return acked, err
			}
			inflight = inflight[1:]
		}
		req := items[i].Request
		f, err := c.SubmitBatchAsync(tenant, &req)
		if err != nil {
			return acked, err
		}
		inflight = append(inflight, f)
	}
	for _, f := range inflight {
		if err := wait(f); err != nil {
			return acked, err
		}
	}
	return acked, nil
}

// clockSkew is how far before the record's creation time (the submitter's
// clock) results are searched for, since the stream stamps messages with
// the server's clock.
const clockSkew = 5 * time.Minute

// Collect reads the final results of a batch's items from the RESULTS
// stream. With follow it waits until every item has a result or ctx ends;
// without, it returns what the stream holds now. progress, when set, is
// called with the results found so far (read it, do not keep it).
func Collect(ctx context.Context, js jetstream.JetStream, rec Record, items []Item, follow bool, progress func(got map[string]schemas.Result)) (map[string]schemas.Result, error) {
	want := make(map[string]bool, len(items))
	for _, it := range items {
		want[it.RequestID] = true
	}
	got := make(map[string]schemas.Result, len(items))
	if len(items) == 0 {
		return got, nil
	}
	filter := subjects.Result(rec.Tenant, "*")
	start := rec.Created.Add(-clockSkew)
	if !follow {
		// An ordered consumer with nothing to deliver would just wait, so
		// ask the stream first whether anything for the tenant is newer
		// than the batch.
		st, err := js.Stream(ctx, subjects.StreamResults)
		if err != nil {
			return nil, fmt.Errorf("results stream: %w", err)
		}
		last, err := st.GetLastMsgForSubject(ctx, filter)
		if errors.Is(err, jetstream.ErrMsgNotFound) || (err == nil && last.Time.Before(start)) {
			return got, nil
		}
		if err != nil {
			return nil, fmt.Errorf("last result for %s: %w", rec.Tenant, err)
		}
	}
	cons, err := js.OrderedConsumer(ctx, subjects.StreamResults, jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{filter},
		DeliverPolicy:  jetstream.DeliverByStartTimePolicy,
		OptStartTime:   &start,
	})
	if err != nil {
		return nil, fmt.Errorf("results consumer: %w", err)
	}
	for len(got) < len(want) {
		if err := ctx.Err(); err != nil {
			return got, err
		}
		mb, err := cons.Fetch(512, jetstream.FetchMaxWait(time.Second))
		if err != nil {
			return got, fmt.Errorf("fetch results: %w", err)
		}
		// A fetch delivers messages as they arrive but ends only when it
		// has 512 or its second is up; the loop below leaves it as soon as
		// it has what it came for — every result, or (without follow)
		// everything stored — so a look at a small batch answers in
		// milliseconds, not a second (issue 31). The abandoned fetch
		// expires on its own.
		n, caughtUp := 0, false
		for m := range mb.Messages() {
			n++
			if md, err := m.Metadata(); err == nil && md.NumPending == 0 {
				caughtUp = true
			}
			collectOne(m, rec, want, got)
			if len(got) == len(want) || (!follow && caughtUp) {
				break
			}
		}
		if err := mb.Error(); err != nil && !errors.Is(err, jetstream.ErrNoMessages) && !errors.Is(err, context.DeadlineExceeded) {
			return got, fmt.Errorf("fetch results: %w", err)
		}
		if progress != nil {
			progress(got)
		}
		if !follow && (n == 0 || caughtUp) {
			break
		}
	}
	return got, nil
}

// collectOne keeps m in got when it is the first result of a wanted id.
func collectOne(m jetstream.Msg, rec Record, want map[string]bool, got map[string]schemas.Result) {
	_, id, err := subjects.ParseResult(m.Subject())
	if err != nil || !want[id] {
		return
	}
	if _, dup := got[id]; dup {
		return
	}
	r, err := bus.DecodeResult(m.Headers(), m.Data())
	if err != nil {
		// A result we cannot decode is still final for the request;
		// report it as failed rather than waiting forever.
		r = schemas.Result{ID: id, Tenant: rec.Tenant, Status: schemas.StatusFailed,
			Error: schemas.Errf(schemas.CodeInternal, "", "undecodable result: %v", err)}
	}
	got[id] = r
}

// Tally counts results into the record and marks it finished when every
// request has one.
func Tally(rec Record, results map[string]schemas.Result, now time.Time) Record {
	rec.Completed, rec.Failed = 0, 0
	for _, r := range results {
		if r.Status == schemas.StatusOK {
			rec.Completed++
		} else {
			rec.Failed++
		}
	}
	if rec.Finished() && rec.FinishedAt == nil {
		t := now.UTC()
		rec.FinishedAt = &t
	}
	return rec
}

// Submission is one `batch submit`.
type Submission struct {
	Tenant string
	// Source names the input (a file name), for status output only.
	Source  string
	Content []byte
	// ID overrides the content-derived batch id.
	ID      string
	Options Options
	// Progress, when set, is called with (acked, total) while publishing.
	Progress func(acked, total int)
}

// Submit parses a batch file, records it and publishes its requests. A
// batch already fully published under the same id is not published again
// (resubmitting a file is safe); a partly published one is published
// again in full, and the SUBMIT stream's dedupe drops the repeats that are
// still inside its duplicate window.
func Submit(ctx context.Context, st *Store, c Submitter, sub Submission, now time.Time) (rec Record, resumed bool, err error) {
	if !subjects.ValidToken(sub.Tenant) {
		return rec, false, fmt.Errorf("tenant %q is not a valid subject token", sub.Tenant)
	}
	id := sub.ID
	if id == "" {
		id = NewID(sub.Tenant, sub.Content)
	}
	items, bad, err := Parse(bytesReader(sub.Content), id, sub.Options)
	if err != nil {
		return rec, false, err
	}
	rec, err = st.Get(ctx, id)
	switch {
	case err == nil:
		if rec.Tenant != sub.Tenant {
			return rec, false, fmt.Errorf("batch %s belongs to tenant %s", id, rec.Tenant)
		}
		if rec.Published >= rec.Requests {
			return rec, true, nil
		}
		resumed = true
	case errors.Is(err, ErrNotFound):
		o := sub.Options.withDefaults()
		rec = Record{ID: id, Tenant: sub.Tenant, Source: sub.Source, Created: now.UTC(), Deadline: now.UTC().Add(o.Deadline)}
		if rec, err = st.Create(ctx, rec, items, bad); err != nil {
			return rec, false, err
		}
	default:
		return rec, false, err
	}
	total := len(items)
	n, err := Publish(ctx, c, sub.Tenant, items, func(acked int) {
		if sub.Progress != nil {
			sub.Progress(acked, total)
		}
	})
	rec.Published = max(rec.Published, n)
	if perr := st.Put(ctx, rec); perr != nil && err == nil {
		err = perr
	}
	return rec, resumed, err
}

// Progressed is a batch's record together with its items, the results
// found for them and the deferred requests still waiting.
type Progressed struct {
	Record  Record
	Items   []Item
	Results map[string]schemas.Result
	Waiting Waiting
}

// Update is what a waiting client is told as results arrive.
type Update struct {
	Done, Total int
	// Waiting is the deferred requests without a result yet.
	Waiting Waiting
}

// Refresh reads a batch, collects its results (waiting for all of them
// with follow) and writes the updated counts back to its record, so the
// record in sy_batches reflects the last look anyone took. It also reads
// the admitter's defer events for the batch, so what waits, until when
// and why is reported with the counts.
func Refresh(ctx context.Context, js jetstream.JetStream, st *Store, id string, follow bool, progress func(Update)) (Progressed, error) {
	rec, err := st.Get(ctx, id)
	if err != nil {
		return Progressed{}, err
	}
	items, err := st.Items(ctx, rec)
	if err != nil {
		return Progressed{}, err
	}
	wctx, stopWatch := context.WithCancel(ctx)
	defer stopWatch()
	defs, werr := WatchDeferrals(wctx, js, rec, items)
	if werr != nil {
		return Progressed{}, werr
	}
	if !follow {
		// A one-off look reports every deferral stored so far.
		select {
		case <-defs.CaughtUp():
		case <-ctx.Done():
		}
	}
	results, cerr := Collect(ctx, js, rec, items, follow, func(got map[string]schemas.Result) {
		if progress != nil {
			progress(Update{Done: len(got), Total: len(items), Waiting: defs.Pending(Has(got))})
		}
	})
	if results == nil {
		return Progressed{}, cerr
	}
	// Counts are written back even when ctx ended mid-wait: what was seen
	// is still true.
	rec = Tally(rec, results, time.Now())
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if err := st.Put(wctx, rec); err != nil && cerr == nil {
		cerr = err
	}
	return Progressed{Record: rec, Items: items, Results: results, Waiting: defs.Pending(Has(results))}, cerr
}
