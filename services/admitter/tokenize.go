package admitter

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/switchyard-ai/switchyard/internal/adapter/backend/vllmkv"
	"github.com/switchyard-ai/switchyard/internal/adapter/hftokenizer"
	"github.com/switchyard-ai/switchyard/internal/core/tokens"
	"github.com/switchyard-ai/switchyard/schemas"
)

// PromptTokenizer gives the token ids a model's engine sees for a prompt,
// so the block hashes the admitter puts in the Admitted envelope equal the
// ones a worker relays from the engine's KV events (vllmkv.Translator
// hashes the engine's token ids with tokens.ChainHash, as
// tokens.BlockHashes does here).
type PromptTokenizer interface {
	Tokenize(ctx context.Context, prompt string, messages []schemas.Message) ([]uint32, error)
}

// FileTokenizer is a model's own Hugging Face tokenizer.json. A completion
// prompt gets the ids vLLM's completion endpoint gives it (special tokens
// added, so Llama's BOS leads). Chat messages are not run through the
// model's chat template (a Jinja program this admitter does not run): they
// are tokenized as Switchyard renders them (schemas.Request.PromptText), so
// their counts are the model's but their block hashes meet only the
// router's own bookings, not the engine's KV events; an engine tokenizer
// (EngineTokenizer) applies the template exactly.
type FileTokenizer struct{ *hftokenizer.Tokenizer }

// Tokenize implements PromptTokenizer.
func (f FileTokenizer) Tokenize(_ context.Context, prompt string, messages []schemas.Message) ([]uint32, error) {
	if prompt == "" && len(messages) > 0 {
		prompt = (&schemas.Request{Messages: messages}).PromptText()
	}
	return f.Encode(prompt)
}

// engineTokenizeTimeout bounds one question to an engine's /tokenize: a
// slow engine costs the request its exact hashes, not its admission.
const engineTokenizeTimeout = 2 * time.Second

// LoadTokenizers reads --tokenizer values, each MODEL=SOURCE: SOURCE is a
// tokenizer.json file, or the http(s) root of a vLLM server whose
// /tokenize (model tokenizer and chat template) answers for that model
// (vllmkv.Tokenizer). One model may be named once.
func LoadTokenizers(specs []string) (map[string]PromptTokenizer, error) {
	out := make(map[string]PromptTokenizer, len(specs))
	for _, spec := range specs {
		model, source, ok := strings.Cut(spec, "=")
		model, source = strings.TrimSpace(model), strings.TrimSpace(source)
		if !ok || model == "" || source == "" {
			return nil, fmt.Errorf("--tokenizer %q: want MODEL=path/to/tokenizer.json or MODEL=http://vllm-host:port", spec)
		}
		if _, dup := out[model]; dup {
			return nil, fmt.Errorf("--tokenizer: model %q is named twice", model)
		}
		if strings.HasPrefix(source, "http://") || strings.HasPrefix(source, "https://") {
			out[model] = &vllmkv.Tokenizer{BaseURL: source, Model: model, HTTP: &http.Client{Timeout: engineTokenizeTimeout}}
			continue
		}
		tk, err := hftokenizer.Load(source)
		if err != nil {
			return nil, fmt.Errorf("--tokenizer %s: %w", model, err)
		}
		out[model] = FileTokenizer{tk}
	}
	return out, nil
}

// tokenizerUse remembers which models have been reported as falling back
// to the built-in tokenizer, so each is logged once (models are the
// catalog's and the fleet's: a bounded set).
type tokenizerUse struct {
	mu       sync.Mutex
	reported map[string]bool
}

// promptBlocks sets the envelope's PromptTokens and BlockHashes from the
// model's own tokenizer when one is configured. Without one, or when it
// fails on this prompt, the envelope keeps what intake computed with the
// built-in tokenizer (tokens.Tokenize): placement still works on the
// router's own bookings, and the fallback is logged once per model (and
// counted per prompt when a configured tokenizer fails).
func (a *Admitter) promptBlocks(ctx context.Context, adm *schemas.Admitted) {
	tk, ok := a.cfg.Tokenizers[adm.Model]
	if !ok {
		if len(a.cfg.Tokenizers) > 0 {
			a.tokenizerFallback(adm.Model, "no tokenizer is configured for this model")
		}
		return
	}
	tctx, cancel := context.WithTimeout(ctx, engineTokenizeTimeout)
	defer cancel()
	ids, err := tk.Tokenize(tctx, adm.Request.Prompt, adm.Request.Messages)
	if err != nil {
		a.sh.Log.Warn("model tokenizer failed: built-in tokenizer used", "model", adm.Model, "id", adm.Request.ID, "err", err)
		a.sh.Metrics.GetOrCreateCounter(fmt.Sprintf(`switchyard_admission_tokenizer_fallback_total{model=%q}`, adm.Model)).Inc()
		return
	}
	adm.PromptTokens, adm.BlockHashes = len(ids), tokens.BlockHashes(ids)
}

func (a *Admitter) tokenizerFallback(model, why string) {
	a.tokenizers.mu.Lock()
	defer a.tokenizers.mu.Unlock()
	if a.tokenizers.reported[model] {
		return
	}
	if a.tokenizers.reported == nil {
		a.tokenizers.reported = map[string]bool{}
	}
	a.tokenizers.reported[model] = true
	a.sh.Log.Info("built-in tokenizer: block hashes will not meet a real engine's KV events", "model", model, "reason", why)
}

// logTokenizers says at start which models are tokenized by their own
// tokenizer.
func (a *Admitter) logTokenizers() {
	if len(a.cfg.Tokenizers) == 0 {
		a.sh.Log.Info("no model tokenizers configured (--tokenizer MODEL=tokenizer.json): prompts are tokenized by the built-in approximate tokenizer, whose block hashes meet the router's own bookings but never a real engine's KV events")
		return
	}
	for model, tk := range a.cfg.Tokenizers {
		kind := "tokenizer.json"
		if e, ok := tk.(*vllmkv.Tokenizer); ok {
			kind = "engine /tokenize at " + e.BaseURL
		}
		a.sh.Log.Info("model tokenizer", "model", model, "source", kind)
	}
}
