package worker

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/switchyard-ai/switchyard/internal/core/catalog"
	"github.com/switchyard-ai/switchyard/internal/testkit/bustest"
	"github.com/switchyard-ai/switchyard/schemas"
	"github.com/switchyard-ai/switchyard/subjects"
)

// fakeVLLM plays one vLLM instance of a P/D pair on /v1/completions: the
// prefill instance answers the documented non-streaming prefill response
// (testdata of the openai backend), the decode instance streams an answer
// from its own first token. It records what each request carried.
type fakeVLLM struct {
	*httptest.Server
	mu     sync.Mutex
	bodies []map[string]any
	ids    []string
}

func (f *fakeVLLM) seen() ([]map[string]any, []string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]map[string]any(nil), f.bodies...), append([]string(nil), f.ids...)
}

func openaiFixture(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", "internal", "adapter", "backend", "openai", "testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// decodeWords is the decode instance's streamed answer: its own first
// token (vLLM's decode samples it again from the pulled KV) and the rest.
func decodeWords(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf(" d%d", i)
	}
	return out
}

func startFakeVLLM(t *testing.T, prefill bool) *fakeVLLM {
	t.Helper()
	withParams := openaiFixture(t, "vllm_prefill_response_completions.json")
	noConnector := openaiFixture(t, "vllm_prefill_response_no_connector.json")
	f := &fakeVLLM{}
	f.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/v1/completions" {
			http.NotFound(w, r)
			return
		}
		raw, _ := io.ReadAll(r.Body)
		var body map[string]any
		if err := json.Unmarshal(raw, &body); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		f.mu.Lock()
		f.bodies = append(f.bodies, body)
		f.ids = append(f.ids, r.Header.Get("X-Request-Id"))
		f.mu.Unlock()
		prompt, _ := body["prompt"].(string)
		if prefill {
			w.Header().Set("Content-Type", "application/json")
			switch {
			case strings.Contains(prompt, "no connector"):
				w.Write(noConnector)
			case strings.Contains(prompt, "say stop"):
				// The one token is EOS: vLLM keeps no KV, sends no params.
				fmt.Fprint(w, `{"object":"text_completion","choices":[{"index":0,"text":".","finish_reason":"stop"}],"usage":{"prompt_tokens":5,"completion_tokens":1},"kv_transfer_params":null}`)
			default:
				w.Write(withParams)
			}
			return
		}
		n := int(body["max_tokens"].(float64))
		w.Header().Set("Content-Type", "text/event-stream")
		fl := w.(http.Flusher)
		for _, word := range decodeWords(n) {
			fmt.Fprintf(w, "data: {\"choices\":[{\"text\":%q}]}\n\n", word)
			fl.Flush()
			time.Sleep(2 * time.Millisecond)
		}
		fmt.Fprintf(w, "data: {\"choices\":[{\"text\":\"\",\"finish_reason\":\"length\"}],\"usage\":{\"prompt_tokens\":5,\"completion_tokens\":%d,\"prompt_tokens_details\":{\"cached_tokens\":5}}}\n\n", n)
		fmt.Fprint(w, "data: [DONE]\n\n")
		fl.Flush()
	}))
	t.Cleanup(f.Close)
	return f
}

// TestTwoLegsAtRealEngines runs a split request's legs on two openai-backend
// workers in front of httptest servers playing vLLM's NixlConnector prefill
// and decode instances (the documented shapes; no live vLLM): the prefill
// worker sends the request as the aggregated path would, with max_tokens 1
// and do_remote_decode, streams nothing, stores a handle carrying the
// response's kv_transfer_params and its own leg's cost, and keeps its
// dispatch unacked until the decode worker's handshake pull; the decode
// worker sends the same request with those params and the same
// X-Request-Id, streams the decode instance's whole answer from chunk 1
// and publishes the one result, both legs' GPU time each at its own GPU's
// price. Then the errors: a prefill instance without a KV connector, a
// prefill that stopped on its one token (answered from the prefill
// worker), and a handle without engine params at the real decode worker
// (a failed handle, so the router re-places).
func TestTwoLegsAtRealEngines(t *testing.T) {
	env := bustest.StartProvisioned(t, subjects.StreamOptions{})
	ctx := context.Background()
	pre, dec := startFakeVLLM(t, true), startFakeVLLM(t, false)
	// Two generations, two prices: the result must price each leg at its own.
	startWorker(t, env, Config{ID: "rp1", GPU: "h100", Model: "llama-3.1-8b", Backend: "openai", OpenAIURL: pre.URL, Role: schemas.RolePrefill, Link: "ib-ndr"})
	startWorker(t, env, Config{ID: "rd1", GPU: "a100-80g", Model: "llama-3.1-8b", Backend: "openai", OpenAIURL: dec.URL, Role: schemas.RoleDecode, Link: "ib-ndr"})
	h := watchLegs(t, env.NC)

	const id, tenant, model, maxTokens = "real-split-1", "acme", "llama-3.1-8b", 24
	const prompt = "The capital of France is"
	now := time.Now()
	adm := schemas.Admitted{Tenant: tenant, Model: model, PromptTokens: 5, SubmittedAt: now, Deadline: now.Add(time.Minute),
		Priority: schemas.PriorityInteractive,
		Request:  schemas.Request{ID: id, Model: model, Prompt: prompt, MaxTokens: maxTokens, Stream: true}}
	publishDispatch(t, env.JS, schemas.Dispatch{Admitted: adm, WorkerID: "rp1", PlacedAt: now, Phase: schemas.PhasePrefill, DecodeWorker: "rd1"}, id+"-a0-p")
	h.wait(t, "KV handle", func() bool { return len(h.handles) == 1 })
	kv := h.handles[0]
	var fixture struct {
		KV map[string]any `json:"kv_transfer_params"`
	}
	if err := json.Unmarshal(openaiFixture(t, "vllm_prefill_response_completions.json"), &fixture); err != nil {
		t.Fatal(err)
	}
	if kv.Worker != "rp1" || kv.DecodeWorker != "rd1" || !reflect.DeepEqual(kv.Engine, fixture.KV) || !reflect.DeepEqual(kv.BlockIDs, []int{17, 18, 42}) ||
		kv.Blocks != 3 || kv.PromptTokens != 5 || kv.FirstToken != " Paris" || kv.GPUSeconds <= 0 || kv.CostUSD <= 0 || kv.Failed != nil {
		t.Fatalf("handle %+v", kv)
	}
	bodies, ids := pre.seen()
	if len(bodies) != 1 || ids[0] != id+"-a0" || bodies[0]["prompt"] != prompt || bodies[0]["max_tokens"] != 1.0 || bodies[0]["stream"] != false ||
		bodies[0]["kv_transfer_params"].(map[string]any)["do_remote_decode"] != true {
		t.Fatalf("prefill instance got %v (X-Request-Id %v)", bodies, ids)
	}
	time.Sleep(100 * time.Millisecond)
	h.mu.Lock()
	if len(h.chunks) != 0 || len(h.results) != 0 {
		t.Fatalf("after the prefill leg: chunks %+v, results %d; want none (the decode instance streams the whole answer)", h.chunks, len(h.results))
	}
	h.mu.Unlock()
	if n := ackPending(ctx, t, env.JS, "rp1"); n != 1 {
		t.Fatalf("prefill dispatch: %d unacked, want 1 until the decode worker takes the request", n)
	}

	publishDispatch(t, env.JS, schemas.Dispatch{Admitted: adm, WorkerID: "rd1", PlacedAt: time.Now(), Phase: schemas.PhaseDecode,
		Handoff: &kv, TransferSeconds: 5}, id+"-a0-d")
	h.wait(t, "final result", func() bool { return len(h.results) == 1 })
	time.Sleep(100 * time.Millisecond)
	res := h.results[0]
	want := strings.Join(decodeWords(maxTokens), "")
	h.mu.Lock()
	var text strings.Builder
	for i, c := range h.chunks {
		if c.Seq != uint64(i+1) {
			t.Fatalf("chunk %d has seq %d: the decode leg streams from chunk 1", i+1, c.Seq)
		}
		text.WriteString(c.Text)
	}
	last := h.chunks[len(h.chunks)-1]
	h.mu.Unlock()
	if res.Status != schemas.StatusOK || res.WorkerID != "rd1" || res.Simulated || res.Text != want || text.String() != want || !last.Done ||
		res.Usage.CompletionTokens != maxTokens || res.Usage.CachedTokens != kv.CachedTokens {
		t.Fatalf("result %+v (%+v); streamed %q (done %v); want the decode instance's whole answer %q", res, res.Error, text.String(), last.Done, want)
	}
	bodies, ids = dec.seen()
	if len(bodies) != 1 || ids[0] != id+"-a0" || bodies[0]["prompt"] != prompt || bodies[0]["max_tokens"] != float64(maxTokens) ||
		bodies[0]["stream"] != true || !reflect.DeepEqual(bodies[0]["kv_transfer_params"], fixture.KV) {
		t.Fatalf("decode instance got %v (X-Request-Id %v); want the same request with the prefill's kv_transfer_params and id %s-a0", bodies, ids, id)
	}
	// Each leg at its own GPU's price: the decode leg's share at the
	// A100's, the prefill's as its worker priced it (the H100's).
	cat := catalog.Default()
	a100, ok := cat.GPU("a100-80g")
	if !ok {
		t.Fatal("no a100-80g in the catalog")
	}
	h100, _ := cat.GPU("h100")
	if math.Abs(kv.CostUSD-kv.GPUSeconds/3600*h100.PricePerHour) > 1e-12 {
		t.Fatalf("handle cost $%.9f for %.4f GPU-s: want the prefill worker's H100 rate", kv.CostUSD, kv.GPUSeconds)
	}
	own := res.GPUSeconds - kv.GPUSeconds
	if wantCost := own/3600*a100.PricePerHour + kv.CostUSD; own <= 0 || math.Abs(res.CostUSD-wantCost) > 1e-12 {
		t.Fatalf("cost $%.9f over %.4f GPU-s (prefill %.4f GPU-s, $%.9f); want the decode leg at the A100's rate plus the handle's $%.9f",
			res.CostUSD, res.GPUSeconds, kv.GPUSeconds, kv.CostUSD, wantCost)
	}
	for _, w := range []string{"rp1", "rd1"} {
		if n := ackPending(ctx, t, env.JS, w); n != 0 {
			t.Fatalf("%s: %d dispatches unacked after the result", w, n)
		}
	}
	t.Logf("real-engine split: ttft %.1f ms, itl %.2f ms, gpu %.4f s (prefill %.4f s), cost $%.9f (prefill $%.9f)",
		res.Timing.TTFTMs, res.Timing.ITLMs, res.GPUSeconds, kv.GPUSeconds, res.CostUSD, kv.CostUSD)

	// A prefill instance without a KV connector: an error result naming
	// the flag, no handle.
	adm2 := adm
	adm2.Request.ID, adm2.Request.Prompt = "real-split-2", "no connector here"
	publishDispatch(t, env.JS, schemas.Dispatch{Admitted: adm2, WorkerID: "rp1", PlacedAt: time.Now(), Phase: schemas.PhasePrefill, DecodeWorker: "rd1"}, "real-split-2-a0-p")
	h.wait(t, "no-connector error", func() bool { return len(h.results) == 2 })
	if r := h.results[1]; r.ID != "real-split-2" || r.Status == schemas.StatusOK || r.Error == nil || r.Error.Code != schemas.CodeBackendError ||
		!strings.Contains(r.Error.Message, "--kv-transfer-config") || r.WorkerID != "rp1" {
		t.Fatalf("no-connector result %+v (%+v)", r, r.Error)
	}

	// The prefill's one token was a stop: the request is answered from the
	// prefill worker, its token streamed (it is the whole answer), nothing
	// handed off.
	adm3 := adm
	adm3.Request.ID, adm3.Request.Prompt = "real-split-3", "say stop"
	publishDispatch(t, env.JS, schemas.Dispatch{Admitted: adm3, WorkerID: "rp1", PlacedAt: time.Now(), Phase: schemas.PhasePrefill, DecodeWorker: "rd1"}, "real-split-3-a0-p")
	h.wait(t, "answer from the prefill", func() bool { return len(h.results) == 3 })
	time.Sleep(100 * time.Millisecond)
	if r := h.results[2]; r.ID != "real-split-3" || r.Status != schemas.StatusOK || r.Text != "." || r.FinishReason != "stop" || r.WorkerID != "rp1" || r.CostUSD <= 0 {
		t.Fatalf("stopped prefill's result %+v (%+v)", r, r.Error)
	}
	h.mu.Lock()
	var stopChunks []schemas.TokenChunk
	for _, c := range h.chunks {
		if c.ID == "real-split-3" {
			stopChunks = append(stopChunks, c)
		}
	}
	handles := len(h.handles)
	h.mu.Unlock()
	if len(stopChunks) != 2 || stopChunks[0].Seq != 1 || stopChunks[0].Text != "." || !stopChunks[1].Done || handles != 1 {
		t.Fatalf("stopped prefill streamed %+v and left %d handles; want its token as chunk 1, the end marker, and no new handle", stopChunks, handles)
	}

	// A simulated prefill worker's handle (no engine params) at the real
	// decode worker: a failed handle for re-placement, the engine never
	// asked, the dispatch acked once the report is stored.
	simKV := schemas.KVHandle{V: schemas.Version, RequestID: "real-split-4", Tenant: tenant, Worker: "sim-p", PromptTokens: 5, Blocks: 1,
		FirstToken: " x", FirstTokenAt: time.Now(), ExpiresAt: time.Now().Add(time.Minute)}
	adm4 := adm
	adm4.Request.ID = "real-split-4"
	publishDispatch(t, env.JS, schemas.Dispatch{Admitted: adm4, WorkerID: "rd1", PlacedAt: time.Now(), Phase: schemas.PhaseDecode, Handoff: &simKV}, "real-split-4-a0-d")
	h.wait(t, "failed handle", func() bool { return len(h.handles) == 2 })
	if f := h.handles[1]; f.Failed == nil || f.Failed.Code != schemas.CodeWorkerFailed || !strings.HasPrefix(f.Failed.Message, PullNoEngineParams) ||
		f.DecodeWorker != "rd1" || f.Worker != "sim-p" {
		t.Fatalf("failed handle %+v (failed %+v)", f, f.Failed)
	}
	time.Sleep(100 * time.Millisecond)
	if n := ackPending(ctx, t, env.JS, "rd1"); n != 0 {
		t.Fatalf("rd1: %d dispatches unacked after the failed handle was stored", n)
	}
	if bodies, _ := dec.seen(); len(bodies) != 1 {
		t.Fatalf("the decode instance was sent %d requests, want only the first split's", len(bodies))
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.results) != 3 {
		t.Fatalf("%d results, want 3: a failed handle is no final result", len(h.results))
	}
}
