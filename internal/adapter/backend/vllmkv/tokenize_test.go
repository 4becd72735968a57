package vllmkv

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/switchyard-ai/switchyard/internal/adapter/backend/vllmkv/vllmkvtest"
	"github.com/switchyard-ai/switchyard/schemas"
)

// tokenizeServer answers POST /tokenize as vLLM does (TokenizeResponse:
// count, max_model_len, tokens), with ids given by answer, and records the
// request bodies.
func tokenizeServer(t *testing.T, answer func(body map[string]any) (int, string)) (*httptest.Server, *[]map[string]any) {
	var bodies []map[string]any
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/tokenize" || r.Method != http.MethodPost {
			http.NotFound(w, r)
			return
		}
		var body map[string]any
		if err := json.NewDecoder(r.Body).Decode(&body); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		bodies = append(bodies, body)
		code, out := answer(body)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(code)
		fmt.Fprint(w, out)
	}))
	t.Cleanup(srv.Close)
	return srv, &bodies
}

func tokensJSON(toks []uint32) string {
	b, _ := json.Marshal(map[string]any{"count": len(toks), "max_model_len": 131072, "tokens": toks})
	return string(b)
}

func TestTokenizerHashesMatchTheEnginesStoredBlocks(t *testing.T) {
	// The engine tokenized the prompt to these ids and cached its blocks.
	toks := prompt(20, 40)
	srv, bodies := tokenizeServer(t, func(map[string]any) (int, string) { return http.StatusOK, tokensJSON(toks) })
	tk := &Tokenizer{BaseURL: srv.URL + "/", Model: "meta-llama/Llama-3.1-8B-Instruct"}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()

	n, hashes, err := tk.BlockHashes(ctx, "", []schemas.Message{{Role: "user", Content: "hello"}})
	if err != nil {
		t.Fatal(err)
	}
	tr := NewTranslator()
	b, err := DecodeBatch(vllmkvtest.EncodeBatch(t, vllmkvtest.ShapeMap, 1, 0, vllmkvtest.Stored(nil, 16, toks[:32], uint64(1), uint64(2))))
	if err != nil {
		t.Fatal(err)
	}
	stored := tr.Apply(b)
	if n != 40 || len(hashes) != 2 || !slices.Equal(stored[0].Hashes, hashes) {
		t.Fatalf("prompt: %d tokens, hashes %x; engine stored %x", n, hashes, stored[0].Hashes)
	}
	chat := (*bodies)[0]
	if chat["model"] != tk.Model || chat["add_generation_prompt"] != true || chat["prompt"] != nil {
		t.Fatalf("chat tokenize request %v", chat)
	}
	if _, err := tk.Tokenize(ctx, "plain text", nil); err != nil {
		t.Fatal(err)
	}
	if plain := (*bodies)[1]; plain["prompt"] != "plain text" || plain["add_special_tokens"] != true || plain["messages"] != nil {
		t.Fatalf("completion tokenize request %v", plain)
	}
}

func TestTokenizerErrors(t *testing.T) {
	for _, tc := range []struct {
		name string
		code int
		body string
		want string
	}{
		{"server error", http.StatusBadRequest, `{"object":"error","message":"This model's maximum context length is 8192 tokens","type":"BadRequestError","code":400}`, "400 Bad Request: {\"object\":\"error\",\"message\":\"This model's maximum"},
		{"count mismatch", http.StatusOK, `{"count":3,"max_model_len":8192,"tokens":[1,2]}`, "counts 3 tokens but lists 2"},
		{"negative id", http.StatusOK, `{"count":1,"max_model_len":8192,"tokens":[-5]}`, "token 0 is -5"},
		{"not JSON", http.StatusOK, `<html>`, "undecodable answer"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv, _ := tokenizeServer(t, func(map[string]any) (int, string) { return tc.code, tc.body })
			_, err := (&Tokenizer{BaseURL: srv.URL, Model: "m"}).Tokenize(context.Background(), "x", nil)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want it to say %q", err, tc.want)
			}
		})
	}
}
