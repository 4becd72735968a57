package gateway

import (
	"fmt"
	"net/http"
	"time"

	"github.com/VictoriaMetrics/metrics"

	"github.com/switchyard-ai/switchyard/schemas"
)

// The gateway's series are named after vLLM's (vllm:time_to_first_token_seconds,
// vllm:inter_token_latency_seconds, vllm:e2e_request_latency_seconds,
// vllm:prompt_tokens_total, vllm:generation_tokens_total) and LiteLLM's
// requests-by-status count, with Switchyard's prefix and per tenant and
// model, so a dashboard built for either reads them with a rename
// (docs/metrics.md).
const (
	metricRequests   = "switchyard_gateway_requests_total"
	metricTTFT       = "switchyard_gateway_time_to_first_token_seconds"
	metricITL        = "switchyard_gateway_inter_token_latency_seconds"
	metricE2E        = "switchyard_gateway_e2e_request_latency_seconds"
	metricPrompt     = "switchyard_gateway_prompt_tokens_total"
	metricGeneration = "switchyard_gateway_generation_tokens_total"
)

// StatusClientClosed is the status recorded for a request whose client
// went away before the answer (nginx's 499): no HTTP status was sent.
const StatusClientClosed = 499

// Bucket bounds in seconds: TTFT from a cache hit (~1 ms) to a long
// prompt on a cold pool; inter-token latency from speculative decoding to
// a saturated batch; end-to-end up to the batch class's hours.
var (
	ttftBuckets = []float64{0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 20, 40, 80, 160, 640}
	itlBuckets  = []float64{0.001, 0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.5, 1, 2.5, 5}
	e2eBuckets  = []float64{0.01, 0.05, 0.1, 0.3, 0.5, 1, 2.5, 5, 10, 20, 30, 60, 120, 300, 600, 1800, 3600, 7200}
)

// gatewayMetrics records one completion request's outcome.
type gatewayMetrics struct {
	set    *metrics.Set
	models map[string]bool
}

func newGatewayMetrics(set *metrics.Set, models []string) *gatewayMetrics {
	m := &gatewayMetrics{set: set, models: map[string]bool{"auto": true}}
	for _, name := range models {
		m.models[name] = true
	}
	return m
}

// modelLabel bounds the label's values to the catalog: a client's typo
// must not create a series.
func (m *gatewayMetrics) modelLabel(model string) string {
	if m.models[model] {
		return model
	}
	return "other"
}

// observation is what the completion handler learned about one request.
type observation struct {
	tenant, model string
	status        int
	failed        int // the status of an error a started stream ended with
	start         time.Time
	firstToken    time.Time // zero when no token was relayed
	lastToken     time.Time
	result        *schemas.Result // the final result, when one came
}

func (m *gatewayMetrics) record(o observation, now time.Time) {
	model := m.modelLabel(o.model)
	labels := fmt.Sprintf(`tenant=%q,model=%q`, o.tenant, model)
	m.set.GetOrCreateCounter(fmt.Sprintf(`%s{%s,status_code="%d"}`, metricRequests, labels, o.status)).Inc()
	if o.status == http.StatusUnauthorized {
		return // refused at the door: no tenant, no latency worth a bucket
	}
	m.set.GetOrCreatePrometheusHistogramExt(fmt.Sprintf(`%s{%s}`, metricE2E, labels), e2eBuckets).Update(now.Sub(o.start).Seconds())
	var timing schemas.Timing
	var usage schemas.Usage
	if o.result != nil {
		timing, usage = o.result.Timing, o.result.Usage
	}
	// TTFT as the client saw it when tokens were streamed; otherwise the
	// system's own measure from the result (the gateway saw no token).
	switch {
	case !o.firstToken.IsZero():
		m.set.GetOrCreatePrometheusHistogramExt(fmt.Sprintf(`%s{%s}`, metricTTFT, labels), ttftBuckets).Update(o.firstToken.Sub(o.start).Seconds())
	case timing.TTFTMs > 0:
		m.set.GetOrCreatePrometheusHistogramExt(fmt.Sprintf(`%s{%s}`, metricTTFT, labels), ttftBuckets).Update(timing.TTFTMs / 1000)
	}
	switch {
	case !o.firstToken.IsZero() && usage.CompletionTokens > 1 && o.lastToken.After(o.firstToken):
		itl := o.lastToken.Sub(o.firstToken).Seconds() / float64(usage.CompletionTokens-1)
		m.set.GetOrCreatePrometheusHistogramExt(fmt.Sprintf(`%s{%s}`, metricITL, labels), itlBuckets).Update(itl)
	case timing.ITLMs > 0:
		m.set.GetOrCreatePrometheusHistogramExt(fmt.Sprintf(`%s{%s}`, metricITL, labels), itlBuckets).Update(timing.ITLMs / 1000)
	}
	if usage.PromptTokens > 0 {
		m.set.GetOrCreateCounter(fmt.Sprintf(`%s{%s}`, metricPrompt, labels)).Add(usage.PromptTokens)
	}
	if usage.CompletionTokens > 0 {
		m.set.GetOrCreateCounter(fmt.Sprintf(`%s{%s}`, metricGeneration, labels)).Add(usage.CompletionTokens)
	}
}

// statusRecorder remembers the status a handler wrote.
type statusRecorder struct {
	http.ResponseWriter
	status int
}

func (s *statusRecorder) WriteHeader(code int) {
	if s.status == 0 {
		s.status = code
	}
	s.ResponseWriter.WriteHeader(code)
}

func (s *statusRecorder) Write(b []byte) (int, error) {
	if s.status == 0 {
		s.status = http.StatusOK
	}
	return s.ResponseWriter.Write(b)
}

// Unwrap lets http.NewResponseController flush the stream underneath.
func (s *statusRecorder) Unwrap() http.ResponseWriter { return s.ResponseWriter }
