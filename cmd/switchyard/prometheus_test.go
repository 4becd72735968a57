package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/switchyard-ai/switchyard/internal/testkit/waitfor"
	"github.com/switchyard-ai/switchyard/loadgen/tally"
)

// dashboardQueries reads every PromQL expression of the Grafana dashboard.
func dashboardQueries(t *testing.T) []string {
	t.Helper()
	raw, err := os.ReadFile("../../deploy/grafana/switchyard-dashboard.json")
	if err != nil {
		t.Fatal(err)
	}
	var d struct {
		Panels []struct {
			Title   string `json:"title"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	if err := json.Unmarshal(raw, &d); err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, p := range d.Panels {
		for _, tg := range p.Targets {
			if tg.Expr != "" {
				out = append(out, tg.Expr)
			}
		}
	}
	if len(out) == 0 {
		t.Fatal("the dashboard has no queries")
	}
	return out
}

// promQuery runs an instant query and returns its samples' values.
func promQuery(t *testing.T, base, q string) ([]float64, error) {
	t.Helper()
	resp, err := http.Get(base + "/api/v1/query?query=" + url.QueryEscape(q))
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	var body struct {
		Status string `json:"status"`
		Error  string `json:"error"`
		Data   struct {
			ResultType string `json:"resultType"`
			Result     []struct {
				Value [2]any `json:"value"`
			} `json:"result"`
		} `json:"data"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
		return nil, err
	}
	if body.Status != "success" {
		return nil, fmt.Errorf("query %s: %s", q, body.Error)
	}
	var vals []float64
	for _, r := range body.Data.Result {
		s, _ := r.Value[1].(string)
		v, err := strconv.ParseFloat(s, 64)
		if err != nil {
			return nil, fmt.Errorf("query %s: value %v", q, r.Value[1])
		}
		vals = append(vals, v)
	}
	return vals, nil
}

// TestPrometheusScrapesUpAndGateway runs a real Prometheus (Debian's
// package, installed by .ci/install-prometheus.sh) against `switchyard up`
// and a gateway while loadgen and HTTP clients put load on them, then
// checks that every query of the Grafana dashboard returns data and that
// the counters Prometheus stored equal what the clients counted.
func TestPrometheusScrapesUpAndGateway(t *testing.T) {
	if testing.Short() {
		t.Skip("runs up, a gateway and Prometheus")
	}
	promBin, err := exec.LookPath("prometheus")
	if err != nil {
		if os.Getenv("SWITCHYARD_REQUIRE_TOOLS") == "1" {
			t.Fatal("prometheus not on PATH (bash .ci/install-prometheus.sh installs Debian's package)")
		}
		t.Skip("prometheus not installed (bash .ci/install-prometheus.sh)")
	}
	r := startUpAndGateway(t, "--workers", "2", "--tenants", "demo_tenants.json",
		"--autoscale", "--autoscale-min", "2", "--autoscale-max", "2")

	dir := t.TempDir()
	promAddr := freeAddr(t)
	// deploy/prometheus/up.yml, the config the docs give for up and a
	// gateway, on this test's ports and scraped every second.
	tmpl, err := os.ReadFile("../../deploy/prometheus/up.yml")
	if err != nil {
		t.Fatal(err)
	}
	conf := strings.NewReplacer(`"127.0.0.1:9100"`, strconv.Quote(r.upMetrics), `"127.0.0.1:9200"`, strconv.Quote(r.gatewayMetrics),
		"scrape_interval: 5s", "scrape_interval: 1s", "evaluation_interval: 15s", "evaluation_interval: 1s").Replace(string(tmpl))
	if !strings.Contains(conf, r.upMetrics) || !strings.Contains(conf, r.gatewayMetrics) {
		t.Fatalf("deploy/prometheus/up.yml no longer names 127.0.0.1:9100 and 127.0.0.1:9200:\n%s", tmpl)
	}
	if err := os.WriteFile(filepath.Join(dir, "prometheus.yml"), []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	var promLog bytes.Buffer
	prom := exec.CommandContext(ctx, promBin, "--config.file="+filepath.Join(dir, "prometheus.yml"),
		"--storage.tsdb.path="+filepath.Join(dir, "data"), "--web.listen-address="+promAddr)
	prom.Stdout, prom.Stderr = &promLog, &promLog
	if err := prom.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		prom.Process.Kill()
		prom.Wait()
		if t.Failed() {
			t.Logf("prometheus log:\n%s", promLog.String())
		}
	}()
	base := "http://" + promAddr
	waitfor.True(t, "Prometheus to be ready", 30*time.Second, func() bool {
		resp, err := http.Get(base + "/-/ready")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == 200
	})

	// Load: loadgen over NATS (with its cache-hitting, class-mixed demo
	// tenants) and, at once, chat completions through the gateway.
	var wg sync.WaitGroup
	var lgOut syncBuffer
	var lgErr error
	wg.Add(1)
	go func() {
		defer wg.Done()
		lgErr = runLoadgen(ctx, []string{"--nats", r.natsURL, "--rate", "25", "--duration", "6s", "--json", "--drain", "20s"}, &lgOut)
	}()
	var gwMu sync.Mutex
	gwStatus := map[int]int{}
	for c := 0; c < 4; c++ {
		wg.Add(1)
		go func(c int) {
			defer wg.Done()
			for i := 0; i < 10; i++ {
				stream := i%2 == 0
				body := fmt.Sprintf(`{"model":"llama-3.1-8b","messages":[{"role":"user","content":"client %d asks %d"}],"max_tokens":8,"stream":%t}`, c, i, stream)
				req, _ := http.NewRequestWithContext(ctx, http.MethodPost, r.gatewayURL+"/v1/chat/completions", strings.NewReader(body))
				req.Header.Set("Authorization", "Bearer sk-test-acme")
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					t.Error(err)
					return
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				gwMu.Lock()
				gwStatus[resp.StatusCode]++
				gwMu.Unlock()
				time.Sleep(100 * time.Millisecond)
			}
		}(c)
	}
	wg.Wait()
	if lgErr != nil {
		t.Fatalf("loadgen: %v", lgErr)
	}
	lines := strings.Split(strings.TrimSpace(lgOut.String()), "\n")
	var sum tally.Summary
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &sum); err != nil {
		t.Fatalf("loadgen summary: %v\n%s", err, lgOut.String())
	}
	gwTotal := 0
	for _, n := range gwStatus {
		gwTotal += n
	}
	t.Logf("loadgen %+v; gateway statuses %v", sum, gwStatus)
	if sum.Lost != 0 || sum.Completed == 0 {
		t.Fatalf("loadgen lost %d, completed %d", sum.Lost, sum.Completed)
	}

	// Every final result was counted once: loadgen's and the gateway's
	// requests are all the system served. Wait for the scrapes that follow
	// the last result.
	wantTotal := float64(sum.Submitted + gwTotal)
	wantOK := float64(sum.Completed + gwStatus[200])
	var total, ok []float64
	waitfor.True(t, "Prometheus to count every result", 20*time.Second, func() bool {
		total, _ = promQuery(t, base, `sum(switchyard_results_total)`)
		ok, _ = promQuery(t, base, `sum(switchyard_results_total{status="ok"})`)
		return len(total) == 1 && total[0] == wantTotal && len(ok) == 1 && ok[0] == wantOK
	})
	for q, want := range map[string]float64{
		`sum(switchyard_gateway_requests_total)`:                               float64(gwTotal),
		`sum(switchyard_gateway_requests_total{status_code="200"})`:            float64(gwStatus[200]),
		`sum(switchyard_gateway_e2e_request_latency_seconds_count)`:            float64(gwTotal),
		`sum(switchyard_gateway_time_to_first_token_seconds_count)`:            float64(gwStatus[200]),
		`sum(switchyard_slo_total)`:                                            wantTotal,
		`count(count by (__name__, job, instance) (switchyard_results_total))`: 1,
	} {
		vals, err := promQuery(t, base, q)
		if err != nil || len(vals) != 1 || vals[0] != want {
			t.Errorf("%s = %v (%v), want %v", q, vals, err, want)
		}
	}

	// The dashboard, with Grafana's $__rate_interval standing for a window
	// that covers the load.
	for _, q := range dashboardQueries(t) {
		expr := strings.ReplaceAll(q, "$__rate_interval", "1m")
		vals, err := promQuery(t, base, expr)
		if err != nil {
			t.Errorf("dashboard query %s: %v", q, err)
			continue
		}
		if len(vals) == 0 {
			t.Errorf("dashboard query returns no data: %s", q)
		}
	}
}
