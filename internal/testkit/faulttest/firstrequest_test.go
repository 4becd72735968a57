package faulttest

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/switchyard-ai/switchyard/internal/adapter/gguf"
	"github.com/switchyard-ai/switchyard/internal/testkit/enginetest"
	"github.com/switchyard-ai/switchyard/schemas"
	"github.com/switchyard-ai/switchyard/services/svc"
	"github.com/switchyard-ai/switchyard/subjects"
)

// TestFirstRequestToAFreshEngine follows docs/engines.md's one line, as a
// user does (issue 31): a fresh Ollama serving the tiny model (on its disk,
// not loaded), `switchyard up --backend openai --model tiny --gpu cpu
// --tenants config/tenants.example.json`, `switchyard gateway` with the
// same tenants, and a chat request with acme's key. The first request must
// be answered 200: the worker advertised a 24 s guessed load for the
// 487 KB model, the router held every request past its 20 s deadline,
// and the user got 504s.
func TestFirstRequestToAFreshEngine(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the real binary in front of a real engine")
	}
	engineBin, err := enginetest.FindOllama()
	if err != nil {
		t.Skip(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	o, err := enginetest.Start(ctx, enginetest.Options{Binary: engineBin})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(o.Stop)
	if err := o.CreateTiny(ctx, "tiny", gguf.TinyOptions{Name: "tiny", Seed: 1}); err != nil {
		t.Fatal(err)
	}
	tenants, err := filepath.Abs(filepath.Join("..", "..", "..", "config", "tenants.example.json"))
	if err != nil {
		t.Fatal(err)
	}
	natsPort, err := FreePort()
	if err != nil {
		t.Fatal(err)
	}
	gwPort, err := FreePort()
	if err != nil {
		t.Fatal(err)
	}
	s := newSystem(t)
	up := s.start("up", "up", "--listen", fmt.Sprintf("127.0.0.1:%d", natsPort), "--backend", "openai", "--openai-url", o.URL,
		"--model", "tiny", "--gpu", "cpu", "--tenants", tenants, "--metrics", "")
	if err := up.WaitFor(ctx, "router consuming"); err != nil {
		t.Fatal(err)
	}
	// The user's request comes once the worker has read the engine and
	// heartbeats the model cold, with its guessed load (before its first
	// scrape it says hot, and the request would prove nothing).
	nc, err := nats.Connect(fmt.Sprintf("nats://127.0.0.1:%d", natsPort))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	cold := make(chan schemas.ModelState, 1)
	sub, err := nc.Subscribe(subjects.HeartbeatAll, func(m *nats.Msg) {
		var hb schemas.Heartbeat
		if svc.Decode(m.Header, m.Data, &hb) == nil && len(hb.Models) > 0 && hb.Models[0].State == schemas.WeightCold {
			select {
			case cold <- hb.Models[0]:
			default:
			}
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	var own schemas.ModelState
	select {
	case own = <-cold:
	case <-ctx.Done():
		t.Fatal("the worker never heartbeat the model cold")
	}
	if own.LoadSeconds <= 0 || own.LoadSeconds > 2 {
		t.Fatalf("the cold model advertises load_s %.2f, want the ~0.5 s a 487 KB model takes", own.LoadSeconds)
	}

	s.start("gateway", "gateway", "--listen", fmt.Sprintf("127.0.0.1:%d", gwPort), "--nats", fmt.Sprintf("nats://127.0.0.1:%d", natsPort),
		"--tenants", tenants)
	base := fmt.Sprintf("http://127.0.0.1:%d/v1", gwPort)
	for {
		if resp, err := http.Get(base + "/models"); err == nil {
			resp.Body.Close()
			break
		}
		if ctx.Err() != nil {
			t.Fatal("the gateway never answered")
		}
		time.Sleep(50 * time.Millisecond)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+"/chat/completions",
		strings.NewReader(`{"model":"tiny","messages":[{"role":"user","content":"hello"}],"max_tokens":16}`))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer sk-example-acme-change-me")
	req.Header.Set("Content-Type", "application/json")
	start := time.Now()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	took := time.Since(start)
	var out struct {
		Choices []struct {
			Message struct{ Content string }
		}
		Usage struct{ Completion_tokens int }
	}
	if resp.StatusCode != http.StatusOK || json.Unmarshal(body, &out) != nil || len(out.Choices) != 1 || out.Usage.Completion_tokens != 16 {
		t.Fatalf("first request: HTTP %d after %s: %s", resp.StatusCode, took.Round(time.Millisecond), body)
	}
	t.Logf("first request to a fresh engine (load_s %.2f advertised): 200 after %s", own.LoadSeconds, took.Round(time.Millisecond))
}
