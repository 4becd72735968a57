package openai

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/switchyard-ai/switchyard/schemas"
)

// These tests play vLLM's prefill and decode instances with the shapes in
// testdata (README.md there names the vLLM page each follows). They are
// recorded-shape tests: nothing here has talked to a live vLLM.

func fixture(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func decodeJSON(t *testing.T, b []byte) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatalf("%s: %v", b, err)
	}
	return m
}

// sameJSON fails the test when got and want (JSON objects) differ, naming
// the first differing keys so a wrong field is plain.
func sameJSON(t *testing.T, what string, got, want map[string]any) {
	t.Helper()
	if reflect.DeepEqual(got, want) {
		return
	}
	for k, w := range want {
		if g, ok := got[k]; !ok || !reflect.DeepEqual(g, w) {
			t.Errorf("%s: %s = %v (present %v), want %v", what, k, g, ok, w)
		}
	}
	for k, g := range got {
		if _, ok := want[k]; !ok {
			t.Errorf("%s: unexpected %s = %v", what, k, g)
		}
	}
}

// vllmLeg plays one vLLM instance: it checks each body it receives against
// want and the X-Request-Id against id, then answers with answer.
func vllmLeg(t *testing.T, want map[string]any, id string, answer func(w http.ResponseWriter, chat bool)) (*httptest.Server, *int) {
	calls := 0
	h := func(w http.ResponseWriter, r *http.Request) {
		calls++
		var got map[string]any
		if err := json.NewDecoder(r.Body).Decode(&got); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		sameJSON(t, r.URL.Path+" body", got, want)
		if r.Header.Get("X-Request-Id") != id {
			t.Errorf("X-Request-Id %q, want %q", r.Header.Get("X-Request-Id"), id)
		}
		answer(w, r.URL.Path == "/v1/chat/completions")
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/v1/completions", h)
	mux.HandleFunc("/v1/chat/completions", h)
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return srv, &calls
}

// streamPieces answers as vLLM's streaming endpoints do.
func streamPieces(pieces ...string) func(http.ResponseWriter, bool) {
	return func(w http.ResponseWriter, chat bool) {
		w.Header().Set("Content-Type", "text/event-stream")
		for _, p := range pieces {
			if chat {
				fmt.Fprintf(w, "data: {\"object\":\"chat.completion.chunk\",\"choices\":[{\"index\":0,\"delta\":{\"content\":%q},\"finish_reason\":null}]}\n\n", p)
			} else {
				fmt.Fprintf(w, "data: {\"object\":\"text_completion\",\"choices\":[{\"index\":0,\"text\":%q,\"finish_reason\":null}]}\n\n", p)
			}
		}
		fmt.Fprint(w, "data: {\"choices\":[{\"index\":0,\"text\":\"\",\"finish_reason\":\"length\"}]}\n\n")
		fmt.Fprint(w, "data: [DONE]\n\n")
	}
}

func answerWith(body []byte) func(http.ResponseWriter, bool) {
	return func(w http.ResponseWriter, _ bool) {
		w.Header().Set("Content-Type", "application/json")
		w.Write(body)
	}
}

// TestDisaggregatedLegs runs both legs end to end against recorded shapes:
// the prefill instance must receive the toy proxy's prefill body, its
// kv_transfer_params must come back on the handle, survive the bus (JSON
// round trip), and reach the decode instance unchanged in the original
// request.
func TestDisaggregatedLegs(t *testing.T) {
	zero := 0.0
	for _, tc := range []struct {
		name                          string
		req                           Request
		prefillReq, prefillResp, dReq string
		first                         string
		blocks                        []int
		promptTokens                  int
	}{
		{"completions", Request{Prompt: "The capital of France is", MaxTokens: 64, Temperature: &zero},
			"vllm_prefill_request_completions.json", "vllm_prefill_response_completions.json", "vllm_decode_request_completions.json",
			" Paris", []int{17, 18, 42}, 5},
		{"chat, older parameter set", Request{Messages: []schemas.Message{{Role: "user", Content: "Name the capital of France."}}, MaxTokens: 64, Temperature: &zero},
			"vllm_prefill_request_chat.json", "vllm_prefill_response_chat.json", "vllm_decode_request_chat.json",
			"Paris", []int{3}, 14},
	} {
		t.Run(tc.name, func(t *testing.T) {
			const id = "sy-req-7"
			tc.req.RequestID = id
			respBody := fixture(t, tc.prefillResp)
			pSrv, pCalls := vllmLeg(t, decodeJSON(t, fixture(t, tc.prefillReq)), id, answerWith(respBody))
			dSrv, dCalls := vllmLeg(t, decodeJSON(t, fixture(t, tc.dReq)), id, streamPieces(" Paris", "."))

			p, err := New(pSrv.URL, "Qwen/Qwen3-0.6B").Prefill(context.Background(), tc.req)
			if err != nil {
				t.Fatal(err)
			}
			if p.Done || p.Text != tc.first || p.FinishReason != "length" || p.CompletionTokens != 1 || p.PromptTokens != tc.promptTokens {
				t.Errorf("prefill result %+v", p.Result)
			}
			sameJSON(t, "handle engine params", p.Engine, decodeJSON(t, respBody)["kv_transfer_params"].(map[string]any))
			if !reflect.DeepEqual(p.BlockIDs, tc.blocks) {
				t.Errorf("block ids %v, want %v", p.BlockIDs, tc.blocks)
			}

			// The handle crosses the bus as JSON between the two workers.
			buf, err := json.Marshal(schemas.KVHandle{RequestID: id, Worker: "p0", Engine: p.Engine, BlockIDs: p.BlockIDs})
			if err != nil {
				t.Fatal(err)
			}
			var h schemas.KVHandle
			if err := json.Unmarshal(buf, &h); err != nil {
				t.Fatal(err)
			}
			params, err := DecodeParams(&h)
			if err != nil {
				t.Fatal(err)
			}
			dreq := tc.req
			dreq.KVTransferParams = params
			res, err := New(dSrv.URL, "Qwen/Qwen3-0.6B").Generate(context.Background(), dreq, nil)
			if err != nil {
				t.Fatal(err)
			}
			if res.Text != " Paris." {
				t.Errorf("decode text %q", res.Text)
			}
			if *pCalls != 1 || *dCalls != 1 {
				t.Errorf("prefill calls %d, decode calls %d", *pCalls, *dCalls)
			}
		})
	}
}

func TestParseTransferParams(t *testing.T) {
	for _, tc := range []struct {
		name   string
		body   string
		keys   []string // present in the map
		blocks []int
		err    error // errors.Is target; nil: no error
		anyErr bool
	}{
		{"current NixlConnector", string(fixture(t, "vllm_prefill_response_completions.json")),
			[]string{"do_remote_prefill", "do_remote_decode", "remote_block_ids", "remote_engine_id", "remote_request_id", "remote_host", "remote_port", "tp_size"},
			[]int{17, 18, 42}, nil, false},
		{"older NixlConnector", string(fixture(t, "vllm_prefill_response_chat.json")),
			[]string{"do_remote_prefill", "remote_block_ids", "remote_engine_id", "remote_host", "remote_port"}, []int{3}, nil, false},
		{"per-group block ids pass through, no BlockIDs", `{"kv_transfer_params":{"do_remote_prefill":true,"remote_block_ids":[[1,2],[7]]}}`,
			[]string{"remote_block_ids"}, nil, nil, false},
		{"unknown fields kept", `{"kv_transfer_params":{"do_remote_prefill":true,"remote_block_ids":[1],"future_field":{"x":1}}}`,
			[]string{"future_field"}, []int{1}, nil, false},
		{"non-integer block ids", `{"kv_transfer_params":{"do_remote_prefill":true,"remote_block_ids":[1.5,"a"]}}`,
			[]string{"remote_block_ids"}, nil, nil, false},
		{"no connector: null", string(fixture(t, "vllm_prefill_response_no_connector.json")), nil, nil, ErrNoTransferParams, true},
		{"no connector: absent", `{"choices":[{"text":"x","finish_reason":"length"}]}`, nil, nil, ErrNoTransferParams, true},
		{"empty object", `{"kv_transfer_params":{}}`, nil, nil, ErrNoTransferParams, true},
		{"not an object", `{"kv_transfer_params":[1,2]}`, nil, nil, nil, true},
		{"not JSON", `data: {"choices":[]}`, nil, nil, nil, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			params, blocks, err := ParseTransferParams([]byte(tc.body))
			if (err != nil) != tc.anyErr || (tc.err != nil && !errors.Is(err, tc.err)) {
				t.Fatalf("err = %v", err)
			}
			for _, k := range tc.keys {
				if _, ok := params[k]; !ok {
					t.Errorf("%s missing from %v", k, params)
				}
			}
			if !reflect.DeepEqual(blocks, tc.blocks) {
				t.Errorf("blocks %v, want %v", blocks, tc.blocks)
			}
		})
	}
}

func TestDecodeParamsRefuses(t *testing.T) {
	for _, tc := range []struct {
		name string
		h    *schemas.KVHandle
		want string // in the message
	}{
		{"no handle", nil, "without a handoff"},
		{"simulated prefill worker's handle", &schemas.KVHandle{RequestID: "r1", Worker: "sim-3", Blocks: 4}, "sim-3"},
		{"params that would prefill again", &schemas.KVHandle{RequestID: "r1", Worker: "p0", Engine: map[string]any{"do_remote_prefill": false}}, "do_remote_prefill"},
		{"do_remote_prefill missing", &schemas.KVHandle{RequestID: "r1", Worker: "p0", Engine: map[string]any{"remote_host": "h"}}, "do_remote_prefill"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := DecodeParams(tc.h)
			if !errors.Is(err, ErrNoEngineParams) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("err = %v, want ErrNoEngineParams naming %q", err, tc.want)
			}
		})
	}
	h := &schemas.KVHandle{Engine: map[string]any{"do_remote_prefill": true, "remote_port": 5600.0}}
	p, err := DecodeParams(h)
	if err != nil {
		t.Fatal(err)
	}
	p["remote_port"] = 1
	if h.Engine["remote_port"] != 5600.0 {
		t.Error("DecodeParams aliases the handle's map")
	}
}

// TestPrefillFailures: what the worker gets when the prefill instance is not
// set up for P/D, refuses, or finishes the request itself.
func TestPrefillFailures(t *testing.T) {
	noConn := fixture(t, "vllm_prefill_response_no_connector.json")
	stopped := []byte(strings.Replace(string(noConn), `"finish_reason": "length"`, `"finish_reason": "stop"`, 1))
	for _, tc := range []struct {
		name   string
		status int
		body   []byte
		done   bool
		is     error
		msg    string
	}{
		{"no KV connector", 200, noConn, false, ErrNoTransferParams, "--kv-transfer-config"},
		{"stopped on its first token", 200, stopped, true, nil, ""},
		{"engine error", 400, []byte(`{"object":"error","message":"max_tokens too large","code":400}`), false, nil, "400"},
		{"not JSON", 200, []byte("<html>"), false, nil, "bad response"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.WriteHeader(tc.status)
				w.Write(tc.body)
			}))
			defer srv.Close()
			p, err := New(srv.URL, "m").Prefill(context.Background(), Request{Prompt: "x", MaxTokens: 8})
			if tc.msg == "" {
				if err != nil || p.Done != tc.done || p.Text != " Paris" {
					t.Errorf("prefilled %+v err %v", p, err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.msg) || (tc.is != nil && !errors.Is(err, tc.is)) {
				t.Errorf("err = %v, want one naming %q", err, tc.msg)
			}
		})
	}
}

// TestPrefillRequestOverrides: a caller's own kv_transfer_params win over
// PrefillParams (another connector's), and the client's max_tokens and
// streaming never reach the prefill instance.
func TestPrefillRequestOverrides(t *testing.T) {
	var got map[string]any
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		json.NewDecoder(r.Body).Decode(&got)
		w.Write(fixture(t, "vllm_prefill_response_completions.json"))
	}))
	defer srv.Close()
	own := map[string]any{"do_remote_decode": true, "connector_hint": "x"}
	if _, err := New(srv.URL, "m").Prefill(context.Background(), Request{Prompt: "x", MaxTokens: 500, KVTransferParams: own}); err != nil {
		t.Fatal(err)
	}
	if got["max_tokens"] != 1.0 || got["stream"] != false || got["stream_options"] != nil {
		t.Errorf("prefill body %v", got)
	}
	if kv, _ := got["kv_transfer_params"].(map[string]any); kv["connector_hint"] != "x" {
		t.Errorf("kv_transfer_params %v", got["kv_transfer_params"])
	}
	a, b := PrefillParams(), PrefillParams()
	a["remote_host"] = "mutated"
	if b["remote_host"] != nil {
		t.Error("PrefillParams shares its map")
	}
}
