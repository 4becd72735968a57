package gateway

import (
	"bufio"
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	gw "github.com/switchyard-ai/switchyard/internal/adapter/gateway"
	"github.com/switchyard-ai/switchyard/schemas"
	"github.com/switchyard-ai/switchyard/subjects"
)

// TestStreamSurvivesFailover: a request fails over mid-stream. The worker
// that takes it over continues after the chunks already sent, but the
// wire also carries what a failover can leave behind — a restarted
// attempt's chunks from seq 1 and a late chunk from the lost attempt. The
// SSE stream relays each token once, in order, and ends on the final
// result.
func TestStreamSurvivesFailover(t *testing.T) {
	e := start(t, InstantConfig{}, Config{})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	// "!hang": the backend streams "echo:" and " x" (attempt 0), then
	// holds the request as a worker that died would.
	resp := post(t, ctx, e.url+"/v1/chat/completions", testKey,
		`{"model":"m","stream":true,"messages":[{"role":"user","content":"x !hang"}],"max_tokens":8}`, nil)
	defer resp.Body.Close()
	id := resp.Header.Get(gw.HeaderRequestID)
	br := bufio.NewReader(resp.Body)
	var content []string
	readContent := func(n int) {
		t.Helper()
		for len(content) < n {
			line, err := br.ReadString('\n')
			if err != nil {
				t.Fatalf("SSE after %q: %v", content, err)
			}
			data, ok := strings.CutPrefix(strings.TrimSpace(line), "data: ")
			if !ok || data == "[DONE]" {
				continue
			}
			var c gw.ChatCompletionChunk
			if err := json.Unmarshal([]byte(data), &c); err != nil {
				t.Fatalf("chunk %q: %v", data, err)
			}
			if len(c.Choices) > 0 && c.Choices[0].Delta.Content != nil && *c.Choices[0].Delta.Content != "" {
				content = append(content, *c.Choices[0].Delta.Content)
			}
		}
	}
	readContent(2)

	nc := e.backend.nc
	chunk := func(seq uint64, attempt int, text string, done bool) {
		t.Helper()
		m := nats.NewMsg(subjects.Tokens("acme", id))
		m.Data = schemas.MustMarshal(schemas.JSON, schemas.TokenChunk{ID: id, Seq: seq, Attempt: attempt, Text: text, Tokens: 1, Done: done, At: time.Now()})
		m.Header.Set(schemas.HeaderContentType, schemas.ContentJSON)
		if err := nc.PublishMsg(m); err != nil {
			t.Fatal(err)
		}
	}
	chunk(1, 1, "REPEAT", false) // a restart from seq 1: already relayed
	chunk(2, 1, "REPEAT", false)
	chunk(3, 1, " y", false)     // the continuation
	chunk(4, 0, " STALE", false) // the lost attempt, late
	chunk(4, 1, " z", false)
	chunk(3, 1, " REPEAT", false) // a duplicate of the continuation
	chunk(5, 1, "", true)
	res := schemas.Result{ID: id, Tenant: "acme", Status: schemas.StatusOK, Model: "m", Text: "echo: x y z", FinishReason: "length",
		Usage: schemas.Usage{PromptTokens: 2, CompletionTokens: 4}, Attempt: 1, FinishedAt: time.Now()}
	m := nats.NewMsg(subjects.Final("acme", id))
	m.Data = schemas.MustMarshal(schemas.JSON, res)
	m.Header.Set(schemas.HeaderContentType, schemas.ContentJSON)
	if err := nc.PublishMsg(m); err != nil {
		t.Fatal(err)
	}
	readContent(4)
	rest, err := bufio.NewReader(br).ReadString(0)
	if err != nil && !strings.Contains(rest, "[DONE]") {
		t.Fatalf("stream did not end: %v", err)
	}
	if strings.Contains(rest, "REPEAT") || strings.Contains(rest, "STALE") {
		t.Fatalf("a repeated or stale chunk reached the client: %q", rest)
	}
	if got := strings.Join(content, ""); got != "echo: x y z" {
		t.Fatalf("the client read %q (%d deltas), want %q once", got, len(content), "echo: x y z")
	}
}
