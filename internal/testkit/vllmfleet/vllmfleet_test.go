package vllmfleet

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/switchyard-ai/switchyard/internal/adapter/backend/vllmkv/vllmkvtest"
	"github.com/switchyard-ai/switchyard/internal/adapter/hftokenizer"
	"github.com/switchyard-ai/switchyard/internal/core/catalog"
	"github.com/switchyard-ai/switchyard/internal/core/perf"
	"github.com/switchyard-ai/switchyard/internal/core/routing"
	"github.com/switchyard-ai/switchyard/internal/core/tokens"
	"github.com/switchyard-ai/switchyard/internal/testkit/bustest"
	"github.com/switchyard-ai/switchyard/schemas"
	"github.com/switchyard-ai/switchyard/services/admitter"
	"github.com/switchyard-ai/switchyard/services/client"
	"github.com/switchyard-ai/switchyard/services/router"
	"github.com/switchyard-ai/switchyard/services/svc"
	"github.com/switchyard-ai/switchyard/services/worker"
	"github.com/switchyard-ai/switchyard/subjects"
)

const model = "llama-3.1-8b"

// vllmPage is a vLLM V1 /metrics page as vllm/v1/metrics/loggers.py names
// it: the scheduler's running and waiting requests, KV cache use, the
// prefix cache's counters and the cache config (27,153 blocks of 16).
func vllmPage(running, waiting int) string {
	const name = `engine="0",model_name="meta-llama/Llama-3.1-8B-Instruct"`
	return fmt.Sprintf(`# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{%[1]s} %[2]d.0
# HELP vllm:num_requests_waiting Number of requests waiting to be processed.
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{%[1]s} %[3]d.0
# HELP vllm:kv_cache_usage_perc KV-cache usage. 1 means 100 percent usage.
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{%[1]s} 0.125
# HELP vllm:prefix_cache_queries_total Prefix cache queries, in terms of number of queried tokens.
# TYPE vllm:prefix_cache_queries_total counter
vllm:prefix_cache_queries_total{%[1]s} 4096.0
# HELP vllm:prefix_cache_hits_total Prefix cache hits, in terms of number of cached tokens.
# TYPE vllm:prefix_cache_hits_total counter
vllm:prefix_cache_hits_total{%[1]s} 1024.0
# HELP vllm:cache_config_info Information of the LLMEngine CacheConfig
# TYPE vllm:cache_config_info gauge
vllm:cache_config_info{block_size="16",cache_dtype="auto",enable_prefix_caching="True",engine="0",num_gpu_blocks="27153"} 1.0
`, name, running, waiting)
}

// engine stands in for one vLLM server: /metrics with the queue it is
// told to report, streamed /v1/completions, and for a prompt whose token
// ids it has recorded, a BlockStored of its full blocks on its KV event
// publisher after the prefill — the ids and the engine's own block hashes
// (here SHA-256 over the parent hash and the ids, as vLLM's sha256 hashing
// is; Switchyard never sees these equal its own).
type engine struct {
	srv     *httptest.Server
	pub     *vllmkvtest.Publisher
	t       *testing.T
	waiting atomic.Int32
	served  atomic.Int32
	mu      sync.Mutex
	ids     map[string][]uint32 // prompt → the token ids this engine's tokenizer gives it
}

func startEngine(t *testing.T, recorded map[string][]uint32) *engine {
	e := &engine{t: t, ids: recorded, pub: vllmkvtest.Start(t, "tcp://127.0.0.1:0", "tcp://127.0.0.1:0", 1000)}
	e.srv = httptest.NewServer(http.HandlerFunc(e.serve))
	t.Cleanup(e.srv.Close)
	t.Cleanup(e.pub.Close)
	return e
}

func (e *engine) serve(w http.ResponseWriter, r *http.Request) {
	switch r.URL.Path {
	case "/metrics":
		fmt.Fprint(w, vllmPage(4, int(e.waiting.Load())))
	case "/v1/completions":
		var body struct {
			Prompt string `json:"prompt"`
		}
		if err := json.NewDecoder(r.Body).Decode(&body); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		e.served.Add(1)
		e.mu.Lock()
		ids := e.ids[body.Prompt]
		e.mu.Unlock()
		if n := len(ids) / 16 * 16; n > 0 {
			e.pub.Publish(vllmkvtest.EncodeBatch(e.t, vllmkvtest.ShapeMap, float64(time.Now().Unix()), 0,
				vllmkvtest.Stored(nil, 16, ids[:n], engineHashes(ids[:n])...)), false)
		}
		w.Header().Set("Content-Type", "text/event-stream")
		for _, tok := range []string{"Paris", " is", " the", " capital."} {
			fmt.Fprintf(w, "data: {\"id\":\"cmpl-1\",\"object\":\"text_completion\",\"model\":\"m\",\"choices\":[{\"index\":0,\"text\":%q,\"logprobs\":null,\"finish_reason\":null}]}\n\n", tok)
			w.(http.Flusher).Flush()
		}
		fmt.Fprint(w, "data: {\"id\":\"cmpl-1\",\"object\":\"text_completion\",\"model\":\"m\",\"choices\":[{\"index\":0,\"text\":\"\",\"logprobs\":null,\"finish_reason\":\"length\"}]}\n\n")
		fmt.Fprintf(w, "data: {\"id\":\"cmpl-1\",\"object\":\"text_completion\",\"model\":\"m\",\"choices\":[],\"usage\":{\"prompt_tokens\":%d,\"completion_tokens\":4,\"total_tokens\":%d}}\n\n", len(ids), len(ids)+4)
		fmt.Fprint(w, "data: [DONE]\n\n")
	default:
		http.NotFound(w, r)
	}
}

// engineHashes are the engine's block hashes for full blocks of ids.
func engineHashes(ids []uint32) []any {
	var out []any
	var parent [32]byte
	for i := 0; i+16 <= len(ids); i += 16 {
		h := sha256.New()
		h.Write(parent[:])
		for _, id := range ids[i : i+16] {
			binary.Write(h, binary.LittleEndian, id)
		}
		copy(parent[:], h.Sum(nil))
		out = append(out, binary.BigEndian.Uint64(parent[:8]))
	}
	return out
}

// fleet is the system under test.
type fleet struct {
	nc      *nats.Conn
	cl      *client.Client
	engines []*engine
	workers []string
}

func startFleet(t *testing.T, engines []*engine, tokenizers map[string]admitter.PromptTokenizer) *fleet {
	t.Helper()
	env := bustest.StartProvisioned(t, subjects.StreamOptions{})
	log := slog.New(slog.DiscardHandler)
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	t.Cleanup(func() { cancel(); wg.Wait() })
	run := func(name string, fn func(context.Context) error) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := fn(ctx); err != nil && ctx.Err() == nil {
				t.Errorf("%s: %v", name, err)
			}
		}()
	}
	shell := func(service, instance string) *svc.Shell {
		nc, err := env.Server.Connect(instance)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(nc.Close)
		sh, err := svc.New(service, instance, nc, log)
		if err != nil {
			t.Fatal(err)
		}
		if err := sh.UseLedger(); err != nil {
			t.Fatal(err)
		}
		return sh
	}
	cat := catalog.Default()
	run("admitter", admitter.New(shell("admitter", "admitter-1"), admitter.Config{Catalog: cat, Tokenizers: tokenizers,
		ModelKnown: func(m string) bool { _, ok := cat.Model(m); return ok }}).Run)
	cost := perf.NewPredictor(cat)
	pol, err := routing.PolicyNamed("switchyard", cat, cost)
	if err != nil {
		t.Fatal(err)
	}
	run("router", router.New(shell("router", "router-1"), router.Config{Cost: cost, Policy: pol, Catalog: cat, Lease: true}).Run)
	f := &fleet{nc: env.NC, engines: engines}
	for i, e := range engines {
		id := fmt.Sprintf("vllm-%d", i+1)
		ep, rp := e.pub.Endpoints()
		w, err := worker.New(shell("worker", id), worker.Config{ID: id, GPU: "h100", Model: model, Catalog: cat,
			Backend: "openai", OpenAIURL: e.srv.URL, HeartbeatInterval: 100 * time.Millisecond,
			VLLMKV: worker.VLLMKVConfig{Endpoint: ep, Replay: rp}})
		if err != nil {
			t.Fatal(err)
		}
		run(id, w.Run)
		f.workers = append(f.workers, id)
	}
	if f.cl, err = client.New(env.NC); err != nil {
		t.Fatal(err)
	}
	return f
}

// do sends a completion prompt through the system and returns its result.
func (f *fleet) do(t *testing.T, id, prompt string) schemas.Result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	res, err := f.cl.Do(ctx, "acme", &schemas.Request{ID: id, Model: model, Prompt: prompt, MaxTokens: 4})
	if err != nil {
		t.Fatalf("%s: %v", id, err)
	}
	if res.Status != schemas.StatusOK {
		t.Fatalf("%s: %s %+v", id, res.Status, res.Error)
	}
	return res
}

// TestPlacementFollowsTheEnginesQueue: with one vLLM engine reporting
// hundreds of requests waiting (another client's, or a worker's that
// bypasses Switchyard), new requests go to the engine that reports none;
// when the queues swap, so does placement. Recorded vLLM shapes, not a
// live vLLM.
func TestPlacementFollowsTheEnginesQueue(t *testing.T) {
	engines := []*engine{startEngine(t, nil), startEngine(t, nil)}
	f := startFleet(t, engines, nil)
	// The workers must have been heard, and the engines scraped, before the
	// first placement: a warm-up request on each queue shape.
	for phase, busy := range []int{0, 1} {
		idle := 1 - busy
		engines[busy].waiting.Store(100)
		engines[idle].waiting.Store(0)
		time.Sleep(500 * time.Millisecond) // several scrapes and heartbeats (100 ms)
		for i := range 6 {
			res := f.do(t, fmt.Sprintf("q%d-%d", phase, i), fmt.Sprintf("question %d of phase %d: what is the capital of France?", i, phase))
			if res.WorkerID != f.workers[idle] {
				t.Fatalf("phase %d: request %d placed on %s, whose engine reports %d waiting; %s's reports none",
					phase, i, res.WorkerID, engines[busy].waiting.Load(), f.workers[idle])
			}
		}
	}
}

// recordedPrompt is a prompt and the token ids the test tokenizer
// (hftokenizer/testdata/tokenizer.json, Llama 3's shape) gives it, written
// out as an engine would report them, not computed by the Go tokenizer:
// <|begin_of_text|>, hello Ġworld Ġthe Ġcat, then 11 × Ġ hello Ġworld Ġthe
// Ġcat (" hello" is Ġ then the merges' hello), and the trailing Ġ.
func recordedPrompt() (string, []uint32) {
	ids := []uint32{269, 259, 264, 266, 268}
	for range 11 {
		ids = append(ids, 32, 259, 264, 266, 268)
	}
	return strings.Repeat("hello world the cat ", 12), append(ids, 32)
}

// TestAdmittersBlockHashesEqualTheEngines: the admitter, tokenizing with
// the model's tokenizer.json, puts in the Admitted envelope the block
// hashes that the worker relays from the engine's BlockStored events for
// the same prompt (the engine's token ids, rehashed by vllmkv.Translator),
// so the router's prefix index and the admitter agree on a real engine's
// cache; the built-in tokenizer's hashes do not. Recorded vLLM shapes, not
// a live vLLM.
func TestAdmittersBlockHashesEqualTheEngines(t *testing.T) {
	prompt, ids := recordedPrompt()
	tk, err := hftokenizer.Load(filepath.Join("..", "..", "adapter", "hftokenizer", "testdata", "tokenizer.json"))
	if err != nil {
		t.Fatal(err)
	}
	e := startEngine(t, map[string][]uint32{prompt: ids})
	f := startFleet(t, []*engine{e}, map[string]admitter.PromptTokenizer{model: admitter.FileTokenizer{Tokenizer: tk}})

	var mu sync.Mutex
	var admittedHashes, engineStored []uint64
	admittedPrompts := 0
	sub, err := f.nc.Subscribe("sy.>", func(m *nats.Msg) {
		mu.Lock()
		defer mu.Unlock()
		switch {
		case m.Subject == subjects.KV(f.workers[0]):
			var ev schemas.KVEvent
			if svc.Decode(m.Header, m.Data, &ev) == nil && ev.Kind == schemas.KVStored {
				engineStored = append(engineStored, ev.Hashes...)
			}
		case strings.HasPrefix(m.Subject, "sy.admitted."):
			var adm schemas.Admitted
			if svc.Decode(m.Header, m.Data, &adm) == nil && adm.Request.Prompt == prompt {
				admittedHashes, admittedPrompts = adm.BlockHashes, adm.PromptTokens
			}
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	time.Sleep(500 * time.Millisecond) // the worker heard, its KV subscriber joined
	f.do(t, "shared-1", prompt)
	deadline := time.Now().Add(10 * time.Second)
	for {
		mu.Lock()
		got, adm, n := slices.Clone(engineStored), slices.Clone(admittedHashes), admittedPrompts
		mu.Unlock()
		if len(got) >= len(ids)/16 {
			if n != len(ids) || !slices.Equal(adm, got) {
				t.Fatalf("admitted %d tokens with block hashes %x; the engine stored %d tokens' blocks, relayed as %x", n, adm, len(ids), got)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the engine's stored blocks were not relayed: %x", got)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if builtin := tokens.BlockHashes(tokens.Tokenize(prompt)); slices.Equal(builtin[:min(len(builtin), len(admittedHashes))], admittedHashes) {
		t.Fatal("the built-in tokenizer gives the same hashes: the test cannot tell the tokenizers apart")
	}
}
