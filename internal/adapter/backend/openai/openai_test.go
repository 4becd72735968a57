package openai

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/switchyard-ai/switchyard/schemas"
)

// vllmMetrics is a vLLM V1 /metrics page in its exact exposition format
// (HELP/TYPE lines, model_name/engine labels, histograms), trimmed to the
// families the scraper reads plus neighbours it must skip. It also carries
// the deprecated gpu_cache_usage_perc, which older servers export alone.
const vllmMetrics = `# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="meta-llama/Llama-3.1-8B-Instruct"} 3.0
# HELP vllm:num_requests_waiting Number of requests waiting to be processed.
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{engine="0",model_name="meta-llama/Llama-3.1-8B-Instruct"} 7.0
# HELP vllm:kv_cache_usage_perc KV-cache usage. 1 means 100 percent usage.
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{engine="0",model_name="meta-llama/Llama-3.1-8B-Instruct"} 0.4375
# HELP vllm:gpu_cache_usage_perc GPU KV-cache usage. 1 means 100 percent usage.
# TYPE vllm:gpu_cache_usage_perc gauge
vllm:gpu_cache_usage_perc{engine="0",model_name="meta-llama/Llama-3.1-8B-Instruct"} 0.4375
# HELP vllm:prefix_cache_queries_total Prefix cache queries, in terms of number of queried tokens.
# TYPE vllm:prefix_cache_queries_total counter
vllm:prefix_cache_queries_total{engine="0",model_name="meta-llama/Llama-3.1-8B-Instruct"} 4096.0
# HELP vllm:prefix_cache_hits_total Prefix cache hits, in terms of number of cached tokens.
# TYPE vllm:prefix_cache_hits_total counter
vllm:prefix_cache_hits_total{engine="0",model_name="meta-llama/Llama-3.1-8B-Instruct"} 1024.0
# HELP vllm:time_to_first_token_seconds Histogram of time to first token in seconds.
# TYPE vllm:time_to_first_token_seconds histogram
vllm:time_to_first_token_seconds_bucket{engine="0",le="0.001",model_name="meta-llama/Llama-3.1-8B-Instruct"} 0.0
vllm:time_to_first_token_seconds_bucket{engine="0",le="+Inf",model_name="meta-llama/Llama-3.1-8B-Instruct"} 12.0
vllm:time_to_first_token_seconds_count{engine="0",model_name="meta-llama/Llama-3.1-8B-Instruct"} 12.0
vllm:time_to_first_token_seconds_sum{engine="0",model_name="meta-llama/Llama-3.1-8B-Instruct"} 0.83
# HELP vllm:cache_config_info Information of the LLMEngine CacheConfig
# TYPE vllm:cache_config_info gauge
vllm:cache_config_info{block_size="16",cache_dtype="auto",enable_prefix_caching="True",engine="0",num_gpu_blocks="27153"} 1.0
`

// fakeServer speaks vLLM's streaming wire format: one SSE event per token,
// a final chunk with finish_reason, a usage chunk, then data: [DONE].
func fakeServer(t *testing.T, pieces []string, delay time.Duration, gotBody *map[string]any) *httptest.Server {
	mux := http.NewServeMux()
	stream := func(w http.ResponseWriter, r *http.Request) {
		if err := json.NewDecoder(r.Body).Decode(gotBody); err != nil {
			http.Error(w, err.Error(), 400)
			return
		}
		chat := r.URL.Path == "/v1/chat/completions"
		w.Header().Set("Content-Type", "text/event-stream")
		fl := w.(http.Flusher)
		for i, p := range pieces {
			var chunk string
			if chat {
				chunk = fmt.Sprintf(`{"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"content":%q},"logprobs":null,"finish_reason":null}]}`, p)
			} else {
				chunk = fmt.Sprintf(`{"id":"cmpl-1","object":"text_completion","created":1,"model":"m","choices":[{"index":0,"text":%q,"logprobs":null,"finish_reason":null}]}`, p)
			}
			fmt.Fprintf(w, "data: %s\n\n", chunk)
			fl.Flush()
			if i == 0 || delay > 0 {
				select {
				case <-time.After(delay):
				case <-r.Context().Done():
					return
				}
			}
		}
		fmt.Fprint(w, `data: {"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{},"logprobs":null,"finish_reason":"length"}]}`+"\n\n")
		fmt.Fprintf(w, `data: {"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"m","choices":[],"usage":{"prompt_tokens":42,"total_tokens":%d,"completion_tokens":%d,"prompt_tokens_details":{"cached_tokens":32}}}`+"\n\n", 42+len(pieces), len(pieces))
		fmt.Fprint(w, "data: [DONE]\n\n")
	}
	mux.HandleFunc("/v1/chat/completions", stream)
	mux.HandleFunc("/v1/completions", stream)
	mux.HandleFunc("/metrics", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
		fmt.Fprint(w, vllmMetrics)
	})
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return srv
}

func TestGenerateStreamsChat(t *testing.T) {
	var body map[string]any
	srv := fakeServer(t, []string{"Hello", ",", " world"}, 20*time.Millisecond, &body)
	c := New(srv.URL+"/", "meta-llama/Llama-3.1-8B-Instruct")
	var got []string
	temp := 0.0
	res, err := c.Generate(context.Background(), Request{
		Messages:  []schemas.Message{{Role: "user", Content: "hi"}},
		MaxTokens: 3, Temperature: &temp,
	}, func(s string) { got = append(got, s) })
	if err != nil {
		t.Fatal(err)
	}
	if res.Text != "Hello, world" || strings.Join(got, "|") != "Hello|,| world" {
		t.Errorf("text %q chunks %q", res.Text, got)
	}
	if res.PromptTokens != 42 || res.CompletionTokens != 3 || res.CachedTokens != 32 || res.FinishReason != "length" {
		t.Errorf("result %+v", res)
	}
	if res.TTFT <= 0 || res.TTFT >= res.Total || res.Total < 40*time.Millisecond {
		t.Errorf("TTFT %v total %v", res.TTFT, res.Total)
	}
	if body["stream"] != true || body["model"] != "meta-llama/Llama-3.1-8B-Instruct" || body["max_tokens"] != 3.0 {
		t.Errorf("request body %v", body)
	}
}

// TestGenerateForwardsSamplingAndFormat: every request parameter that
// changes the answer reaches the engine — the cache keys on them, so an
// engine that never saw them would answer a different question.
func TestGenerateForwardsSamplingAndFormat(t *testing.T) {
	topP := 0.5
	rf := map[string]any{"type": "json_object"}
	tools := []map[string]any{{"type": "function", "function": map[string]any{"name": "lookup"}}}
	for _, tc := range []struct {
		name string
		req  Request
		want []string
		not  []string
	}{
		{"chat", Request{Messages: []schemas.Message{{Role: "user", Content: "hi"}}, TopP: &topP, Stop: []string{"\n"}, ResponseFormat: rf, Tools: tools},
			[]string{"top_p", "stop", "response_format", "tools"}, nil},
		{"completions", Request{Prompt: "x", TopP: &topP, Stop: []string{"END"}, ResponseFormat: rf, Tools: tools},
			[]string{"top_p", "stop"}, []string{"response_format", "tools"}},
		{"nothing set sends nothing", Request{Prompt: "x"}, nil, []string{"top_p", "stop", "response_format", "tools", "kv_transfer_params"}},
		{"decode leg's kv_transfer_params", Request{Prompt: "x", KVTransferParams: map[string]any{"do_remote_prefill": true}}, []string{"kv_transfer_params"}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var body map[string]any
			srv := fakeServer(t, []string{"a"}, 0, &body)
			if _, err := New(srv.URL, "m").Generate(context.Background(), tc.req, nil); err != nil {
				t.Fatal(err)
			}
			for _, k := range tc.want {
				if _, ok := body[k]; !ok {
					t.Errorf("%s not sent: %v", k, body)
				}
			}
			for _, k := range tc.not {
				if _, ok := body[k]; ok {
					t.Errorf("%s sent: %v", k, body)
				}
			}
		})
	}
}

func TestGenerateCompletions(t *testing.T) {
	var body map[string]any
	srv := fakeServer(t, []string{"a", "b"}, 0, &body)
	res, err := New(srv.URL, "m").Generate(context.Background(), Request{Prompt: "x"}, nil)
	if err != nil || res.Text != "ab" || body["prompt"] != "x" {
		t.Fatalf("res %+v err %v body %v", res, err, body)
	}
}

func TestGenerateCancelAbortsRequest(t *testing.T) {
	var body map[string]any
	srv := fakeServer(t, []string{"a", "b", "c", "d"}, time.Second, &body)
	ctx, cancel := context.WithCancel(context.Background())
	start := time.Now()
	_, err := New(srv.URL, "m").Generate(ctx, Request{Prompt: "x"}, func(string) { cancel() })
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want context.Canceled", err)
	}
	if time.Since(start) > 900*time.Millisecond {
		t.Errorf("cancel took %v", time.Since(start))
	}
}

func TestGenerateHTTPError(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, `{"error":{"message":"model not found"}}`, http.StatusNotFound)
	}))
	defer srv.Close()
	if _, err := New(srv.URL, "m").Generate(context.Background(), Request{Prompt: "x"}, nil); err == nil || !strings.Contains(err.Error(), "404") {
		t.Errorf("err = %v", err)
	}
	if _, err := New(srv.URL, "m").ScrapeMetrics(context.Background()); err == nil {
		t.Error("metrics 404 accepted")
	}
}

func TestScrapeMetrics(t *testing.T) {
	var body map[string]any
	srv := fakeServer(t, nil, 0, &body)
	m, err := New(srv.URL, "m").ScrapeMetrics(context.Background())
	if err != nil || m.Engine != "vllm" || m.KVUsage != 0.4375 || m.Running != 3 || m.Waiting != 7 ||
		m.KVBlocksTotal != 27153 || m.BlockSize != 16 || m.PrefixHitRate != 0.25 {
		t.Errorf("metrics %+v err %v", m, err)
	}
}
