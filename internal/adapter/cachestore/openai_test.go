package cachestore

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"
)

func TestOpenAIEmbedder(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/v1/embeddings" || r.Header.Get("Authorization") != "Bearer k" {
			http.Error(w, `{"error":{"message":"bad path or key"}}`, http.StatusUnauthorized)
			return
		}
		var req embedRequest
		_ = json.NewDecoder(r.Body).Decode(&req)
		type d struct {
			Index     int       `json:"index"`
			Embedding []float32 `json:"embedding"`
		}
		var out struct {
			Data []d `json:"data"`
		}
		for i := len(req.Input) - 1; i >= 0; i-- { // out of order on purpose
			out.Data = append(out.Data, d{Index: i, Embedding: []float32{float32(len(req.Input[i])), 1}})
		}
		_ = json.NewEncoder(w).Encode(out)
	}))
	defer srv.Close()
	e := &OpenAIEmbedder{BaseURL: srv.URL + "/v1", Model: "bge", APIKey: "k"}
	v, err := e.Embed(context.Background(), []string{"a", "bbb"})
	if err != nil || len(v) != 2 || v[0][0] != 1 || v[1][0] != 3 {
		t.Fatalf("%v %v", v, err)
	}
	bad := &OpenAIEmbedder{BaseURL: srv.URL, Model: "bge", APIKey: "wrong"}
	if _, err := bad.Embed(context.Background(), []string{"a"}); err == nil {
		t.Fatal("expected an error for HTTP 401")
	}
}
