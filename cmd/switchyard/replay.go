package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/switchyard-ai/switchyard/internal/adapter/bus"
	"github.com/switchyard-ai/switchyard/internal/adapter/config"
	"github.com/switchyard-ai/switchyard/internal/core/catalog"
	"github.com/switchyard-ai/switchyard/internal/core/perf"
	"github.com/switchyard-ai/switchyard/internal/core/placement"
	"github.com/switchyard-ai/switchyard/internal/core/replay"
	"github.com/switchyard-ai/switchyard/internal/core/routing"
	"github.com/switchyard-ai/switchyard/schemas"
	"github.com/switchyard-ai/switchyard/services/svc"
	"github.com/switchyard-ai/switchyard/subjects"
)

// runReplay reads a window of recorded streams and runs it back through
// the routing core.
func runReplay(ctx context.Context, args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("replay", flag.ContinueOnError)
	src := recordedFlags(fs)
	since := fs.String("since", "", "window start: RFC 3339 time, or a duration ago like 15m (default: everything)")
	until := fs.String("until", "", "window end: RFC 3339 time or a duration ago (default: now)")
	policy := fs.String("policy", "", "policy to replay with (default: the recorded one); another name answers what-if")
	catPath := fs.String("catalog", "", "catalog JSON merged over the built-in one (use the recorded system's)")
	jsonOut := fs.Bool("json", false, "end with one JSON line")
	htmlOut := fs.String("html", "", "write a self-contained HTML report here")
	if err := fs.Parse(args); err != nil {
		return err
	}
	now := time.Now()
	win := replay.Window{}
	var err error
	if win.Since, err = parseWhen(*since, now); err != nil {
		return fmt.Errorf("--since: %w", err)
	}
	if win.Until, err = parseWhen(*until, now); err != nil {
		return fmt.Errorf("--until: %w", err)
	}
	js, closeStreams, err := src.open(ctx, "replay")
	if err != nil {
		return err
	}
	defer closeStreams()
	cat, err := config.LoadCatalog(*catPath)
	if err != nil {
		return err
	}
	rep, err := replayStreams(ctx, js, cat, win, *policy)
	if err != nil {
		return err
	}
	printReplay(stdout, rep)
	if *htmlOut != "" {
		if err := writeReplayHTML(*htmlOut, rep); err != nil {
			return err
		}
		fmt.Fprintf(stdout, "report: %s\n", *htmlOut)
	}
	if *jsonOut {
		b, err := json.Marshal(rep)
		if err != nil {
			return err
		}
		fmt.Fprintln(stdout, string(b))
	}
	return nil
}

// replayStreams reads the journals, events and results and builds the
// report. Each router instance's journal is replayed from its start
// through its own fresh core, as that instance ran it.
func replayStreams(ctx context.Context, js jetstream.JetStream, cat *catalog.Catalog, win replay.Window, policy string) (replay.Report, error) {
	entries := map[string][]routing.JournalEntry{}
	var badJournal error
	err := readStream(ctx, js, subjects.StreamJournal, subjects.JournalAll, time.Time{}, 0, func(m jetstream.Msg) {
		batch, err := routing.DecodeJournal(m.Data())
		if err != nil && badJournal == nil {
			badJournal = fmt.Errorf("journal %s: %w", m.Subject(), err)
		}
		entries[m.Subject()] = append(entries[m.Subject()], batch...)
	})
	if err == nil {
		err = badJournal
	}
	if err != nil {
		return replay.Report{}, err
	}
	if len(entries) == 0 {
		return replay.Report{}, errors.New("no router journal in the JOURNAL stream: nothing to replay")
	}
	admitted, err := readAdmitted(ctx, js, entries)
	if err != nil {
		return replay.Report{}, err
	}
	journals := map[string][]routing.Input{}
	unresolved := 0
	for n, e := range entries {
		in, u := replay.Resolve(e, admitted)
		journals[n] = in
		unresolved += u
	}
	var events []schemas.Event
	recordedPolicy := ""
	err = readStream(ctx, js, subjects.StreamEvents, subjects.EventAll, win.Since.Add(-time.Minute), 0, func(m jetstream.Msg) {
		batch, _ := svc.DecodeEvents(m.Headers(), m.Data())
		for _, ev := range batch {
			if ev.Kind == "placed" && recordedPolicy == "" {
				recordedPolicy = ev.Reason
			}
			events = append(events, ev)
		}
	})
	if err != nil {
		return replay.Report{}, err
	}
	var results []schemas.Result
	err = readStream(ctx, js, subjects.StreamResults, subjects.ResultAll, win.Since.Add(-time.Minute), 0, func(m jetstream.Msg) {
		var r schemas.Result
		if svc.Decode(m.Headers(), m.Data(), &r) == nil {
			results = append(results, r)
		}
	})
	if err != nil {
		return replay.Report{}, err
	}
	if recordedPolicy == "" {
		recordedPolicy = "switchyard"
	}
	if policy == "" {
		policy = recordedPolicy
	}
	var journalStart time.Time
	for _, j := range journals {
		if len(j) > 0 && (journalStart.IsZero() || j[0].At.Before(journalStart)) {
			journalStart = j[0].At
		}
	}
	// A what-if is judged against the recorded policy replayed over the
	// same inputs, both sides' outcomes predicted by the same cost model
	// (replay.WhatIfBasis).
	whatIf := policy != recordedPolicy
	decisions, err := replayJournals(journals, cat, policy, whatIf)
	if err != nil {
		return replay.Report{}, err
	}
	baseline := decisions
	if whatIf {
		if baseline, err = replayJournals(journals, cat, recordedPolicy, true); err != nil {
			return replay.Report{}, fmt.Errorf("recorded policy %q: %w", recordedPolicy, err)
		}
	}
	rep := replay.Compare(win, policy, recordedPolicy, decisions, events, results, time.Second)
	rep.JournalStart = journalStart
	rep.Unresolved = unresolved
	replay.Enrich(&rep, win, baseline, decisions, results)
	return rep, nil
}

// replayJournals runs each router instance's journal through its own fresh
// core under policy, instances in name order; evaluated predicts every
// placement's outcome with the Switchyard placer (replay.RunEvaluated).
func replayJournals(journals map[string][]routing.Input, base *catalog.Catalog, policy string, evaluated bool) ([]replay.Decision, error) {
	names := make([]string, 0, len(journals))
	for n := range journals {
		names = append(names, n)
	}
	sort.Strings(names)
	var decisions []replay.Decision
	for _, n := range names {
		// Each core learns the models its journal's heartbeats describe
		// from the configured catalog up, as the live router's did.
		cat := base.Learning()
		cost := perf.NewPredictor(cat)
		pol, err := routing.PolicyNamed(policy, cat, cost)
		if err != nil {
			return nil, err
		}
		core := routing.New(routing.Config{Policy: pol, Cost: cost, Catalog: cat})
		if !evaluated {
			decisions = append(decisions, replay.Run(core, journals[n])...)
			continue
		}
		eval, err := routing.PolicyNamed("switchyard-no-"+placement.AxisLatency, cat, cost)
		if err != nil {
			return nil, err
		}
		decisions = append(decisions, replay.RunEvaluated(core, journals[n], eval)...)
	}
	return decisions, nil
}

// readAdmitted reads, from the ADMITTED stream, the requests the journals
// refer to by sequence: one pass from the lowest referenced sequence.
func readAdmitted(ctx context.Context, js jetstream.JetStream, journals map[string][]routing.JournalEntry) (map[uint64]*schemas.Admitted, error) {
	want := map[uint64]bool{}
	first := uint64(0)
	for _, j := range journals {
		for _, seq := range replay.Refs(j) {
			want[seq] = true
			if first == 0 || seq < first {
				first = seq
			}
		}
	}
	out := make(map[uint64]*schemas.Admitted, len(want))
	if len(want) == 0 {
		return out, nil
	}
	err := readStream(ctx, js, subjects.StreamAdmitted, subjects.AdmittedAll, time.Time{}, first, func(m jetstream.Msg) {
		md, err := m.Metadata()
		if err != nil || !want[md.Sequence.Stream] {
			return
		}
		var adm schemas.Admitted
		// Decoded as the router decoded it, so the replayed core sees the
		// very request the live one did.
		if svc.Decode(m.Headers(), m.Data(), &adm) == nil {
			out[md.Sequence.Stream] = &adm
		}
	})
	return out, err
}

// readStream delivers every message on filter from startSeq, else from
// start, else from the beginning, until the stream has no more, through an
// ordered consumer.
func readStream(ctx context.Context, js jetstream.JetStream, stream, filter string, start time.Time, startSeq uint64, fn func(jetstream.Msg)) error {
	cfg := jetstream.OrderedConsumerConfig{FilterSubjects: []string{filter}, DeliverPolicy: jetstream.DeliverAllPolicy}
	switch {
	case startSeq != 0:
		cfg.DeliverPolicy = jetstream.DeliverByStartSequencePolicy
		cfg.OptStartSeq = startSeq
	case !start.IsZero():
		cfg.DeliverPolicy = jetstream.DeliverByStartTimePolicy
		cfg.OptStartTime = &start
	}
	cons, err := js.OrderedConsumer(ctx, stream, cfg)
	if err != nil {
		return fmt.Errorf("read %s: %w", stream, err)
	}
	info, err := cons.Info(ctx)
	if err != nil {
		return fmt.Errorf("read %s: %w", stream, err)
	}
	left := info.NumPending
	for left > 0 {
		batch, err := cons.Fetch(int(min(left, 1000)), jetstream.FetchMaxWait(2*time.Second))
		if err != nil {
			return fmt.Errorf("read %s: %w", stream, err)
		}
		n := 0
		for m := range batch.Messages() {
			fn(m)
			n++
		}
		if batch.Error() != nil && !errors.Is(batch.Error(), nats.ErrTimeout) {
			return fmt.Errorf("read %s: %w", stream, batch.Error())
		}
		if n == 0 {
			break
		}
		left -= uint64(n)
	}
	return nil
}

func parseWhen(s string, now time.Time) (time.Time, error) {
	if s == "" {
		return time.Time{}, nil
	}
	if d, err := time.ParseDuration(s); err == nil {
		return now.Add(-d), nil
	}
	return time.Parse(time.RFC3339, s)
}

func printReplay(w io.Writer, r replay.Report) {
	fmt.Fprintf(w, "replay: policy %s (recorded %s), journal from %s\n", r.Policy, r.RecordedPolicy, r.JournalStart.Format(time.RFC3339))
	fmt.Fprintf(w, "  requests %d  decisions %d  divergent %d  sheds %d  breaker trips %d\n", r.Requests, r.Decisions, r.Divergent, r.Sheds, r.BreakerTrips)
	if r.Unresolved > 0 {
		fmt.Fprintf(w, "  %d journaled admissions could not be replayed: the ADMITTED stream no longer holds them\n", r.Unresolved)
	}
	for _, d := range r.Divergences {
		fmt.Fprintf(w, "  divergence %s: recorded %s  replayed %s\n", d.ID, describe(d.Recorded), describe(d.Replayed))
	}
	tenants := make([]string, 0, len(r.Tenants))
	for t := range r.Tenants {
		tenants = append(tenants, t)
	}
	sort.Strings(tenants)
	for _, t := range tenants {
		s := r.Tenants[t]
		fmt.Fprintf(w, "  tenant %-10s requests %4d  ok %4d  SLO attainment %.3f\n", t, s.Requests, s.OK, s.SLOAttainment)
	}
	for _, s := range r.Series {
		fmt.Fprintf(w, "  %-10s %-11s requests %4d  SLO attainment %.3f\n", s.Tenant, s.Class, s.Requests, s.SLOAttainment)
	}
	for _, s := range r.Slowest {
		fmt.Fprintf(w, "  slowest %s (%s/%s on %s): %.0f ms = queue %.0f + to first token %.0f + decode %.0f\n",
			s.ID, s.Tenant, s.Class, s.Worker, s.TotalMs, s.QueueMs, s.PrefillMs, s.DecodeMs)
	}
	if c := r.Calibration; c != nil {
		fmt.Fprintf(w, "  calibration: %d ok requests, predicted completion %.3f s, measured %.3f s, mean abs error %.3f s\n",
			c.Compared, c.MeanPredictedS, c.MeanMeasuredS, c.MeanAbsErrorS)
	}
	if wi := r.WhatIf; wi != nil {
		fmt.Fprintf(w, "  what-if %s vs recorded %s over %d requests: moved %d; predicted to meet the deadline %d -> %d (met->missed %d, missed->met %d); failed %d -> %d; mean predicted completion %.3f s -> %.3f s; GPU $%.5f -> $%.5f\n",
			wi.Replayed.Policy, wi.Recorded.Policy, wi.Compared, wi.Moved, wi.Recorded.PredictedSLOMet, wi.Replayed.PredictedSLOMet,
			wi.MetToMissed, wi.MissedToMet, wi.Recorded.Failed, wi.Replayed.Failed, wi.Recorded.MeanCompletionS, wi.Replayed.MeanCompletionS,
			wi.Recorded.GPUUSD, wi.Replayed.GPUUSD)
	}
	fmt.Fprintf(w, "  placements by worker: recorded %v  replayed %v\n", r.RecordedByWorker, r.ReplayedByWorker)
}

func describe(d *replay.Decision) string {
	if d == nil {
		return "(none)"
	}
	if d.Kind == "placed" {
		return "placed on " + d.Worker
	}
	return "failed " + d.Code
}

func writeReplayHTML(path string, r replay.Report) error {
	var sb strings.Builder
	if err := replay.WriteHTML(&sb, r); err != nil {
		return err
	}
	return os.WriteFile(path, []byte(sb.String()), 0o644)
}

// recorded names the streams a reading command works on: a JetStream
// store directory (started in-process), or a running system.
type recorded struct{ natsURL, store *string }

// recordedFlags registers --nats and --store on fs.
func recordedFlags(fs *flag.FlagSet) recorded {
	return recorded{
		natsURL: fs.String("nats", "", "read the streams of a running system (default "+bus.DefaultURL+" unless --store)"),
		store:   fs.String("store", "", "read the streams from a JetStream store directory (e.g. from `demo --store DIR`)"),
	}
}

// open connects to the recorded streams and returns their JetStream;
// close ends the connection and the in-process server, if one was started.
func (r recorded) open(ctx context.Context, name string) (js jetstream.JetStream, close func(), err error) {
	nc, close, err := r.connect(ctx, name)
	if err != nil {
		return nil, nil, err
	}
	if js, err = bus.JetStream(nc); err != nil {
		close()
		return nil, nil, err
	}
	return js, close, nil
}

// connect is open's connection: to the in-process server over --store, or
// to --nats.
func (r recorded) connect(ctx context.Context, name string) (nc *nats.Conn, close func(), err error) {
	if store := *r.store; store != "" {
		if _, err := os.Stat(store); err != nil {
			return nil, nil, fmt.Errorf("--store: %w", err)
		}
		srv, err := bus.StartServer(bus.ServerConfig{StoreDir: store})
		if err != nil {
			return nil, nil, err
		}
		if nc, err = srv.Connect(name); err != nil {
			srv.Shutdown()
			return nil, nil, err
		}
		return nc, func() { nc.Close(); srv.Shutdown() }, nil
	}
	url := *r.natsURL
	if url == "" {
		url = bus.DefaultURL
	}
	if nc, err = bus.Dial(ctx, url, name, 5*time.Second); err != nil {
		return nil, nil, err
	}
	return nc, nc.Close, nil
}
