package enginetest

import (
	"context"
	"encoding/json"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/switchyard-ai/switchyard/internal/adapter/backend/openai"
	gw "github.com/switchyard-ai/switchyard/internal/adapter/gateway"
	"github.com/switchyard-ai/switchyard/schemas"
	"github.com/switchyard-ai/switchyard/services/gateway"
)

// TestOfficialOpenAIClientOnTheEngine: the npm `openai` client talks to the
// gateway, which submits on the bus; the request reaches Ollama through the
// whole system, and the client gets the engine's answer, plain and
// streamed, with the engine's usage. A client aborting mid-stream makes the
// gateway cancel, and the engine stops generating (its second slot as in
// TestCancelAbortsOnTheEngine, for the same reason).
func TestOfficialOpenAIClientOnTheEngine(t *testing.T) {
	mod, err := filepath.Abs(filepath.Join("..", "..", "..", ".ci", "js", "gateway", "node_modules", "openai", "index.mjs"))
	if err != nil {
		t.Fatal(err)
	}
	node, err := exec.LookPath("node")
	if _, statErr := os.Stat(mod); err != nil || statErr != nil {
		if os.Getenv("SWITCHYARD_REQUIRE_TOOLS") == "1" {
			t.Fatalf("node or the openai npm package missing (SWITCHYARD_REQUIRE_TOOLS=1; run .ci/install-js.sh)")
		}
		t.Skip("node or the openai npm package missing: run .ci/install-js.sh")
	}
	o := startEngine(t, 2, "tiny")
	st := system(t, "tiny", o.URL)
	nc := newNC(t, st)
	keys, err := gw.KeysFromMap(map[string]string{"sk-engine-test": tenant})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	srv, err := gateway.New(ctx, gateway.Config{NC: nc, Keys: keys, Models: st.Catalog.Models()})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	hs := &http.Server{Handler: srv.Handler(), ReadHeaderTimeout: 10 * time.Second}
	go hs.Serve(ln)
	t.Cleanup(func() { hs.Close() })

	msgs := []schemas.Message{{Role: "user", Content: "The official client, through Switchyard, to a real engine."}}
	direct, err := o.Client("tiny").Generate(ctx, openai.Request{Messages: msgs, MaxTokens: 12, Temperature: temp0()}, nil)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.CommandContext(ctx, node, filepath.Join("testdata", "openai_client.mjs"))
	cmd.Env = append(os.Environ(), "OPENAI_MODULE="+mod, "OPENAI_BASE_URL=http://"+ln.Addr().String()+"/v1",
		"OPENAI_API_KEY=sk-engine-test", "MODEL=tiny")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("node: %v\n%s", err, out)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	var got struct {
		Models []string `json:"models"`
		Plain  struct {
			Text, Finish string
			Usage        struct{ Prompt_tokens, Completion_tokens int }
		} `json:"plain"`
		Stream struct {
			Text   string
			Chunks int
			Usage  *struct{ Prompt_tokens, Completion_tokens int }
		} `json:"stream"`
		Aborted *struct {
			Seen int
			Name string
		} `json:"aborted"`
	}
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &got); err != nil {
		t.Fatalf("%v in %s", err, out)
	}
	if !slices.Contains(got.Models, "tiny") {
		t.Errorf("/v1/models lists %v, not the engine's model", got.Models)
	}
	if got.Plain.Text != direct.Text || got.Plain.Finish != "length" ||
		got.Plain.Usage.Prompt_tokens != direct.PromptTokens || got.Plain.Usage.Completion_tokens != 12 {
		t.Errorf("plain: %+v, direct %q %d/%d", got.Plain, direct.Text, direct.PromptTokens, direct.CompletionTokens)
	}
	if got.Stream.Text != direct.Text || got.Stream.Chunks < 2 || got.Stream.Usage == nil || got.Stream.Usage.Completion_tokens != 12 {
		t.Errorf("stream: %+v", got.Stream)
	}
	if got.Aborted == nil || got.Aborted.Seen < 5 {
		t.Fatalf("the client never aborted: %s", out)
	}
	checkStopped(t, o, busyGenerating(t, o))
	// The slot must be free at once: the engine stopped the sequence.
	start := time.Now()
	if _, err := o.Client("tiny").Generate(ctx, openai.Request{Prompt: "next", MaxTokens: 1}, nil); err != nil {
		t.Fatal(err)
	}
	waited := time.Since(start)
	// The rest of the aborted generation, at the engine's own rate measured
	// on the direct request, would have held the slot far longer.
	perToken := (direct.Total - direct.TTFT) / time.Duration(direct.CompletionTokens-1)
	remaining := time.Duration(4000-got.Aborted.Seen) * perToken
	if waited > remaining/2 {
		t.Fatalf("the next request waited %s, ~%s of the aborted generation was left: the engine kept generating", waited, remaining)
	}
	logLeakedSlot(t, o)
	t.Logf("official client: %d streamed chunks, aborted after %d; the engine's slot answered %s later (~%s of generation was left)",
		got.Stream.Chunks, got.Aborted.Seen, waited.Round(time.Millisecond), remaining.Round(time.Millisecond))
}

// busyGenerating is the engine's processor use while it generates a long
// answer, measured on a direct request cancelled afterwards. The request
// does not stream to a client that leaves: Ollama's unstreamed handler
// reads its generation to the end, so the cancel frees its slot.
func busyGenerating(t *testing.T, o *Ollama) float64 {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan struct{})
	go func() {
		defer close(done)
		body := strings.NewReader(`{"model":"tiny","prompt":"measure me","max_tokens":20000,"stream":false}`)
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, o.URL+"/v1/completions", body)
		req.Header.Set("Content-Type", "application/json")
		if res, err := http.DefaultClient.Do(req); err == nil {
			res.Body.Close()
		}
	}()
	time.Sleep(300 * time.Millisecond)
	busy, err := o.Busy(500 * time.Millisecond)
	cancel()
	<-done
	if err != nil {
		t.Fatal(err)
	}
	return busy
}
