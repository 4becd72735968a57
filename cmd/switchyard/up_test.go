package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/switchyard-ai/switchyard/internal/adapter/bus"
	"github.com/switchyard-ai/switchyard/internal/adapter/freeport"
	"github.com/switchyard-ai/switchyard/internal/testkit/waitfor"
	"github.com/switchyard-ai/switchyard/schemas"
	"github.com/switchyard-ai/switchyard/services/client"
)

// syncBuffer is a bytes.Buffer that a running command writes while the
// test reads it.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// freeAddr is a loopback address with a port nothing listens on now,
// outside the ephemeral range.
func freeAddr(t *testing.T) string {
	t.Helper()
	addr, err := freeport.Addr()
	if err != nil {
		t.Fatal(err)
	}
	return addr
}

// running is `switchyard up` and `switchyard gateway` started in-process
// as a user would start them, each on its own loopback ports.
type running struct {
	natsURL, upMetrics, gatewayURL, gatewayMetrics string
}

// startUpAndGateway runs `up` with upArgs, then a gateway on it with the
// test tenants file, and stops both when the test ends.
func startUpAndGateway(t *testing.T, upArgs ...string) running {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	t.Cleanup(func() { cancel(); wg.Wait() })
	var r running
	up := startOnFreePorts(t, &wg, "up", "metrics: http://", func(out io.Writer, addrs [2]string) error {
		return runUp(ctx, append([]string{"--listen", addrs[0], "--metrics", addrs[1]}, upArgs...), out)
	})
	r.natsURL, r.upMetrics = "nats://"+up[0], up[1]
	gw := startOnFreePorts(t, &wg, "gateway", "OpenAI-compatible API on", func(out io.Writer, addrs [2]string) error {
		return runGateway(ctx, []string{"--nats", r.natsURL, "--listen", addrs[0], "--metrics", addrs[1],
			"--tenants", "testdata/up_tenants.json"}, out)
	})
	r.gatewayURL, r.gatewayMetrics = "http://"+gw[0], gw[1]
	return r
}

// startOnFreePorts runs one command on two free loopback addresses until
// its output shows ready, and returns the addresses it serves on. A port
// freeAddr found free can still be bound by another process before the
// command binds it, so a start that fails with "address already in use"
// is tried again on new ones.
func startOnFreePorts(t *testing.T, wg *sync.WaitGroup, name, ready string, run func(out io.Writer, addrs [2]string) error) [2]string {
	t.Helper()
	const tries = 5
	for try := 1; ; try++ {
		addrs := [2]string{freeAddr(t), freeAddr(t)}
		var out syncBuffer
		exited := make(chan error, 1)
		wg.Add(1)
		go func() {
			defer wg.Done()
			exited <- run(&out, addrs)
		}()
		var exitErr error
		stopped := false
		waitfor.True(t, name+" to serve", 30*time.Second, func() bool {
			select {
			case exitErr = <-exited:
				stopped = true
				return true
			default:
			}
			return strings.Contains(out.String(), ready)
		})
		if !stopped {
			return addrs
		}
		if exitErr == nil || !strings.Contains(exitErr.Error(), "address already in use") || try == tries {
			t.Fatalf("%s exited: %v", name, exitErr)
		}
		t.Logf("%s: a port was taken before it bound (%v); trying new ports", name, exitErr)
	}
}

func chat(t *testing.T, r running, key string, headers map[string]string) (int, string) {
	t.Helper()
	body := `{"model":"llama-3.1-8b","messages":[{"role":"user","content":"hello there"}],"max_tokens":8}`
	req, err := http.NewRequest(http.MethodPost, r.gatewayURL+"/v1/chat/completions", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+key)
	req.Header.Set("Content-Type", "application/json")
	for k, v := range headers {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func scrape(t *testing.T, addr string) string {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}

// TestUpTenantsEnforced: `up --tenants` gives the one-process default the
// tenant profiles, so a tenant asking for a class its profile does not
// allow is refused, while its allowed classes are served.
func TestUpTenantsEnforced(t *testing.T) {
	if testing.Short() {
		t.Skip("runs up and a gateway")
	}
	r := startUpAndGateway(t, "--workers", "1", "--tenants", "testdata/up_tenants.json")
	if code, body := chat(t, r, "sk-test-acme", nil); code != 200 {
		t.Fatalf("allowed request: %d %s", code, body)
	}
	code, body := chat(t, r, "sk-test-acme", map[string]string{"X-Switchyard-Priority": "critical"})
	if code != http.StatusForbidden || !strings.Contains(body, "critical") {
		t.Fatalf("critical for acme (allowed: interactive, standard, batch): %d %s, want 403 naming the class", code, body)
	}
	if code, body := chat(t, r, "sk-test-ops", map[string]string{"X-Switchyard-Priority": "critical"}); code != 200 {
		t.Fatalf("critical for ops: %d %s", code, body)
	}
}

// TestUpAddressInUse: `up` on a taken port says so at once.
func TestUpAddressInUse(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	start := time.Now()
	err = runUp(ctx, []string{"--listen", ln.Addr().String(), "--metrics", ""}, io.Discard)
	if err == nil || !strings.Contains(err.Error(), "address in use") {
		t.Fatalf("up on a taken port: %v, want \"address in use\"", err)
	}
	if d := time.Since(start); d > 3*time.Second {
		t.Fatalf("took %s to fail", d)
	}
	err = runUp(ctx, []string{"--listen", freeAddr(t), "--metrics", ln.Addr().String()}, io.Discard)
	if err == nil || !strings.Contains(err.Error(), "metrics listen") || !strings.Contains(err.Error(), "address in use") {
		t.Fatalf("up with a taken --metrics port: %v", err)
	}
}

// TestUpMetricsOneSeriesEach: `up`'s /metrics, with three workers that
// each count results, carries every series once, summed, and the
// consumers' backlog under prometheus-nats-exporter's names.
func TestUpMetricsOneSeriesEach(t *testing.T) {
	if testing.Short() {
		t.Skip("runs up")
	}
	r := startUpAndGateway(t, "--workers", "3")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	nc, err := bus.Dial(ctx, r.natsURL, "up-test", 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	cl, err := client.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	const n = 30
	for i := 0; i < n; i++ {
		res, err := cl.Do(ctx, "acme", &schemas.Request{Model: "llama-3.1-8b", Prompt: fmt.Sprintf("count %d", i), MaxTokens: 4, Priority: schemas.PriorityStandard})
		if err != nil {
			t.Fatal(err)
		}
		if res.Status != schemas.StatusOK {
			t.Fatalf("result %+v", res)
		}
	}
	// A client holds a result as soon as RESULTS stores it, a moment
	// before the worker that published it has its ack and counts it: scrape
	// until the last count is in (a run read 29 of 30 at once).
	var text string
	var ok float64
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		text = scrape(t, r.upMetrics)
		if ok = okResults(text); ok == n || time.Now().After(deadline) {
			break
		}
	}
	seen := map[string]bool{}
	typed := map[string]int{} // metric family -> its # TYPE lines
	for _, line := range strings.Split(text, "\n") {
		if f, found := strings.CutPrefix(line, "# TYPE "); found {
			name, _, _ := strings.Cut(f, " ")
			typed[name]++
			continue
		}
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		// Every sample of ours and the Go runtime's is typed, once, however
		// many services in the process count into its family. (The
		// JetStream collector's exporter-named series are written as
		// plain lines.)
		if !strings.HasPrefix(line, "jetstream_") {
			if fam := metricFamily(line, typed); typed[fam] != 1 {
				t.Errorf("%s: %d # TYPE lines for %s before it, want 1", line, typed[fam], fam)
			}
		}
		i := strings.LastIndexByte(line, ' ')
		if seen[line[:i]] {
			t.Errorf("duplicate series %s", line[:i])
		}
		seen[line[:i]] = true
	}
	if ok != n {
		t.Errorf("sum of switchyard_results_total{status=\"ok\"} = %v, want %d", ok, n)
	}
	if !regexp.MustCompile(`(?m)^jetstream_consumer_num_pending\{stream_name="ADMITTED",consumer_name="[^"]+"\} \d+$`).MatchString(text) {
		t.Errorf("no jetstream_consumer_num_pending for ADMITTED:\n%s", text)
	}
}

// okResults sums switchyard_results_total{status="ok"} over a scrape.
func okResults(text string) float64 {
	var ok float64
	for _, line := range strings.Split(text, "\n") {
		if strings.HasPrefix(line, `switchyard_results_total{`) && strings.Contains(line, `status="ok"`) {
			var v float64
			fmt.Sscan(line[strings.LastIndexByte(line, ' ')+1:], &v)
			ok += v
		}
	}
	return ok
}

// metricFamily is a sample line's metric family: its name without labels,
// and without a histogram's _bucket, _sum or _count suffix unless the
// name itself was typed (a counter may end in _count).
func metricFamily(line string, typed map[string]int) string {
	name := line
	if i := strings.IndexAny(line, "{ "); i >= 0 {
		name = line[:i]
	}
	if typed[name] > 0 {
		return name
	}
	for _, suf := range []string{"_bucket", "_sum", "_count"} {
		if base, ok := strings.CutSuffix(name, suf); ok {
			return base
		}
	}
	return name
}
