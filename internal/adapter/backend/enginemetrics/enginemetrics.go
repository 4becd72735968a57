// Package enginemetrics owns reading an inference engine's Prometheus
// /metrics page — vLLM's and SGLang's current metric names, and vLLM's
// deprecated ones that older servers still export — and turning it into
// what a Switchyard heartbeat reports: requests running and waiting, KV
// cache usage and capacity, prefix-cache hit rate and tokens per second.
//
// Parse reads the text exposition format (HELP/TYPE comments, labels with
// escapes, NaN and ±Inf, optional timestamps). Read maps a parsed page onto
// a Snapshot; counters stay cumulative there, and a Tracker turns two
// successive snapshots into rates (tokens per second, the hit rate over the
// interval), tolerating counter resets when the engine restarts.
//
// The names, as the engines define them:
//
//	vLLM (vllm/v1/metrics/loggers.py)      SGLang (sglang/srt/metrics/collector.py)
//	vllm:num_requests_running              sglang:num_running_reqs
//	vllm:num_requests_waiting              sglang:num_queue_reqs
//	vllm:kv_cache_usage_perc               sglang:token_usage
//	  (deprecated vllm:gpu_cache_usage_perc)
//	vllm:prefix_cache_queries_total,       sglang:cache_hit_rate (a gauge)
//	vllm:prefix_cache_hits_total
//	  (deprecated vllm:gpu_prefix_cache_*)
//	vllm:prompt_tokens_total,              sglang:prompt_tokens_total,
//	vllm:generation_tokens_total           sglang:generation_tokens_total,
//	                                       sglang:gen_throughput (a gauge)
//	vllm:cache_config_info{num_gpu_blocks, sglang:max_total_num_tokens,
//	  block_size}                          sglang:num_used_tokens
//	vllm:num_preemptions_total             sglang:num_retracted_requests_total
//
// llama.cpp's llama-server (--metrics) maps the same way:
// llamacpp:requests_processing and _deferred are running and waiting,
// llamacpp:kv_cache_usage_ratio the KV use (where exported),
// llamacpp:prompt_tokens_total and tokens_predicted_total the counters.
//
// Samples of one metric under several label sets (data-parallel engines,
// several models) are summed for counts and counters, and the largest is
// taken for usage fractions (the fullest engine is the one that preempts).
//
// No vLLM or SGLang runs in this repository's tests: they parse pages in
// the engines' recorded exposition format.
package enginemetrics

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// Sample is one line of an exposition page.
type Sample struct {
	Name   string
	Labels map[string]string
	Value  float64
}

// Page is a parsed exposition page: samples by metric name, in page order.
type Page map[string][]Sample

// maxLine bounds one exposition line; a page's lines are short, and an
// unbounded one is not a metrics page.
const maxLine = 1 << 20

// Parse reads Prometheus text exposition format 0.0.4.
func Parse(r io.Reader) (Page, error) {
	page := Page{}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), maxLine)
	n := 0
	for sc.Scan() {
		n++
		line := strings.TrimSpace(sc.Text())
		if line == "" || line[0] == '#' {
			continue
		}
		s, err := parseLine(line)
		if err != nil {
			return nil, fmt.Errorf("enginemetrics: line %d: %w", n, err)
		}
		page[s.Name] = append(page[s.Name], s)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("enginemetrics: reading the page: %w", err)
	}
	return page, nil
}

func parseLine(line string) (Sample, error) {
	i := strings.IndexAny(line, "{ \t")
	if i <= 0 {
		return Sample{}, fmt.Errorf("no value in %q", line)
	}
	s := Sample{Name: line[:i]}
	if !validName(s.Name) {
		return Sample{}, fmt.Errorf("bad metric name %q", s.Name)
	}
	rest := line[i:]
	if rest[0] == '{' {
		labels, after, err := parseLabels(rest[1:])
		if err != nil {
			return Sample{}, fmt.Errorf("%s: %w", s.Name, err)
		}
		s.Labels, rest = labels, after
	}
	fields := strings.Fields(rest)
	if len(fields) == 0 || len(fields) > 2 {
		return Sample{}, fmt.Errorf("%s: want a value and an optional timestamp, got %q", s.Name, strings.TrimSpace(rest))
	}
	v, err := parseValue(fields[0])
	if err != nil {
		return Sample{}, fmt.Errorf("%s: bad value %q", s.Name, fields[0])
	}
	s.Value = v
	return s, nil
}

func validName(n string) bool {
	for i := 0; i < len(n); i++ {
		c := n[i]
		if c == '_' || c == ':' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || i > 0 && c >= '0' && c <= '9' {
			continue
		}
		return false
	}
	return true
}

func parseValue(s string) (float64, error) {
	switch s {
	case "+Inf", "Inf":
		return math.Inf(1), nil
	case "-Inf":
		return math.Inf(-1), nil
	case "NaN":
		return math.NaN(), nil
	}
	return strconv.ParseFloat(s, 64)
}

// parseLabels reads `name="value",...}` and returns what follows the brace.
func parseLabels(s string) (map[string]string, string, error) {
	labels := map[string]string{}
	for {
		s = strings.TrimLeft(s, " \t")
		if s == "" {
			return nil, "", errors.New("unterminated labels")
		}
		if s[0] == '}' {
			return labels, s[1:], nil
		}
		eq := strings.IndexByte(s, '=')
		if eq <= 0 {
			if !strings.Contains(s, "}") {
				return nil, "", fmt.Errorf("unterminated labels before %q", s)
			}
			return nil, "", fmt.Errorf("bad label in %q", s)
		}
		name := strings.TrimSpace(s[:eq])
		s = strings.TrimLeft(s[eq+1:], " \t")
		if s == "" || s[0] != '"' {
			return nil, "", fmt.Errorf("label %s: value is not quoted", name)
		}
		var b strings.Builder
		j := 1
		for ; j < len(s) && s[j] != '"'; j++ {
			if s[j] == '\\' && j+1 < len(s) {
				j++
				switch s[j] {
				case 'n':
					b.WriteByte('\n')
				default: // \\ and \"
					b.WriteByte(s[j])
				}
				continue
			}
			b.WriteByte(s[j])
		}
		if j >= len(s) {
			return nil, "", fmt.Errorf("label %s: unterminated value", name)
		}
		labels[name] = b.String()
		s = strings.TrimLeft(s[j+1:], " \t")
		if s != "" && s[0] == ',' {
			s = s[1:]
		}
	}
}

// Engine names, by metric prefix.
const (
	EngineVLLM   = "vllm"
	EngineSGLang = "sglang"
	// EngineLlamaCpp is llama.cpp's llama-server started with --metrics
	// (tools/server/server.cpp): requests processing and deferred, prompt
	// and predicted token counters, and, in the releases that export it,
	// the KV cache's usage ratio.
	EngineLlamaCpp = "llamacpp"
)

// Snapshot is one scrape mapped onto what Switchyard needs. A field the
// page did not carry is -1 (counts, fractions, counters) or 0 (capacities).
type Snapshot struct {
	Engine           string
	Running, Waiting float64
	// KVUsage is the fraction of the KV cache in use, 0-1.
	KVUsage float64
	// KVBlocksTotal and BlockSize are the engine's real KV capacity
	// (vLLM's cache_config_info); KVTokensTotal and KVTokensUsed are
	// SGLang's, in tokens.
	KVBlocksTotal, BlockSize    int
	KVTokensTotal, KVTokensUsed float64
	// PrefixHits and PrefixQueries are vLLM's cumulative prefix-cache
	// counters, in tokens; PrefixHitRate is SGLang's gauge, or vLLM's
	// lifetime ratio hits/queries.
	PrefixHits, PrefixQueries, PrefixHitRate float64
	// PromptTokens and GenerationTokens are cumulative counters.
	PromptTokens, GenerationTokens float64
	// GenThroughput is SGLang's own generation tokens/s gauge.
	GenThroughput float64
	// Preemptions is cumulative (vLLM preemptions, SGLang retractions).
	Preemptions float64
	// At is when the page was read.
	At time.Time
}

// family is one quantity under each engine's names, current names first.
type family []string

var (
	runningF     = family{"vllm:num_requests_running", "sglang:num_running_reqs", "llamacpp:requests_processing"}
	waitingF     = family{"vllm:num_requests_waiting", "sglang:num_queue_reqs", "llamacpp:requests_deferred"}
	kvUsageF     = family{"vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc", "sglang:token_usage", "llamacpp:kv_cache_usage_ratio"}
	hitsF        = family{"vllm:prefix_cache_hits_total", "vllm:gpu_prefix_cache_hits_total"}
	queriesF     = family{"vllm:prefix_cache_queries_total", "vllm:gpu_prefix_cache_queries_total"}
	hitRateF     = family{"sglang:cache_hit_rate"}
	promptF      = family{"vllm:prompt_tokens_total", "sglang:prompt_tokens_total", "llamacpp:prompt_tokens_total"}
	generationF  = family{"vllm:generation_tokens_total", "sglang:generation_tokens_total", "llamacpp:tokens_predicted_total"}
	genTputF     = family{"sglang:gen_throughput"}
	preemptF     = family{"vllm:num_preemptions_total", "sglang:num_retracted_requests_total"}
	kvTokTotalF  = family{"sglang:max_total_num_tokens"}
	kvTokUsedF   = family{"sglang:num_used_tokens"}
	cacheConfigF = "vllm:cache_config_info"
)

// first returns the samples of the first name of f the page carries.
func (p Page) first(f family) ([]Sample, string) {
	for _, n := range f {
		if s, ok := p[n]; ok && len(s) > 0 {
			return s, n
		}
	}
	return nil, ""
}

func sum(s []Sample) float64 {
	t := 0.0
	for _, x := range s {
		if !math.IsNaN(x.Value) {
			t += x.Value
		}
	}
	return t
}

func maxOf(s []Sample) float64 {
	m := math.Inf(-1)
	for _, x := range s {
		if !math.IsNaN(x.Value) {
			m = math.Max(m, x.Value)
		}
	}
	if math.IsInf(m, -1) {
		return -1
	}
	return m
}

// ErrNoEngineMetrics is returned for a page with neither vLLM's nor
// SGLang's metrics (another server, or an engine started without them:
// SGLang needs --enable-metrics).
var ErrNoEngineMetrics = errors.New("enginemetrics: no vLLM, SGLang or llama.cpp metrics on the page (SGLang needs --enable-metrics, llama-server --metrics)")

// Read maps a page onto a Snapshot.
func Read(p Page) (Snapshot, error) {
	s := Snapshot{Running: -1, Waiting: -1, KVUsage: -1, PrefixHits: -1, PrefixQueries: -1, PrefixHitRate: -1,
		PromptTokens: -1, GenerationTokens: -1, GenThroughput: -1, Preemptions: -1, KVTokensTotal: -1, KVTokensUsed: -1}
	engine := func(name string) {
		if s.Engine == "" {
			s.Engine, _, _ = strings.Cut(name, ":")
		}
	}
	counted := func(f family, dst *float64) {
		if v, n := p.first(f); n != "" {
			*dst = sum(v)
			engine(n)
		}
	}
	counted(runningF, &s.Running)
	counted(waitingF, &s.Waiting)
	if v, n := p.first(kvUsageF); n != "" {
		s.KVUsage = maxOf(v)
		engine(n)
	}
	counted(hitsF, &s.PrefixHits)
	counted(queriesF, &s.PrefixQueries)
	counted(promptF, &s.PromptTokens)
	counted(generationF, &s.GenerationTokens)
	counted(genTputF, &s.GenThroughput)
	counted(preemptF, &s.Preemptions)
	counted(kvTokTotalF, &s.KVTokensTotal)
	counted(kvTokUsedF, &s.KVTokensUsed)
	if v, n := p.first(hitRateF); n != "" {
		s.PrefixHitRate = maxOf(v)
		engine(n)
	} else if s.PrefixQueries > 0 {
		s.PrefixHitRate = s.PrefixHits / s.PrefixQueries
	}
	for _, c := range p[cacheConfigF] {
		// One info sample per engine (data-parallel rank): blocks add up.
		if nb, err := strconv.Atoi(c.Labels["num_gpu_blocks"]); err == nil && nb > 0 {
			s.KVBlocksTotal += nb
		}
		if bs, err := strconv.Atoi(c.Labels["block_size"]); err == nil && bs > 0 {
			s.BlockSize = bs
		}
		engine(cacheConfigF)
	}
	if s.Engine == "" {
		return s, ErrNoEngineMetrics
	}
	return s, nil
}

// ParseSnapshot is Read(Parse(r)).
func ParseSnapshot(r io.Reader) (Snapshot, error) {
	p, err := Parse(r)
	if err != nil {
		return Snapshot{}, err
	}
	return Read(p)
}

// maxPage bounds a scraped page (vLLM's is tens of KB; with many LoRA
// adapters or histograms, a few MB at most).
const maxPage = 16 << 20

// Scrape fetches url (the engine's /metrics) and reads it.
func Scrape(ctx context.Context, client *http.Client, url string) (Snapshot, error) {
	if client == nil {
		client = http.DefaultClient
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return Snapshot{}, fmt.Errorf("enginemetrics: %w", err)
	}
	req.Header.Set("Accept", "text/plain;version=0.0.4")
	resp, err := client.Do(req)
	if err != nil {
		return Snapshot{}, fmt.Errorf("enginemetrics: scrape %s: %w", url, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return Snapshot{}, fmt.Errorf("enginemetrics: scrape %s: %s", url, resp.Status)
	}
	s, err := ParseSnapshot(io.LimitReader(resp.Body, maxPage))
	s.At = time.Now()
	return s, err
}

// Telemetry is a heartbeat's view of the engine: gauges from the latest
// scrape, rates over the interval since the one before. Unknown values are
// -1.
type Telemetry struct {
	Engine           string
	Running, Waiting int
	KVUsage          float64
	// KVBlocksTotal is the engine's KV capacity in tokens.BlockSize-token
	// blocks, 0 when the page does not say.
	KVBlocksTotal int
	// PrefixHitRate is over the last interval where the engine gives
	// counters (vLLM), else the engine's own figure.
	PrefixHitRate float64
	// TokensPerSec is prompt plus generated tokens per second over the last
	// interval; GenTokensPerSec the generated ones alone.
	TokensPerSec, GenTokensPerSec float64
}

// Tracker turns successive snapshots into Telemetry. Not safe for
// concurrent use.
type Tracker struct {
	// BlockSize is the block size KVBlocksTotal is counted in (the
	// heartbeat's: 16).
	BlockSize int
	prev      *Snapshot
}

// delta is cur-prev for a counter, or cur when the counter went back (the
// engine restarted and counted from zero); -1 when either is unknown.
func delta(prev, cur float64) float64 {
	if prev < 0 || cur < 0 {
		return -1
	}
	if cur < prev {
		return cur
	}
	return cur - prev
}

// Observe takes the latest snapshot and returns the telemetry it gives.
func (t *Tracker) Observe(s Snapshot) Telemetry {
	bs := t.BlockSize
	if bs <= 0 {
		bs = 16
	}
	tel := Telemetry{Engine: s.Engine, Running: -1, Waiting: -1, KVUsage: s.KVUsage, PrefixHitRate: s.PrefixHitRate,
		TokensPerSec: -1, GenTokensPerSec: -1}
	if s.Running >= 0 {
		tel.Running = int(math.Round(s.Running))
	}
	if s.Waiting >= 0 {
		tel.Waiting = int(math.Round(s.Waiting))
	}
	switch {
	case s.KVBlocksTotal > 0 && s.BlockSize > 0:
		tel.KVBlocksTotal = s.KVBlocksTotal * s.BlockSize / bs
	case s.KVTokensTotal > 0:
		tel.KVBlocksTotal = int(s.KVTokensTotal) / bs
	}
	if tel.KVUsage < 0 && s.KVTokensTotal > 0 && s.KVTokensUsed >= 0 {
		tel.KVUsage = s.KVTokensUsed / s.KVTokensTotal
	}
	if s.GenThroughput >= 0 {
		tel.GenTokensPerSec = s.GenThroughput
	}
	if p := t.prev; p != nil && s.At.After(p.At) {
		dt := s.At.Sub(p.At).Seconds()
		dp, dg := delta(p.PromptTokens, s.PromptTokens), delta(p.GenerationTokens, s.GenerationTokens)
		if dg >= 0 {
			tel.GenTokensPerSec = dg / dt
			tel.TokensPerSec = dg / dt
			if dp >= 0 {
				tel.TokensPerSec = (dp + dg) / dt
			}
		}
		if dq := delta(p.PrefixQueries, s.PrefixQueries); dq > 0 {
			if dh := delta(p.PrefixHits, s.PrefixHits); dh >= 0 {
				tel.PrefixHitRate = min(1, dh/dq)
			}
		}
	}
	t.prev = &s
	return tel
}
