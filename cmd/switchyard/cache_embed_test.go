package main

import (
	"flag"
	"io"
	"strings"
	"testing"

	"github.com/switchyard-ai/switchyard/internal/adapter/cachestore"
)

// The admitter's --cache-embed-url and --cache-embed-model choose the
// semantic cache's embedder: neither keeps the built-in n-gram one, both
// give the OpenAI-compatible embedder with the key from
// SWITCHYARD_EMBED_API_KEY, anything else is refused by name.
func TestCacheEmbedFlags(t *testing.T) {
	env := func(k string) string {
		if k == EmbedAPIKeyEnv {
			return "sk-test"
		}
		return ""
	}
	for _, tc := range []struct {
		name    string
		args    []string
		want    *cachestore.OpenAIEmbedder // nil: the built-in embedder
		wantErr string
	}{
		{name: "neither: built-in", args: nil},
		{name: "both", args: []string{"--cache-embed-url", "http://tei:8080", "--cache-embed-model", "bge"},
			want: &cachestore.OpenAIEmbedder{BaseURL: "http://tei:8080", Model: "bge", APIKey: "sk-test"}},
		{name: "with /v1", args: []string{"--cache-embed-url", "https://api.example.com/v1", "--cache-embed-model", "text-embedding-3-small"},
			want: &cachestore.OpenAIEmbedder{BaseURL: "https://api.example.com/v1", Model: "text-embedding-3-small", APIKey: "sk-test"}},
		{name: "url alone", args: []string{"--cache-embed-url", "http://tei:8080"}, wantErr: `--cache-embed-url "http://tei:8080" needs --cache-embed-model`},
		{name: "model alone", args: []string{"--cache-embed-model", "bge"}, wantErr: `--cache-embed-model "bge" needs --cache-embed-url`},
		{name: "no scheme", args: []string{"--cache-embed-url", "tei:8080", "--cache-embed-model", "bge"}, wantErr: "want an http:// or https:// server root"},
		{name: "other scheme", args: []string{"--cache-embed-url", "ftp://tei", "--cache-embed-model", "bge"}, wantErr: "want an http:// or https:// server root"},
		{name: "no host", args: []string{"--cache-embed-url", "http://", "--cache-embed-model", "bge"}, wantErr: "want an http:// or https:// server root"},
		{name: "unparsable", args: []string{"--cache-embed-url", "http://[::1", "--cache-embed-model", "bge"}, wantErr: "--cache-embed-url:"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fs := flag.NewFlagSet("admitter", flag.ContinueOnError)
			fs.SetOutput(io.Discard)
			var f cacheEmbedFlags
			f.register(fs)
			if err := fs.Parse(tc.args); err != nil {
				t.Fatal(err)
			}
			got, err := f.embedder(env)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want it to say %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if tc.want == nil {
				if got != nil {
					t.Fatalf("embedder %#v, want nil (the store's built-in n-gram embedder)", got)
				}
				return
			}
			e, ok := got.(*cachestore.OpenAIEmbedder)
			if !ok || *e != *tc.want {
				t.Fatalf("embedder %#v, want %#v", got, tc.want)
			}
		})
	}
}
