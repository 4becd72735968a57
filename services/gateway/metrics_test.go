package gateway

import (
	"bytes"
	"context"
	"io"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/VictoriaMetrics/metrics"

	gw "github.com/switchyard-ai/switchyard/internal/adapter/gateway"
	"github.com/switchyard-ai/switchyard/schemas"
	"github.com/switchyard-ai/switchyard/subjects"
)

func scrapeSet(set *metrics.Set) map[string]float64 {
	var b bytes.Buffer
	set.WritePrometheus(&b)
	out := map[string]float64{}
	for _, line := range strings.Split(b.String(), "\n") {
		i := strings.LastIndexByte(line, ' ')
		if i <= 0 || strings.HasPrefix(line, "#") {
			continue
		}
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err == nil {
			out[line[:i]] = v
		}
	}
	return out
}

// TestGatewayMetrics: requests by status, TTFT, inter-token and end-to-end
// histograms and token counters per tenant and model, as vLLM and LiteLLM
// users look for them.
func TestGatewayMetrics(t *testing.T) {
	set := metrics.NewSet()
	e := start(t, InstantConfig{TokenDelay: 5 * time.Millisecond}, Config{Metrics: set})
	for _, body := range []string{
		`{"model":"llama-3.1-8b","messages":[{"role":"user","content":"one two three"}],"max_tokens":8}`,
		`{"model":"llama-3.1-8b","messages":[{"role":"user","content":"one two three"}],"max_tokens":8,"stream":true}`,
		`{"model":"llama-3.1-8b","messages":[{"role":"user","content":"hi !quota"}],"max_tokens":8}`,
		`{"model":"no-such-model-typo","messages":[{"role":"user","content":"hi !shed"}],"max_tokens":8}`,
		`{"model":"llama-3.1-8b","messages":[]}`,
	} {
		resp := post(t, context.Background(), e.url+"/v1/chat/completions", testKey, body, nil)
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	got := scrapeSet(set)
	lbl := `tenant="acme",model="llama-3.1-8b"`
	for key, want := range map[string]float64{
		`switchyard_gateway_requests_total{` + lbl + `,status_code="200"}`:                 2,
		`switchyard_gateway_requests_total{` + lbl + `,status_code="429"}`:                 1,
		`switchyard_gateway_requests_total{tenant="acme",model="other",status_code="429"}`: 1,
		`switchyard_gateway_requests_total{tenant="acme",model="other",status_code="400"}`: 1,
		`switchyard_gateway_e2e_request_latency_seconds_count{` + lbl + `}`:                3,
		`switchyard_gateway_time_to_first_token_seconds_count{` + lbl + `}`:                1,
		`switchyard_gateway_inter_token_latency_seconds_count{` + lbl + `}`:                1,
		// "echo: one two three" is 4 completion tokens per answer, over 2 answers.
		`switchyard_gateway_generation_tokens_total{` + lbl + `}`: 8,
	} {
		if got[key] != want {
			t.Errorf("%s = %v, want %v", key, got[key], want)
		}
	}
	if got[`switchyard_gateway_prompt_tokens_total{`+lbl+`}`] <= 0 {
		t.Errorf("no prompt tokens counted")
	}
	for key := range got {
		if strings.Contains(key, "no-such-model-typo") {
			t.Errorf("a client's model name became a label: %s", key)
		}
	}
}

// TestGatewayMetricsClientClosed: a client that leaves mid-stream is
// counted as 499, with the TTFT of the chunks it did receive.
func TestGatewayMetricsClientClosed(t *testing.T) {
	set := metrics.NewSet()
	e := start(t, InstantConfig{TokenDelay: 5 * time.Millisecond}, Config{Metrics: set})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	resp := post(t, ctx, e.url+"/v1/chat/completions", testKey,
		`{"model":"llama-3.1-8b","stream":true,"messages":[{"role":"user","content":"x !hang"}],"max_tokens":8}`, nil)
	buf := make([]byte, 1)
	if _, err := resp.Body.Read(buf); err != nil {
		t.Fatal(err)
	}
	cancel()
	resp.Body.Close()
	key := `switchyard_gateway_requests_total{tenant="acme",model="llama-3.1-8b",status_code="499"}`
	for end := time.Now().Add(5 * time.Second); scrapeSet(set)[key] != 1; {
		if time.Now().After(end) {
			t.Fatalf("%s = %v, want 1", key, scrapeSet(set)[key])
		}
		time.Sleep(20 * time.Millisecond)
	}
	if got := scrapeSet(set)[`switchyard_gateway_time_to_first_token_seconds_count{tenant="acme",model="llama-3.1-8b"}`]; got != 1 {
		t.Errorf("TTFT count %v, want 1", got)
	}
}

// A stream that fails after its 200 went out is counted by the error it
// ended with (here the cancel's 499 while the client still reads), and a
// request refused for its key is counted as the 401 it got.
func TestGatewayMetricsStreamFailureAndUnauthorized(t *testing.T) {
	set := metrics.NewSet()
	e := start(t, InstantConfig{TokenDelay: 5 * time.Millisecond}, Config{Metrics: set})
	resp := post(t, context.Background(), e.url+"/v1/chat/completions", testKey,
		`{"model":"llama-3.1-8b","stream":true,"messages":[{"role":"user","content":"x !hang"}],"max_tokens":8}`, nil)
	defer resp.Body.Close()
	buf := make([]byte, 1)
	if _, err := resp.Body.Read(buf); err != nil || resp.StatusCode != 200 {
		t.Fatalf("stream did not start: %d %v", resp.StatusCode, err)
	}
	// The request is cancelled on the bus, not by the client: the stream
	// ends with an error event the client reads.
	id := resp.Header.Get(gw.HeaderRequestID)
	c := schemas.Cancel{V: schemas.Version, RequestID: id, Tenant: "acme", Reason: "test", At: time.Now().UTC()}
	if err := e.nc.Publish(subjects.Cancel("acme"), schemas.MustMarshal(schemas.JSON, c)); err != nil {
		t.Fatal(err)
	}
	rest, _ := io.ReadAll(resp.Body)
	if !strings.Contains(string(rest), `"code":"cancelled"`) {
		t.Fatalf("stream did not end with the cancel: %s", rest)
	}
	for _, key := range []string{"", "sk-wrong"} {
		r := post(t, context.Background(), e.url+"/v1/chat/completions", key, `{"model":"m","messages":[{"role":"user","content":"x"}]}`, nil)
		r.Body.Close()
	}
	want := map[string]float64{
		`switchyard_gateway_requests_total{tenant="acme",model="llama-3.1-8b",status_code="499"}`: 1,
		`switchyard_gateway_requests_total{tenant="acme",model="llama-3.1-8b",status_code="200"}`: 0,
		`switchyard_gateway_requests_total{tenant="",model="other",status_code="401"}`:            2,
	}
	for end := time.Now().Add(5 * time.Second); ; {
		got, ok := scrapeSet(set), true
		for k, v := range want {
			ok = ok && got[k] == v
		}
		if ok {
			return
		}
		if time.Now().After(end) {
			for k, v := range want {
				t.Errorf("%s = %v, want %v", k, got[k], v)
			}
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
}
