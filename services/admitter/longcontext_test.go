package admitter

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	gw "github.com/switchyard-ai/switchyard/internal/adapter/gateway"
	"github.com/switchyard-ai/switchyard/internal/core/catalog"
	"github.com/switchyard-ai/switchyard/internal/testkit/bustest"
	"github.com/switchyard-ai/switchyard/internal/testkit/waitfor"
	"github.com/switchyard-ai/switchyard/schemas"
	"github.com/switchyard-ai/switchyard/services/client"
	"github.com/switchyard-ai/switchyard/services/gateway"
	"github.com/switchyard-ai/switchyard/services/svc"
	"github.com/switchyard-ai/switchyard/subjects"
)

// echoWorker stands in for router + worker: it answers every admitted
// request on the core subject with an ok result that reports the prompt
// bytes it received, so a test can see the whole prompt crossed the bus.
func echoWorker(t *testing.T, nc *nats.Conn) {
	t.Helper()
	js, err := nc.JetStream()
	if err != nil {
		t.Fatal(err)
	}
	sub, err := nc.Subscribe(subjects.Prefix+".admitted.>", func(m *nats.Msg) {
		var adm schemas.Admitted
		if err := svc.Decode(m.Header, m.Data, &adm); err != nil {
			t.Errorf("admitted envelope: %v", err)
			return
		}
		n := len(adm.Request.PromptText())
		res := schemas.Result{V: schemas.Version, ID: adm.Request.ID, Tenant: adm.Tenant, Status: schemas.StatusOK, Model: adm.Model,
			Text: "x " + strconv.Itoa(n), WorkerID: "w1", Usage: schemas.Usage{PromptTokens: adm.PromptTokens, CompletionTokens: 1},
			FinishReason: "stop", FinishedAt: time.Now()}
		out, err := svc.Encode(subjects.Final(adm.Tenant, adm.Request.ID), schemas.JSON, res, adm.Request.ID)
		if err == nil {
			_, err = js.PublishMsg(out)
		}
		if err != nil {
			t.Errorf("publish result: %v", err)
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sub.Unsubscribe() })
}

// TestLongPromptsFlow: prompts up to a 1M-token window (4 MB) cross the
// bus — submission, admission, the admitted envelope — with their request
// id, over NATS and through the gateway; a prompt over the model's window
// is 400 context_length_exceeded at the gateway; and a request larger
// than the server's max_payload is a specific, non-retryable error (413 at
// the gateway), not a 503 that clients retry forever.
func TestLongPromptsFlow(t *testing.T) {
	e := bustest.StartProvisioned(t, subjects.StreamOptions{})
	if got := e.NC.MaxPayload(); got != schemas.MaxPayload {
		t.Fatalf("embedded server max_payload %d, want %d", got, schemas.MaxPayload)
	}
	anc, err := e.Server.Connect("admitter")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(anc.Close)
	sh, err := svc.New("admitter", "admitter-1", anc, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	a := New(sh, Config{Catalog: catalog.Default()})
	go func() { done <- a.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	stop := beat(e.NC, schemas.Heartbeat{WorkerID: "w1", Pool: "h100", GPU: "h100", MaxBatch: 8,
		Models: []schemas.ModelState{{Name: "llama-3.1-8b", State: schemas.WeightHot},
			{Name: "long-1m", State: schemas.WeightHot, ContextLength: 1 << 20}}})
	defer stop()
	waitfor.True(t, "the admitter to hear worker w1", 10*time.Second, serving(a, "long-1m"))
	echoWorker(t, e.NC)

	// 4,000,000 bytes, about 760k tokens: inside the 1M window and the
	// 4 MiB limit. Prefilling it is predicted to take over a minute, so the
	// requests carry a 10-minute deadline.
	long := strings.Repeat("internationalisation ", 4_000_000/21)
	const deadline = 10 * time.Minute

	t.Run("over NATS with the Go client", func(t *testing.T) {
		c, err := client.New(e.NC)
		if err != nil {
			t.Fatal(err)
		}
		rctx, rcancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer rcancel()
		req := schemas.Request{ID: "long-nats-1", Model: "long-1m", Prompt: long, MaxTokens: 16, DeadlineMs: deadline.Milliseconds()}
		res, err := c.Do(rctx, "acme", &req)
		if err != nil {
			t.Fatal(err)
		}
		if res.Status != schemas.StatusOK || res.ID != "long-nats-1" || res.Text != "x "+strconv.Itoa(len(long)) {
			t.Fatalf("result %s id %s text %q err %v, want ok with the whole %d-byte prompt", res.Status, res.ID, res.Text, res.Error, len(long))
		}
	})

	t.Run("larger than max_payload: a specific error, not retried", func(t *testing.T) {
		c, err := client.New(e.NC)
		if err != nil {
			t.Fatal(err)
		}
		rctx, rcancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer rcancel()
		req := schemas.Request{ID: "too-big-1", Model: "long-1m", Prompt: strings.Repeat("x", schemas.MaxPayload+1), MaxTokens: 16}
		start := time.Now()
		_, err = c.Resubmit(rctx, "acme", &req)
		if err == nil || !strings.Contains(err.Error(), "max_payload") || !errors.Is(err, client.ErrPayloadTooLarge) {
			t.Fatalf("err %v, want ErrPayloadTooLarge naming max_payload", err)
		}
		if time.Since(start) > 5*time.Second {
			t.Fatalf("Resubmit retried a payload that can never fit for %s", time.Since(start))
		}
	})

	gnc, err := e.Server.Connect("gateway")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(gnc.Close)
	keys, err := gw.KeysFromMap(map[string]string{"sk-acme": "acme"})
	if err != nil {
		t.Fatal(err)
	}
	g, err := gateway.New(context.Background(), gateway.Config{NC: gnc, Keys: keys, Logger: slog.New(slog.DiscardHandler),
		MaxBodyBytes: 3 * schemas.MaxPayload})
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(g.Handler())
	t.Cleanup(ts.Close)
	chat := func(t *testing.T, model, prompt string) (int, map[string]any) {
		t.Helper()
		body, _ := json.Marshal(map[string]any{"model": model, "max_tokens": 16,
			"messages": []map[string]string{{"role": "user", "content": prompt}}})
		req, _ := http.NewRequest(http.MethodPost, ts.URL+"/v1/chat/completions", strings.NewReader(string(body)))
		req.Header.Set("Authorization", "Bearer sk-acme")
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set(gw.HeaderDeadlineMs, strconv.FormatInt(deadline.Milliseconds(), 10))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		data, _ := io.ReadAll(resp.Body)
		var out map[string]any
		if err := json.Unmarshal(data, &out); err != nil {
			t.Fatalf("status %d body %.200s: %v", resp.StatusCode, data, err)
		}
		if ra := resp.Header.Get("Retry-After"); resp.StatusCode >= 400 && ra != "" {
			t.Errorf("status %d asks to retry after %s", resp.StatusCode, ra)
		}
		return resp.StatusCode, out
	}
	code := func(out map[string]any) string {
		e, _ := out["error"].(map[string]any)
		c, _ := e["code"].(string)
		m, _ := e["message"].(string)
		return c + ": " + m
	}
	t.Run("gateway: a 4 MB prompt on a 1M-token model", func(t *testing.T) {
		st, out := chat(t, "long-1m", long)
		if st != http.StatusOK {
			t.Fatalf("status %d %s", st, code(out))
		}
	})
	t.Run("gateway: 140k tokens over a 131,072-token window", func(t *testing.T) {
		st, out := chat(t, "llama-3.1-8b", strings.Repeat("context ", 70000))
		if c := code(out); st != http.StatusBadRequest || !strings.HasPrefix(c, gw.CodeContextExceeded+":") || !strings.Contains(c, "131072") {
			t.Fatalf("status %d %s, want 400 %s naming the window", st, c, gw.CodeContextExceeded)
		}
	})
	t.Run("gateway: larger than max_payload", func(t *testing.T) {
		st, out := chat(t, "long-1m", strings.Repeat("y", schemas.MaxPayload+1))
		if st != http.StatusRequestEntityTooLarge {
			t.Fatalf("status %d %s, want 413", st, code(out))
		}
	})
}
