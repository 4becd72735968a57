package worker

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/switchyard-ai/switchyard/internal/core/catalog"
)

func TestLearnServedModel(t *testing.T) {
	ollama := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/api/show" {
			http.NotFound(w, r)
			return
		}
		fmt.Fprint(w, `{"details":{"family":"llama"},"model_info":{"general.architecture":"llama","general.parameter_count":119360,
"llama.attention.head_count":4,"llama.attention.head_count_kv":2,"llama.block_count":2,"llama.context_length":2048,
"llama.embedding_length":64,"llama.feed_forward_length":128,"llama.vocab_size":354}}`)
	}))
	defer ollama.Close()
	vllm := httptest.NewServer(http.NotFoundHandler())
	defer vllm.Close()
	ctx := context.Background()
	def := catalog.Default()

	cat, err := LearnServedModel(ctx, def, Config{ID: "w", Model: "tiny", Backend: "openai", OpenAIURL: ollama.URL})
	if err != nil {
		t.Fatal(err)
	}
	if m, ok := cat.Model("tiny"); !ok || !m.FromFleet || m.Params != 119360 {
		t.Fatalf("tiny = %+v, %v", m, ok)
	}
	if _, ok := def.Model("tiny"); ok {
		t.Fatal("learned into the shared default catalog")
	}
	for _, tc := range []struct {
		name string
		cfg  Config
		same bool
		want string
	}{
		{"a catalog model needs no engine", Config{Model: "llama-3.1-8b", Backend: "openai", OpenAIURL: "http://127.0.0.1:1"}, true, ""},
		{"the simulator needs a catalog model", Config{Model: "tiny"}, true, ""},
		{"an engine that cannot describe", Config{ID: "w", Model: "tiny", Backend: "openai", OpenAIURL: vllm.URL}, false, "--openai-model"},
		{"no URL", Config{ID: "w", Model: "tiny", Backend: "openai"}, false, "needs its server's URL"},
	} {
		got, err := LearnServedModel(ctx, def, tc.cfg)
		switch {
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%s: err = %v, want %q", tc.name, err, tc.want)
		case tc.want == "" && (err != nil || (tc.same && got != def)):
			t.Errorf("%s: got a new catalog or %v", tc.name, err)
		}
	}
}
