package admitter

import (
	"context"
	"encoding/json"
	"errors"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/switchyard-ai/switchyard/internal/adapter/backend/vllmkv"
	"github.com/switchyard-ai/switchyard/internal/adapter/hftokenizer"
	"github.com/switchyard-ai/switchyard/internal/core/catalog"
	"github.com/switchyard-ai/switchyard/internal/core/tokens"
	"github.com/switchyard-ai/switchyard/internal/testkit/waitfor"
	"github.com/switchyard-ai/switchyard/schemas"
	"github.com/switchyard-ai/switchyard/services/svc"
	"github.com/switchyard-ai/switchyard/subjects"
)

// testTokenizerJSON is hftokenizer's byte-level BPE test tokenizer, in the
// shape of Llama 3's tokenizer.json.
var testTokenizerJSON = filepath.Join("..", "..", "internal", "adapter", "hftokenizer", "testdata", "tokenizer.json")

// failingTokenizer stands for a model tokenizer that cannot tokenize a
// prompt (an engine's /tokenize down, a regex past its time bound).
type failingTokenizer struct{}

func (failingTokenizer) Tokenize(context.Context, string, []schemas.Message) ([]uint32, error) {
	return nil, errors.New("engine unreachable")
}

// admitOne submits a completion prompt for model and returns the Admitted
// envelope the admitter published.
func admitOne(t *testing.T, nc *nats.Conn, id, model, prompt string) schemas.Admitted {
	t.Helper()
	admitted, err := nc.SubscribeSync(subjects.AdmittedClass(schemas.PriorityStandard))
	if err != nil {
		t.Fatal(err)
	}
	defer admitted.Unsubscribe()
	answered, err := nc.SubscribeSync(subjects.Result("acme", id))
	if err != nil {
		t.Fatal(err)
	}
	defer answered.Unsubscribe()
	data, _ := json.Marshal(schemas.Request{ID: id, Model: model, Prompt: prompt, MaxTokens: 8})
	m := nats.NewMsg(subjects.Submit("acme"))
	m.Data = data
	m.Header.Set(schemas.HeaderContentType, schemas.ContentJSON)
	m.Header.Set(schemas.HeaderMsgID, id)
	js, _ := nc.JetStream()
	if _, err := js.PublishMsg(m); err != nil {
		t.Fatal(err)
	}
	msg, err := admitted.NextMsg(10 * time.Second)
	if err != nil {
		if res, rerr := answered.NextMsg(10 * time.Millisecond); rerr == nil {
			t.Fatalf("%s not admitted but answered: %s", id, res.Data)
		}
		t.Fatalf("%s not admitted: %v", id, err)
	}
	var adm schemas.Admitted
	if err := svc.Decode(msg.Header, msg.Data, &adm); err != nil {
		t.Fatal(err)
	}
	return adm
}

// TestAdmittedBlocksFromTheModelsTokenizer: with a tokenizer configured
// for a model, the envelope's token count and block hashes are those of
// the model's token ids (what a vLLM engine hashes per block); a model
// without one, or a tokenizer that fails on the prompt, keeps the
// built-in tokenizer's, and the failure is counted.
func TestAdmittedBlocksFromTheModelsTokenizer(t *testing.T) {
	hf, err := hftokenizer.Load(testTokenizerJSON)
	if err != nil {
		t.Fatal(err)
	}
	nc, sh, a := startAdmitter(t, Config{Catalog: catalog.Default(), Tokenizers: map[string]PromptTokenizer{
		"llama-3.1-8b": FileTokenizer{hf},
		"qwen2.5-7b":   failingTokenizer{},
	}})
	var stops []func()
	for _, model := range []string{"llama-3.1-8b", "qwen2.5-7b", "llama-3.2-1b"} {
		stops = append(stops, beat(nc, schemas.Heartbeat{WorkerID: "w-" + model, Pool: "h100", GPU: "h100", MaxBatch: 8,
			Models: []schemas.ModelState{{Name: model, State: schemas.WeightHot}}}))
		waitfor.True(t, "the admitter to hear a worker serving "+model, 10*time.Second, serving(a, model))
	}
	defer func() {
		for _, stop := range stops {
			stop()
		}
	}()
	prompt := strings.Repeat("hello world the cat ", 12)
	ids, err := hf.Encode(prompt)
	if err != nil {
		t.Fatal(err)
	}
	builtin := tokens.Tokenize(prompt)

	own := admitOne(t, nc, "own-1", "llama-3.1-8b", prompt)
	if own.PromptTokens != len(ids) || !slices.Equal(own.BlockHashes, tokens.BlockHashes(ids)) || len(own.BlockHashes) == 0 {
		t.Fatalf("with the model's tokenizer: %d tokens, hashes %x; want %d tokens, hashes %x", own.PromptTokens, own.BlockHashes, len(ids), tokens.BlockHashes(ids))
	}
	if slices.Equal(own.BlockHashes, tokens.BlockHashes(builtin)) {
		t.Fatal("the model's tokenizer gave the built-in tokenizer's hashes: the test cannot tell them apart")
	}
	for _, tc := range []struct{ id, model string }{{"none-1", "llama-3.2-1b"}, {"fails-1", "qwen2.5-7b"}} {
		adm := admitOne(t, nc, tc.id, tc.model, prompt)
		if adm.PromptTokens != len(builtin) || !slices.Equal(adm.BlockHashes, tokens.BlockHashes(builtin)) {
			t.Fatalf("%s: %d tokens, hashes %x; want the built-in tokenizer's %d, %x", tc.model, adm.PromptTokens, adm.BlockHashes, len(builtin), tokens.BlockHashes(builtin))
		}
	}
	if got := sh.Metrics.GetOrCreateCounter(`switchyard_admission_tokenizer_fallback_total{model="qwen2.5-7b"}`).Get(); got != 1 {
		t.Fatalf("tokenizer fallbacks counted %d, want 1", got)
	}
}

func TestLoadTokenizers(t *testing.T) {
	got, err := LoadTokenizers([]string{"llama-3.1-8b=" + testTokenizerJSON, " qwen2.5-7b = http://127.0.0.1:8000 "})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := got["llama-3.1-8b"].(FileTokenizer); !ok {
		t.Fatalf("a file source gave %T", got["llama-3.1-8b"])
	}
	if e, ok := got["qwen2.5-7b"].(*vllmkv.Tokenizer); !ok || e.BaseURL != "http://127.0.0.1:8000" || e.Model != "qwen2.5-7b" {
		t.Fatalf("a URL source gave %#v", got["qwen2.5-7b"])
	}
	for _, tc := range []struct {
		specs []string
		want  string
	}{
		{[]string{"llama-3.1-8b"}, "want MODEL=path/to/tokenizer.json"},
		{[]string{"=x.json"}, "want MODEL="},
		{[]string{"m=" + testTokenizerJSON, "m=http://h:1"}, `model "m" is named twice`},
		{[]string{"m=" + filepath.Join(t.TempDir(), "nope.json")}, "--tokenizer m: hftokenizer:"},
	} {
		if _, err := LoadTokenizers(tc.specs); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("LoadTokenizers(%q) = %v, want an error saying %q", tc.specs, err, tc.want)
		}
	}
}
