package enginemetrics

import (
	"context"
	"errors"
	"math"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// vllmPage is a vLLM V1 /metrics page in its exposition format, two
// data-parallel engines, trimmed to the families read plus neighbours that
// must be skipped: prometheus_client's _created samples of counters,
// histograms, the info gauge, a model name with characters to escape.
const vllmPage = `# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="org/Llama \"3.1\", 8B {inst}"} 3.0
vllm:num_requests_running{engine="1",model_name="org/Llama \"3.1\", 8B {inst}"} 2.0
# HELP vllm:num_requests_waiting Number of requests waiting to be processed.
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{engine="0",model_name="org/Llama \"3.1\", 8B {inst}"} 7.0
vllm:num_requests_waiting{engine="1",model_name="org/Llama \"3.1\", 8B {inst}"} 1.0
# HELP vllm:kv_cache_usage_perc KV-cache usage. 1 means 100 percent usage.
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{engine="0",model_name="org/Llama \"3.1\", 8B {inst}"} 0.4375
vllm:kv_cache_usage_perc{engine="1",model_name="org/Llama \"3.1\", 8B {inst}"} 0.25
# HELP vllm:prefix_cache_queries_total Prefix cache queries, in terms of number of queried tokens.
# TYPE vllm:prefix_cache_queries_total counter
vllm:prefix_cache_queries_total{engine="0",model_name="org/Llama \"3.1\", 8B {inst}"} 3072.0
vllm:prefix_cache_queries_total{engine="1",model_name="org/Llama \"3.1\", 8B {inst}"} 1024.0
vllm:prefix_cache_queries_created{engine="0",model_name="org/Llama \"3.1\", 8B {inst}"} 1.7645e+09
# HELP vllm:prefix_cache_hits_total Prefix cache hits, in terms of number of cached tokens.
# TYPE vllm:prefix_cache_hits_total counter
vllm:prefix_cache_hits_total{engine="0",model_name="org/Llama \"3.1\", 8B {inst}"} 1024.0
vllm:prefix_cache_hits_total{engine="1",model_name="org/Llama \"3.1\", 8B {inst}"} 0.0
# HELP vllm:num_preemptions_total Cumulative number of preemption from the engine.
# TYPE vllm:num_preemptions_total counter
vllm:num_preemptions_total{engine="0",model_name="org/Llama \"3.1\", 8B {inst}"} 4.0
# HELP vllm:prompt_tokens_total Number of prefill tokens processed.
# TYPE vllm:prompt_tokens_total counter
vllm:prompt_tokens_total{engine="0",model_name="org/Llama \"3.1\", 8B {inst}"} 10000.0
vllm:prompt_tokens_created{engine="0",model_name="org/Llama \"3.1\", 8B {inst}"} 1.7645e+09
# HELP vllm:generation_tokens_total Number of generation tokens processed.
# TYPE vllm:generation_tokens_total counter
vllm:generation_tokens_total{engine="0",model_name="org/Llama \"3.1\", 8B {inst}"} 2000.0
# HELP vllm:time_to_first_token_seconds Histogram of time to first token in seconds.
# TYPE vllm:time_to_first_token_seconds histogram
vllm:time_to_first_token_seconds_bucket{engine="0",le="0.001",model_name="m"} 0.0
vllm:time_to_first_token_seconds_bucket{engine="0",le="+Inf",model_name="m"} 12.0
vllm:time_to_first_token_seconds_count{engine="0",model_name="m"} 12.0
vllm:time_to_first_token_seconds_sum{engine="0",model_name="m"} 0.83
# HELP vllm:cache_config_info Information of the LLMEngine CacheConfig
# TYPE vllm:cache_config_info gauge
vllm:cache_config_info{block_size="16",cache_dtype="auto",enable_prefix_caching="True",engine="0",num_gpu_blocks="27153"} 1.0
vllm:cache_config_info{block_size="16",cache_dtype="auto",enable_prefix_caching="True",engine="1",num_gpu_blocks="27153"} 1.0
`

// sglangPage is an SGLang /metrics page (--enable-metrics) in its format.
const sglangPage = `# HELP sglang:num_running_reqs The number of running requests.
# TYPE sglang:num_running_reqs gauge
sglang:num_running_reqs{model_name="Qwen/Qwen2.5-7B-Instruct",tp_rank="0",pp_rank="0"} 5.0
# HELP sglang:num_used_tokens The number of used tokens.
# TYPE sglang:num_used_tokens gauge
sglang:num_used_tokens{model_name="Qwen/Qwen2.5-7B-Instruct",tp_rank="0",pp_rank="0"} 42000.0
# HELP sglang:token_usage The token usage.
# TYPE sglang:token_usage gauge
sglang:token_usage{model_name="Qwen/Qwen2.5-7B-Instruct",tp_rank="0",pp_rank="0"} 0.21
# HELP sglang:gen_throughput The generation throughput (token/s).
# TYPE sglang:gen_throughput gauge
sglang:gen_throughput{model_name="Qwen/Qwen2.5-7B-Instruct",tp_rank="0",pp_rank="0"} 86.5
# HELP sglang:num_queue_reqs The number of requests in the waiting queue.
# TYPE sglang:num_queue_reqs gauge
sglang:num_queue_reqs{model_name="Qwen/Qwen2.5-7B-Instruct",tp_rank="0",pp_rank="0"} 2.0
# HELP sglang:cache_hit_rate The prefix cache hit rate.
# TYPE sglang:cache_hit_rate gauge
sglang:cache_hit_rate{model_name="Qwen/Qwen2.5-7B-Instruct",tp_rank="0",pp_rank="0"} 0.5
# HELP sglang:max_total_num_tokens Maximum total number of tokens in the KV cache pool.
# TYPE sglang:max_total_num_tokens gauge
sglang:max_total_num_tokens{model_name="Qwen/Qwen2.5-7B-Instruct",tp_rank="0",pp_rank="0"} 200000.0
# HELP sglang:prompt_tokens_total Number of prefill tokens processed.
# TYPE sglang:prompt_tokens_total counter
sglang:prompt_tokens_total{model_name="Qwen/Qwen2.5-7B-Instruct"} 8.128902e+06
# HELP sglang:generation_tokens_total Number of generation tokens processed.
# TYPE sglang:generation_tokens_total counter
sglang:generation_tokens_total{model_name="Qwen/Qwen2.5-7B-Instruct"} 7.557572e+06
# HELP sglang:num_retracted_requests_total Total number of retracted requests.
# TYPE sglang:num_retracted_requests_total counter
sglang:num_retracted_requests_total{model_name="Qwen/Qwen2.5-7B-Instruct"} 3.0
`

// llamaCppPage is llama-server's /metrics (started with --metrics), in the
// names of tools/server/server.cpp; kv_cache_usage_ratio is exported by
// the releases that have it.
const llamaCppPage = `# HELP llamacpp:prompt_tokens_total Number of prompt tokens processed.
# TYPE llamacpp:prompt_tokens_total counter
llamacpp:prompt_tokens_total 6886
# HELP llamacpp:prompt_seconds_total Prompt process time
# TYPE llamacpp:prompt_seconds_total counter
llamacpp:prompt_seconds_total 2903.63
# HELP llamacpp:tokens_predicted_total Number of generation tokens processed.
# TYPE llamacpp:tokens_predicted_total counter
llamacpp:tokens_predicted_total 3469
# HELP llamacpp:kv_cache_usage_ratio KV-cache usage. 1 means 100 percent usage.
# TYPE llamacpp:kv_cache_usage_ratio gauge
llamacpp:kv_cache_usage_ratio 0.125
# HELP llamacpp:requests_processing Number of requests processing.
# TYPE llamacpp:requests_processing gauge
llamacpp:requests_processing 2
# HELP llamacpp:requests_deferred Number of requests deferred.
# TYPE llamacpp:requests_deferred gauge
llamacpp:requests_deferred 3
`

func TestReadEnginePages(t *testing.T) {
	oldVLLM := strings.NewReplacer("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc",
		"vllm:prefix_cache_", "vllm:gpu_prefix_cache_").Replace(vllmPage)
	wantVLLM := Snapshot{Engine: EngineVLLM, Running: 5, Waiting: 8, KVUsage: 0.4375, KVBlocksTotal: 54306, BlockSize: 16,
		KVTokensTotal: -1, KVTokensUsed: -1, PrefixHits: 1024, PrefixQueries: 4096, PrefixHitRate: 0.25,
		PromptTokens: 10000, GenerationTokens: 2000, GenThroughput: -1, Preemptions: 4}
	for _, tc := range []struct {
		name string
		page string
		want Snapshot
	}{
		{"vLLM V1, two DP engines", vllmPage, wantVLLM},
		{"vLLM before 0.9: deprecated names", oldVLLM, wantVLLM},
		{"llama-server --metrics", llamaCppPage, Snapshot{Engine: EngineLlamaCpp, Running: 2, Waiting: 3, KVUsage: 0.125,
			KVTokensTotal: -1, KVTokensUsed: -1, PrefixHits: -1, PrefixQueries: -1, PrefixHitRate: -1, PromptTokens: 6886,
			GenerationTokens: 3469, GenThroughput: -1, Preemptions: -1}},
		{"SGLang", sglangPage, Snapshot{Engine: EngineSGLang, Running: 5, Waiting: 2, KVUsage: 0.21, KVTokensTotal: 200000, KVTokensUsed: 42000,
			PrefixHits: -1, PrefixQueries: -1, PrefixHitRate: 0.5, PromptTokens: 8.128902e+06, GenerationTokens: 7.557572e+06,
			GenThroughput: 86.5, Preemptions: 3}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseSnapshot(strings.NewReader(tc.page))
			if err != nil {
				t.Fatal(err)
			}
			if got != tc.want {
				t.Errorf("got  %+v\nwant %+v", got, tc.want)
			}
		})
	}
}

func TestParseLabelsAndValues(t *testing.T) {
	p, err := Parse(strings.NewReader(vllmPage + "x_nan NaN\nx_inf{a=\"b\"} +Inf 1764580000000\nx_neg -Inf\n"))
	if err != nil {
		t.Fatal(err)
	}
	s := p["vllm:num_requests_running"][0]
	if s.Labels["model_name"] != `org/Llama "3.1", 8B {inst}` || s.Labels["engine"] != "0" || s.Value != 3 {
		t.Fatalf("sample %+v", s)
	}
	if !math.IsNaN(p["x_nan"][0].Value) || !math.IsInf(p["x_inf"][0].Value, 1) || !math.IsInf(p["x_neg"][0].Value, -1) {
		t.Fatalf("special values %+v %+v %+v", p["x_nan"], p["x_inf"], p["x_neg"])
	}
	if p, err := Parse(strings.NewReader(`m{path="C:\\dir\nx"} 1` + "\n")); err != nil || p["m"][0].Labels["path"] != "C:\\dir\nx" {
		t.Fatalf("escapes: %+v %v", p, err)
	}
}

func TestParseRejectsMalformedLines(t *testing.T) {
	for _, tc := range []struct {
		name, page, want string
	}{
		{"no value", "vllm:num_requests_running\n", "no value"},
		{"bad value", `vllm:num_requests_running{x="1"} abc` + "\n", `bad value "abc"`},
		{"unterminated labels", `vllm:num_requests_running{x="1" 3` + "\n", "unterminated"},
		{"unquoted label", `vllm:num_requests_running{x=1} 3` + "\n", "not quoted"},
		{"bad name", "9lives 1\n", "bad metric name"},
		{"extra fields", "up 1 2 3\n", "optional timestamp"},
		{"line 3", "# HELP up x\nup 1\nup{ 1\n", "line 3"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse(strings.NewReader(tc.page))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want it to say %q", err, tc.want)
			}
		})
	}
	if _, err := ParseSnapshot(strings.NewReader("# TYPE up gauge\nup 1\n")); !errors.Is(err, ErrNoEngineMetrics) {
		t.Fatalf("foreign page: err = %v", err)
	}
}

func TestTrackerRates(t *testing.T) {
	t0 := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	snap := func(at time.Duration, prompt, gen, hits, queries float64) Snapshot {
		s, err := ParseSnapshot(strings.NewReader(vllmPage))
		if err != nil {
			t.Fatal(err)
		}
		s.At, s.PromptTokens, s.GenerationTokens, s.PrefixHits, s.PrefixQueries = t0.Add(at), prompt, gen, hits, queries
		return s
	}
	var tr Tracker
	first := tr.Observe(snap(0, 1000, 500, 100, 1000))
	if first.TokensPerSec != -1 || first.PrefixHitRate != 0.25 || first.Running != 5 || first.Waiting != 8 || first.KVBlocksTotal != 54306 {
		t.Fatalf("first observation %+v", first)
	}
	// 2 s later: 3000 prompt and 1000 generated tokens, 600 of 1000
	// queried tokens hit.
	second := tr.Observe(snap(2*time.Second, 4000, 1500, 700, 2000))
	if second.TokensPerSec != 2000 || second.GenTokensPerSec != 500 || second.PrefixHitRate != 0.6 {
		t.Fatalf("second observation %+v", second)
	}
	// The engine restarted: its counters start again from zero.
	third := tr.Observe(snap(3*time.Second, 300, 100, 0, 0))
	if third.TokensPerSec != 400 || third.PrefixHitRate != 0.25 {
		t.Fatalf("after a counter reset %+v", third)
	}
	// SGLang: usage, capacity in tokens and its own throughput gauge.
	s, err := ParseSnapshot(strings.NewReader(sglangPage))
	if err != nil {
		t.Fatal(err)
	}
	var st Tracker
	tel := st.Observe(s)
	if tel.KVBlocksTotal != 12500 || tel.GenTokensPerSec != 86.5 || tel.PrefixHitRate != 0.5 || tel.KVUsage != 0.21 {
		t.Fatalf("sglang %+v", tel)
	}
}

func TestScrape(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/metrics":
			w.Header().Set("Content-Type", "text/plain; version=0.0.4")
			w.Write([]byte(sglangPage))
		default:
			http.NotFound(w, r)
		}
	}))
	defer srv.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	s, err := Scrape(ctx, srv.Client(), srv.URL+"/metrics")
	if err != nil || s.Engine != EngineSGLang || s.At.IsZero() {
		t.Fatalf("scrape: %+v %v", s, err)
	}
	if _, err := Scrape(ctx, srv.Client(), srv.URL+"/nope"); err == nil || !strings.Contains(err.Error(), "404") {
		t.Fatalf("404: err = %v", err)
	}
}
