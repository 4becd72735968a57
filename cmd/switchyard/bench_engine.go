package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"github.com/switchyard-ai/switchyard/internal/core/stats"
	"io"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/switchyard-ai/switchyard/internal/adapter/backend/openai"
	"github.com/switchyard-ai/switchyard/internal/adapter/gguf"
	"github.com/switchyard-ai/switchyard/internal/testkit/enginetest"
	"github.com/switchyard-ai/switchyard/schemas"
	"github.com/switchyard-ai/switchyard/services/client"
	"github.com/switchyard-ai/switchyard/services/stack"
)

// EngineBenchResult is `switchyard bench engine --json`'s last line. Each
// request is sent twice in a row with the same prompt (computed once
// before, so the engine's prompt cache favours neither; the order
// alternates), once straight to the engine and once through Switchyard (NATS submit → admitter → router
// → worker → the same engine → sy.tok chunks and the final result), and
// the added figures are percentiles of the per-pair differences: what the
// control plane adds to time to first token and to the whole request.
type EngineBenchResult struct {
	Engine    string `json:"engine"`
	Model     string `json:"model"`
	Requests  int    `json:"requests"`
	MaxTokens int    `json:"max_tokens"`

	DirectTTFTP50Ms     float64 `json:"direct_ttft_p50_ms"`
	DirectTTFTP99Ms     float64 `json:"direct_ttft_p99_ms"`
	SwitchyardTTFTP50Ms float64 `json:"switchyard_ttft_p50_ms"`
	SwitchyardTTFTP99Ms float64 `json:"switchyard_ttft_p99_ms"`
	AddedTTFTP50Ms      float64 `json:"added_ttft_p50_ms"`
	AddedTTFTP99Ms      float64 `json:"added_ttft_p99_ms"`

	DirectTotalP50Ms     float64 `json:"direct_total_p50_ms"`
	SwitchyardTotalP50Ms float64 `json:"switchyard_total_p50_ms"`
	AddedTotalP50Ms      float64 `json:"added_total_p50_ms"`
	AddedTotalP99Ms      float64 `json:"added_total_p99_ms"`

	// TokenCountsIdentical: every pair reported the same prompt and
	// completion token counts (the engine's own usage, passed through).
	TokenCountsIdentical bool `json:"token_counts_identical"`
	PromptTokens         int  `json:"prompt_tokens"`
	CompletionTokens     int  `json:"completion_tokens"`
	Simulated            bool `json:"simulated"`
}

// runBenchEngine measures the control plane's cost in front of a real
// engine: a running one at --openai-url, or, without it, the pinned Ollama
// (.tools/bin) started here serving a generated tiny model.
func runBenchEngine(ctx context.Context, args []string, stdout io.Writer) error {
	if wantsPrefix(args) {
		return runBenchEnginePrefix(ctx, args, stdout)
	}
	fs := flag.NewFlagSet("bench engine", flag.ContinueOnError)
	fs.Bool("prefix", false, "measure prefix affinity instead: Switchyard against round-robin over two engines (see `bench engine --prefix -h`)")
	url := fs.String("openai-url", "", "a running engine's root URL (default: start the pinned Ollama with a generated tiny model)")
	model := fs.String("model", "tiny", "the model to request (with --openai-url, one the engine serves)")
	gpu := fs.String("gpu", "cpu", "the hardware the engine runs on (catalog name)")
	requests := fs.Int("requests", 50, "request pairs (direct, then through Switchyard)")
	maxTokens := fs.Int("max-tokens", 16, "max_tokens of every request")
	asJSON := fs.Bool("json", false, "print the result as one JSON line last")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *requests < 1 || *maxTokens < 1 {
		return errors.New("--requests and --max-tokens must be >= 1")
	}
	engine := "openai-compatible server at " + *url
	if *url == "" {
		o, err := enginetest.Start(ctx, enginetest.Options{NumParallel: 1})
		if err != nil {
			return fmt.Errorf("bench engine: %w (or pass --openai-url of a running engine)", err)
		}
		defer o.Stop()
		if err := o.CreateTiny(ctx, *model, gguf.TinyOptions{Name: *model, Seed: 1}); err != nil {
			return err
		}
		*url = o.URL
		engine = "ollama " + enginetest.OllamaVersion + " (pinned, started here) serving a generated tiny model"
	}
	fleet, cat, err := engineFleet(ctx, "openai", *url, *gpu, *model)
	if err != nil {
		return err
	}
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	st, cl, err := benchStack(ctx, stack.Config{Fleet: fleet, Catalog: cat, Logger: quiet}, "bench-engine")
	if err != nil {
		return err
	}
	defer st.Close()
	direct := openai.New(*url, *model)
	zero := 0.0
	// Warm both paths: the engine loads the model, the bus its consumers.
	if _, err := direct.Generate(ctx, openai.Request{Prompt: "warm up", MaxTokens: 1}, nil); err != nil {
		return fmt.Errorf("bench engine: the engine does not answer: %w", err)
	}
	if r, err := cl.Do(ctx, "bench", &schemas.Request{ID: "bench-warm", Model: *model, Prompt: "warm up", MaxTokens: 1}); err != nil || r.Status != schemas.StatusOK {
		return fmt.Errorf("bench engine: Switchyard does not answer: %+v %v", r, err)
	}
	var dTTFT, sTTFT, addTTFT, dTotal, sTotal, addTotal []float64
	res := EngineBenchResult{Engine: engine, Model: *model, Requests: *requests, MaxTokens: *maxTokens, TokenCountsIdentical: true}
	for i := 0; i < *requests; i++ {
		prompt := fmt.Sprintf("Request %d of the engine benchmark: the same words both ways.", i)
		// The engine caches the last prompt it saw (llama.cpp's prompt
		// cache): compute this one once beforehand, so both sides of the
		// pair find it cached, and alternate which side goes first.
		if _, err := direct.Generate(ctx, openai.Request{Prompt: prompt, MaxTokens: 1}, nil); err != nil {
			return fmt.Errorf("bench engine: priming request %d: %w", i, err)
		}
		var d openai.Result
		var s viaSwitchyard
		sides := []func() error{
			func() (err error) {
				d, err = direct.Generate(ctx, openai.Request{Prompt: prompt, MaxTokens: *maxTokens, Temperature: &zero}, nil)
				return err
			},
			func() (err error) {
				s, err = throughSwitchyard(ctx, cl, fmt.Sprintf("bench-%d", i), *model, prompt, *maxTokens)
				return err
			},
		}
		if i%2 == 1 {
			sides[0], sides[1] = sides[1], sides[0]
		}
		for _, side := range sides {
			if err := side(); err != nil {
				return fmt.Errorf("bench engine: request pair %d: %w", i, err)
			}
		}
		if s.result.Usage.PromptTokens != d.PromptTokens || s.result.Usage.CompletionTokens != d.CompletionTokens {
			res.TokenCountsIdentical = false
		}
		res.PromptTokens, res.CompletionTokens = d.PromptTokens, d.CompletionTokens
		res.Simulated = res.Simulated || s.result.Simulated
		dTTFT, sTTFT = append(dTTFT, msOf(d.TTFT)), append(sTTFT, msOf(s.ttft))
		addTTFT = append(addTTFT, msOf(s.ttft-d.TTFT))
		dTotal, sTotal = append(dTotal, msOf(d.Total)), append(sTotal, msOf(s.total))
		addTotal = append(addTotal, msOf(s.total-d.Total))
	}
	res.DirectTTFTP50Ms, res.DirectTTFTP99Ms = stats.QuantileOf(dTTFT, 0.5), stats.QuantileOf(dTTFT, 0.99)
	res.SwitchyardTTFTP50Ms, res.SwitchyardTTFTP99Ms = stats.QuantileOf(sTTFT, 0.5), stats.QuantileOf(sTTFT, 0.99)
	res.AddedTTFTP50Ms, res.AddedTTFTP99Ms = stats.QuantileOf(addTTFT, 0.5), stats.QuantileOf(addTTFT, 0.99)
	res.DirectTotalP50Ms, res.SwitchyardTotalP50Ms = stats.QuantileOf(dTotal, 0.5), stats.QuantileOf(sTotal, 0.5)
	res.AddedTotalP50Ms, res.AddedTotalP99Ms = stats.QuantileOf(addTotal, 0.5), stats.QuantileOf(addTotal, 0.99)
	fmt.Fprintf(stdout, "engine: %s, model %s, %d request pairs of %d tokens\n", engine, *model, *requests, *maxTokens)
	fmt.Fprintf(stdout, "TTFT   direct p50 %.2f ms p99 %.2f ms | through Switchyard p50 %.2f ms p99 %.2f ms | added p50 %.2f ms p99 %.2f ms\n",
		res.DirectTTFTP50Ms, res.DirectTTFTP99Ms, res.SwitchyardTTFTP50Ms, res.SwitchyardTTFTP99Ms, res.AddedTTFTP50Ms, res.AddedTTFTP99Ms)
	fmt.Fprintf(stdout, "total  direct p50 %.2f ms | through Switchyard p50 %.2f ms | added p50 %.2f ms p99 %.2f ms\n",
		res.DirectTotalP50Ms, res.SwitchyardTotalP50Ms, res.AddedTotalP50Ms, res.AddedTotalP99Ms)
	fmt.Fprintf(stdout, "token counts identical: %v (%d prompt, %d completion)\n", res.TokenCountsIdentical, res.PromptTokens, res.CompletionTokens)
	if *asJSON {
		return json.NewEncoder(stdout).Encode(res)
	}
	return nil
}

// viaSwitchyard is one request's client-side timings through the system.
type viaSwitchyard struct {
	ttft, total time.Duration
	result      schemas.Result
}

// throughSwitchyard submits one streamed request and times, from the
// submit, its first token chunk on sy.tok and its final result.
func throughSwitchyard(ctx context.Context, cl *client.Client, id, model, prompt string, maxTokens int) (viaSwitchyard, error) {
	var (
		mu    sync.Mutex
		first time.Time
		ended = make(chan struct{})
	)
	sub, err := cl.Stream("bench", id, func(c schemas.TokenChunk) {
		mu.Lock()
		defer mu.Unlock()
		if first.IsZero() && c.Text != "" {
			first = time.Now()
		}
		if c.Done && ended != nil {
			close(ended)
			ended = nil
		}
	})
	if err != nil {
		return viaSwitchyard{}, err
	}
	defer sub.Unsubscribe()
	zero := 0.0
	start := time.Now()
	r, err := cl.Do(ctx, "bench", &schemas.Request{ID: id, Model: model, Prompt: prompt, MaxTokens: maxTokens, Temperature: &zero, Stream: true})
	total := time.Since(start)
	if err != nil {
		return viaSwitchyard{}, err
	}
	if r.Status != schemas.StatusOK {
		return viaSwitchyard{}, fmt.Errorf("status %s: %+v", r.Status, r.Error)
	}
	// The stream's end marker goes out before the result, but the two
	// arrive on different subscriptions whose handlers run apart: on a
	// busy machine the result can be read before the token handler has
	// run. The first token's time was taken on arrival; wait for the
	// stream to end before reading it.
	mu.Lock()
	wait := ended
	mu.Unlock()
	if wait != nil {
		select {
		case <-wait:
		case <-time.After(streamEndWait):
		case <-ctx.Done():
			return viaSwitchyard{}, ctx.Err()
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if first.IsZero() {
		return viaSwitchyard{}, errors.New("no token chunk arrived before the result")
	}
	return viaSwitchyard{ttft: first.Sub(start), total: total, result: r}, nil
}

// streamEndWait bounds how long after its result a request's token
// stream may still be arriving.
const streamEndWait = 5 * time.Second

func msOf(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// wantsPrefix reports whether the arguments ask for --prefix (as -prefix,
// --prefix or --prefix=true): that mode has flags of its own
// (bench_engine_prefix.go). bench engine takes no positional arguments,
// so every argument before "--" is a flag or a flag's value.
func wantsPrefix(args []string) bool {
	for _, a := range args {
		if a == "--" {
			return false
		}
		if !strings.HasPrefix(a, "-") {
			continue // a flag's value, e.g. --model prefix
		}
		name, val, hasVal := strings.Cut(strings.TrimLeft(a, "-"), "=")
		if name == "prefix" {
			on, err := strconv.ParseBool(val)
			return !hasVal || (err == nil && on)
		}
	}
	return false
}
