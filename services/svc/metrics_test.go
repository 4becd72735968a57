package svc_test

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/VictoriaMetrics/metrics"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/switchyard-ai/switchyard/internal/testkit/bustest"
	"github.com/switchyard-ai/switchyard/internal/testkit/waitfor"
	"github.com/switchyard-ai/switchyard/services/svc"
	"github.com/switchyard-ai/switchyard/subjects"
)

// samples parses Prometheus text into series -> value lines, failing on a
// series that appears twice (what Prometheus would silently drop).
func samples(t *testing.T, text string) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, line := range strings.Split(text, "\n") {
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		key, val := line[:i], line[i+1:]
		if _, dup := out[key]; dup {
			t.Errorf("series %s appears more than once", key)
		}
		out[key] = val
	}
	return out
}

func TestRegistryMergesIdenticalSeries(t *testing.T) {
	workers := []*metrics.Set{metrics.NewSet(), metrics.NewSet(), metrics.NewSet()}
	var reg svc.Registry
	for i, s := range workers {
		s.GetOrCreateCounter(`switchyard_results_total{service="worker",status="ok",class="standard"}`).Add(10 * (i + 1))
		s.GetOrCreateFloatCounter(`switchyard_cost_usd_total{class="standard"}`).Add(0.25)
		s.NewGauge(fmt.Sprintf(`switchyard_worker_simulated{worker="w%d"}`, i), nil).Set(1)
		s.GetOrCreatePrometheusHistogramExt(`switchyard_router_queue_seconds`, []float64{0.1, 1}).Update(0.5)
		reg.Add(s)
	}
	var buf bytes.Buffer
	reg.WritePrometheusContext(context.Background(), &buf)
	got := samples(t, buf.String())
	for key, want := range map[string]string{
		`switchyard_results_total{service="worker",status="ok",class="standard"}`: "60",
		`switchyard_cost_usd_total{class="standard"}`:                             "0.75",
		`switchyard_worker_simulated{worker="w0"}`:                                "1",
		`switchyard_worker_simulated{worker="w2"}`:                                "1",
		`switchyard_router_queue_seconds_bucket{le="1"}`:                          "3",
		`switchyard_router_queue_seconds_bucket{le="0.1"}`:                        "0",
		`switchyard_router_queue_seconds_count`:                                   "3",
		`switchyard_router_queue_seconds_sum`:                                     "1.5",
	} {
		if got[key] != want {
			t.Errorf("%s = %q, want %q", key, got[key], want)
		}
	}
	if _, ok := got["go_goroutines"]; !ok {
		t.Error("process metrics missing")
	}
	// Each family's lines form one group, though every set wrote them
	// apart.
	var families []string
	for _, line := range strings.Split(buf.String(), "\n") {
		if line == "" || strings.HasPrefix(line, "#") || strings.HasPrefix(line, "go_") || strings.HasPrefix(line, "process_") {
			continue
		}
		name := line[:strings.IndexAny(line, "{ ")]
		for _, suf := range []string{"_bucket", "_sum", "_count"} {
			name = strings.TrimSuffix(name, suf)
		}
		if n := len(families); n == 0 || families[n-1] != name {
			if slices.Contains(families, name) {
				t.Errorf("family %s is split:\n%s", name, buf.String())
			}
			families = append(families, name)
		}
	}
}

func TestJetStreamCollectorExportsConsumerPending(t *testing.T) {
	env := bustest.StartProvisioned(t, subjects.StreamOptions{})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := env.JS.CreateOrUpdateConsumer(ctx, subjects.StreamAdmitted, jetstream.ConsumerConfig{
		Durable: "router-standard", FilterSubject: "sy.admitted.standard.>", AckPolicy: jetstream.AckExplicitPolicy}); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 3; i++ {
		if _, err := env.JS.Publish(ctx, fmt.Sprintf("sy.admitted.standard.b0.acme%d", i), []byte("x")); err != nil {
			t.Fatal(err)
		}
	}
	var reg svc.Registry
	reg.AddCollector(svc.JetStreamCollector(env.JS, subjects.StreamAdmitted, "NO_SUCH_STREAM"))
	key := `jetstream_consumer_num_pending{stream_name="ADMITTED",consumer_name="router-standard"}`
	var buf bytes.Buffer
	var got map[string]string
	// The server counts a consumer's pending messages a moment after the
	// publish is acknowledged: scrape until it has (a failed run read 0
	// with the stream already holding 3).
	waitfor.True(t, "the consumer's pending count", 5*time.Second, func() bool {
		buf.Reset()
		reg.WritePrometheusContext(context.Background(), &buf)
		got = samples(t, buf.String())
		return got[key] == "3"
	})
	if got[key] != "3" {
		t.Errorf("%s = %q, want 3\n%s", key, got[key], buf.String())
	}
	if got[`jetstream_stream_total_messages{stream_name="ADMITTED"}`] != "3" {
		t.Errorf("stream messages = %q, want 3", got[`jetstream_stream_total_messages{stream_name="ADMITTED"}`])
	}
}
