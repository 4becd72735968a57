package main

import (
	"flag"
	"fmt"
	"net/url"

	"github.com/switchyard-ai/switchyard/internal/adapter/cachestore"
	"github.com/switchyard-ai/switchyard/internal/core/cache"
)

// EmbedAPIKeyEnv names the environment variable holding the API key sent
// to --cache-embed-url: a key on the command line would show in ps and in
// shell history.
const EmbedAPIKeyEnv = "SWITCHYARD_EMBED_API_KEY"

// cacheEmbedFlags are the admitter's semantic-cache embedder flags.
type cacheEmbedFlags struct {
	url, model string
}

func (c *cacheEmbedFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&c.url, "cache-embed-url", "", "OpenAI-compatible embeddings server for the semantic cache (OpenAI, vLLM, TEI, llama.cpp), e.g. http://tei:8080; POSTs /v1/embeddings, API key from $"+EmbedAPIKeyEnv+"; needs --cache-embed-model (default: the built-in lexical n-gram embedder)")
	fs.StringVar(&c.model, "cache-embed-model", "", "embedding model name sent to --cache-embed-url, e.g. BAAI/bge-small-en-v1.5")
}

// embedder is the semantic cache's embedder the flags ask for: nil (the
// store's built-in NGramEmbedder) when neither is set, a
// cachestore.OpenAIEmbedder when both are, with the key getenv gives.
func (c *cacheEmbedFlags) embedder(getenv func(string) string) (cache.Embedder, error) {
	switch {
	case c.url == "" && c.model == "":
		return nil, nil
	case c.url == "":
		return nil, fmt.Errorf("admitter: --cache-embed-model %q needs --cache-embed-url, the server that runs it", c.model)
	case c.model == "":
		return nil, fmt.Errorf("admitter: --cache-embed-url %q needs --cache-embed-model, the model it embeds with", c.url)
	}
	u, err := url.Parse(c.url)
	if err != nil {
		return nil, fmt.Errorf("admitter: --cache-embed-url: %w", err)
	}
	if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("admitter: --cache-embed-url %q: want an http:// or https:// server root, e.g. http://tei:8080", c.url)
	}
	return &cachestore.OpenAIEmbedder{BaseURL: c.url, Model: c.model, APIKey: getenv(EmbedAPIKeyEnv)}, nil
}
