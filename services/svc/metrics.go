package svc

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/VictoriaMetrics/metrics"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Registry collects the metric sets of the services running in one process
// so that one /metrics endpoint serves them all, plus collectors that
// write series computed at scrape time (JetStreamCollector).
type Registry struct {
	mu         sync.Mutex
	sets       []*metrics.Set
	collectors []func(ctx context.Context, w io.Writer)
	health     []func() error
}

// AddHealth registers a check /healthz runs on every probe: any error
// makes it answer 503 with the error's text, so a load balancer or a
// Kubernetes probe sees a service that has lost what it needs (its NATS
// connection) rather than a process that merely runs.
func (r *Registry) AddHealth(check func() error) {
	r.mu.Lock()
	r.health = append(r.health, check)
	r.mu.Unlock()
}

// Healthy runs every health check and returns the first failure.
func (r *Registry) Healthy() error {
	r.mu.Lock()
	checks := append([]func() error(nil), r.health...)
	r.mu.Unlock()
	for _, c := range checks {
		if err := c(); err != nil {
			return err
		}
	}
	return nil
}

// ConnHealth is the health check of a service's NATS connection: healthy
// only while it is connected (not reconnecting, draining or closed).
func ConnHealth(nc *nats.Conn) func() error {
	return func() error {
		if st := nc.Status(); st != nats.CONNECTED {
			return fmt.Errorf("nats: not connected (%s)", st)
		}
		return nil
	}
}

// Add registers a set.
func (r *Registry) Add(s *metrics.Set) {
	r.mu.Lock()
	r.sets = append(r.sets, s)
	r.mu.Unlock()
}

// AddCollector registers a function that writes Prometheus text lines on
// every scrape. Its series are merged with the sets' like any other.
func (r *Registry) AddCollector(c func(ctx context.Context, w io.Writer)) {
	r.mu.Lock()
	r.collectors = append(r.collectors, c)
	r.mu.Unlock()
}

// WritePrometheusContext writes every set and collector in the Prometheus
// text format, plus the Go process metrics, bounded by ctx (the scrape's
// request context), which collectors that ask the server use.
//
// Several services in one process (`switchyard up`: the admitter, the
// router and N workers) each count into their own set, and the same
// series — switchyard_results_total{service="worker",status="ok",...}
// from three workers, switchyard_slo_total from the admitter and the
// router — would otherwise appear once per set. Prometheus keeps only one
// sample of a duplicated series per scrape, so it would read one worker's
// count as the whole process's. Identical series are therefore merged by
// summing: exact for counters and histogram buckets (the process total,
// which is what sum() over separate processes gives), and the gauges the
// services export name their worker or instance in a label, so no two of
// them collide.
func (r *Registry) WritePrometheusContext(ctx context.Context, w io.Writer) {
	r.mu.Lock()
	sets := append([]*metrics.Set(nil), r.sets...)
	collectors := append([]func(context.Context, io.Writer){}, r.collectors...)
	r.mu.Unlock()
	var raw bytes.Buffer
	for _, s := range sets {
		s.WritePrometheus(&raw)
	}
	for _, c := range collectors {
		c(ctx, &raw)
	}
	mergeSeries(w, raw.Bytes())
	metrics.WriteProcessMetrics(w)
}

// series is one merged sample.
type series struct {
	key   string // name{labels}
	ints  bool   // every value so far was an unsigned integer
	u     uint64
	f     float64
	extra []string // comment lines (# HELP, # TYPE) seen before the first sample
}

// mergeSeries writes the samples of text with identical name{labels}
// summed, in the order each first appeared. Comment lines are kept once.
func mergeSeries(w io.Writer, text []byte) {
	var (
		order    []*series
		byKey    = map[string]*series{}
		comments = map[string]bool{}
		pending  []string
	)
	sc := bufio.NewScanner(bytes.NewReader(text))
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" {
			continue
		}
		if strings.HasPrefix(line, "#") {
			if !comments[line] {
				comments[line] = true
				pending = append(pending, line)
			}
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		if i <= 0 {
			continue
		}
		key, val := line[:i], line[i+1:]
		s, seen := byKey[key]
		if !seen {
			s = &series{key: key, ints: true, extra: pending}
			pending = nil
			byKey[key] = s
			order = append(order, s)
		}
		if u, err := strconv.ParseUint(val, 10, 64); err == nil && s.ints {
			s.u += u
			continue
		}
		f, err := strconv.ParseFloat(val, 64)
		if err != nil {
			continue
		}
		if s.ints {
			s.ints, s.f = false, float64(s.u)
		}
		s.f += f
	}
	// Samples of one metric family (a histogram's _bucket, _sum and _count
	// included) are written together, in the order families first
	// appeared: the text format wants a family's lines in one group, and
	// the sets interleave them.
	famOrder := map[string]int{}
	for _, s := range order {
		if _, ok := famOrder[family(s.key)]; !ok {
			famOrder[family(s.key)] = len(famOrder)
		}
	}
	sort.SliceStable(order, func(i, j int) bool { return famOrder[family(order[i].key)] < famOrder[family(order[j].key)] })
	bw := bufio.NewWriter(w)
	for _, s := range order {
		for _, c := range s.extra {
			bw.WriteString(c)
			bw.WriteByte('\n')
		}
		bw.WriteString(s.key)
		bw.WriteByte(' ')
		if s.ints {
			bw.WriteString(strconv.FormatUint(s.u, 10))
		} else {
			bw.WriteString(formatFloat(s.f))
		}
		bw.WriteByte('\n')
	}
	for _, c := range pending {
		bw.WriteString(c)
		bw.WriteByte('\n')
	}
	bw.Flush()
}

// family is the metric family of a series key: its name without labels
// and without a histogram's _bucket, _sum or _count suffix.
func family(key string) string {
	name := key
	if i := strings.IndexByte(key, '{'); i >= 0 {
		name = key[:i]
	}
	for _, suf := range []string{"_bucket", "_sum", "_count"} {
		if base, ok := strings.CutSuffix(name, suf); ok {
			return base
		}
	}
	return name
}

func formatFloat(f float64) string {
	switch {
	case math.IsInf(f, 1):
		return "+Inf"
	case math.IsInf(f, -1):
		return "-Inf"
	case math.IsNaN(f):
		return "NaN"
	}
	return strconv.FormatFloat(f, 'g', -1, 64)
}

// JetStreamCollector exports, at scrape time, every durable consumer's
// backlog under the names prometheus-nats-exporter gives them
// (jetstream_consumer_num_pending, jetstream_consumer_num_ack_pending,
// jetstream_consumer_num_redelivered, labelled stream_name and
// consumer_name), plus jetstream_stream_total_messages per stream (the
// exporter's name too). A process
// that runs its own NATS server (`switchyard up`) thus has a source for
// the dashboard's consumer-lag panel and KEDA's signal without running
// the exporter beside it. Ephemeral consumers (ordered readers, the
// gateway's lookups) come and go and are left out.
func JetStreamCollector(js jetstream.JetStream, streams ...string) func(ctx context.Context, w io.Writer) {
	return func(ctx context.Context, w io.Writer) {
		ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		for _, name := range streams {
			st, err := js.Stream(ctx, name)
			if err != nil {
				continue
			}
			if info := st.CachedInfo(); info != nil {
				fmt.Fprintf(w, "jetstream_stream_total_messages{stream_name=%q} %d\n", name, info.State.Msgs)
			}
			lister := st.ListConsumers(ctx)
			for ci := range lister.Info() {
				if ci.Config.Durable == "" {
					continue
				}
				fmt.Fprintf(w, "jetstream_consumer_num_pending{stream_name=%q,consumer_name=%q} %d\n", name, ci.Name, ci.NumPending)
				fmt.Fprintf(w, "jetstream_consumer_num_ack_pending{stream_name=%q,consumer_name=%q} %d\n", name, ci.Name, ci.NumAckPending)
				fmt.Fprintf(w, "jetstream_consumer_num_redelivered{stream_name=%q,consumer_name=%q} %d\n", name, ci.Name, ci.NumRedelivered)
			}
		}
	}
}

// Serve serves /metrics and /healthz on addr until ctx ends. It returns the
// bound address (useful with ":0").
func (r *Registry) Serve(ctx context.Context, addr string) (string, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return "", fmt.Errorf("metrics listen %s: %w", addr, err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/metrics", func(w http.ResponseWriter, req *http.Request) {
		w.Header().Set("Content-Type", "text/plain; version=0.0.4")
		r.WritePrometheusContext(req.Context(), w)
	})
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		if err := r.Healthy(); err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		io.WriteString(w, "ok\n")
	})
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() {
		<-ctx.Done()
		shutdownCtx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		srv.Shutdown(shutdownCtx)
	}()
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			slog.Error("metrics server stopped", "addr", ln.Addr().String(), "err", err)
		}
	}()
	return ln.Addr().String(), nil
}

// StartAtZero creates counters that are otherwise created by their first
// event (a retry, a breaker opening), so that they are exported at 0 from
// the start: a dashboard's rate() over a series that does not exist yet
// shows "No data", which reads as broken rather than as "none".
func StartAtZero(s *metrics.Set, names ...string) {
	for _, n := range names {
		s.GetOrCreateCounter(n)
	}
}
