package gateway

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"mime/multipart"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/switchyard-ai/switchyard/internal/adapter/batch"
	"github.com/switchyard-ai/switchyard/internal/adapter/bus"
	gw "github.com/switchyard-ai/switchyard/internal/adapter/gateway"
	"github.com/switchyard-ai/switchyard/internal/core/catalog"
	"github.com/switchyard-ai/switchyard/internal/testkit/bustest"
	"github.com/switchyard-ai/switchyard/internal/testkit/waitfor"
	"github.com/switchyard-ai/switchyard/schemas"
	"github.com/switchyard-ai/switchyard/services/svc"
	"github.com/switchyard-ai/switchyard/subjects"
)

const testKey = "sk-test-acme"

type env struct {
	url     string
	backend *InstantBackend
	nc      *nats.Conn // a connection of the test's own, to publish what the fleet would
	srv     *bus.Server
}

// start runs an embedded JetStream server, the instant backend and the
// gateway behind an httptest server.
func start(t *testing.T, icfg InstantConfig, gcfg Config) env {
	t.Helper()
	ctx := context.Background()
	srv := bustest.StartProvisioned(t, subjects.StreamOptions{}).Server
	bnc, err := srv.Connect("instant")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(bnc.Close)
	backend, err := StartInstant(bnc, icfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(backend.Stop)
	gnc, err := srv.Connect("gateway")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(gnc.Close)
	keys, err := gw.KeysFromMap(map[string]string{testKey: "acme"})
	if err != nil {
		t.Fatal(err)
	}
	gcfg.NC, gcfg.Keys = gnc, keys
	g, err := New(ctx, gcfg)
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(g.Handler())
	t.Cleanup(ts.Close)
	return env{url: ts.URL, backend: backend, nc: bnc, srv: srv}
}

func post(t *testing.T, ctx context.Context, url, key, body string, headers map[string]string) *http.Response {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	for k, v := range headers {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

func decode[T any](t *testing.T, resp *http.Response) T {
	t.Helper()
	defer resp.Body.Close()
	var v T
	b, _ := io.ReadAll(resp.Body)
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatalf("decode %T from %q: %v", v, b, err)
	}
	return v
}

func TestChatCompletion(t *testing.T) {
	e := start(t, InstantConfig{}, Config{})
	resp := post(t, context.Background(), e.url+"/v1/chat/completions", testKey,
		`{"model":"llama-3.1-8b","messages":[{"role":"user","content":"hello there world"}],"max_tokens":16,"metadata":{"team":"search"}}`,
		map[string]string{gw.HeaderPriority: "interactive", gw.HeaderDeadlineMs: "30000", gw.HeaderWorkflowID: "wf1", gw.HeaderWorkflowStep: "2", gw.HeaderWorkflowOf: "3"})
	if resp.StatusCode != 200 {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("status %d: %s", resp.StatusCode, b)
	}
	id := resp.Header.Get(gw.HeaderRequestID)
	c := decode[gw.ChatCompletion](t, resp)
	if c.Object != "chat.completion" || c.ID != "chatcmpl-"+id || len(c.Choices) != 1 {
		t.Fatalf("completion %+v", c)
	}
	if got := c.Choices[0].Message.Content; got != "echo: hello there world" || c.Choices[0].FinishReason != "stop" {
		t.Fatalf("content %q finish %q", got, c.Choices[0].FinishReason)
	}
	if c.Usage.PromptTokens != 3 || c.Usage.CompletionTokens != 4 || c.Usage.TotalTokens != 7 {
		t.Fatalf("usage %+v", c.Usage)
	}
	req, ok := e.backend.Request(id)
	if !ok {
		t.Fatalf("backend never saw %s", id)
	}
	if req.Priority != "interactive" || req.DeadlineMs != 30000 || req.Workflow == nil || req.Workflow.Step != 2 || req.Workflow.Of != 3 || req.Metadata["team"] != "search" || req.Stream {
		t.Fatalf("request on the bus %+v", req)
	}
}

func TestTextCompletion(t *testing.T) {
	e := start(t, InstantConfig{}, Config{})
	resp := post(t, context.Background(), e.url+"/v1/completions", testKey, `{"model":"llama-3.1-8b","prompt":"a b","max_tokens":8}`, nil)
	c := decode[gw.Completion](t, resp)
	if resp.StatusCode != 200 || c.Object != "text_completion" || c.Choices[0].Text != "echo: a b" || *c.Choices[0].FinishReason != "stop" {
		t.Fatalf("status %d completion %+v", resp.StatusCode, c)
	}
}

type sseEvent struct {
	data string
	at   time.Time
}

func readSSE(t *testing.T, r io.Reader) []sseEvent {
	t.Helper()
	var evs []sseEvent
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		line := sc.Text()
		if line == "" {
			continue
		}
		data, ok := strings.CutPrefix(line, "data: ")
		if !ok {
			t.Fatalf("unexpected SSE line %q", line)
		}
		evs = append(evs, sseEvent{data: data, at: time.Now()})
	}
	return evs
}

func TestStreamedChat(t *testing.T) {
	e := start(t, InstantConfig{TokenDelay: 20 * time.Millisecond}, Config{})
	resp := post(t, context.Background(), e.url+"/v1/chat/completions", testKey,
		`{"model":"llama-3.1-8b","messages":[{"role":"user","content":"one two three four"}],"max_tokens":16,"stream":true,"stream_options":{"include_usage":true}}`, nil)
	defer resp.Body.Close()
	if resp.StatusCode != 200 || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		t.Fatalf("status %d content-type %q", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	evs := readSSE(t, resp.Body)
	if len(evs) < 4 || evs[len(evs)-1].data != "[DONE]" {
		t.Fatalf("events %+v", evs)
	}
	var text strings.Builder
	contentChunks, finishAt, usageSeen, usageChunks := 0, -1, false, 0
	for i, ev := range evs[:len(evs)-1] {
		var c gw.ChatCompletionChunk
		if err := json.Unmarshal([]byte(ev.data), &c); err != nil {
			t.Fatalf("chunk %q: %v", ev.data, err)
		}
		if c.Object != "chat.completion.chunk" {
			t.Fatalf("object %q", c.Object)
		}
		if c.Usage != nil {
			usageChunks++
		}
		if len(c.Choices) == 0 {
			usageSeen = c.Usage != nil && c.Usage.CompletionTokens == 5 && c.Usage.TotalTokens == 9
			continue
		}
		ch := c.Choices[0]
		if i == 0 && ch.Delta.Role != "assistant" {
			t.Fatalf("first delta has no role: %+v", ch.Delta)
		}
		if ch.Delta.Content != nil && *ch.Delta.Content != "" {
			if finishAt >= 0 {
				t.Fatalf("content after the finish chunk")
			}
			contentChunks++
			text.WriteString(*ch.Delta.Content)
		}
		if ch.FinishReason != nil {
			finishAt = i
			if *ch.FinishReason != "stop" {
				t.Fatalf("finish chunk %+v usage %+v", ch, c.Usage)
			}
		}
	}
	// Five tokens ("echo:" plus four words) came as separate chunks before
	// the final one: relayed as generated, not buffered to the end.
	if contentChunks != 5 || text.String() != "echo: one two three four" || finishAt < 0 || !usageSeen || usageChunks != 1 {
		t.Fatalf("chunks %d text %q finish at %d usage %v in %d chunks (want exactly 1)", contentChunks, text.String(), finishAt, usageSeen, usageChunks)
	}
	if !evs[0].at.Before(evs[finishAt].at) {
		t.Fatalf("first chunk arrived with the final one")
	}
}

func TestStreamedTextCompletion(t *testing.T) {
	e := start(t, InstantConfig{}, Config{})
	resp := post(t, context.Background(), e.url+"/v1/completions", testKey, `{"model":"llama-3.1-8b","prompt":"x y","max_tokens":8,"stream":true}`, nil)
	defer resp.Body.Close()
	evs := readSSE(t, resp.Body)
	var text strings.Builder
	for _, ev := range evs[:len(evs)-1] {
		var c gw.Completion
		if err := json.Unmarshal([]byte(ev.data), &c); err != nil {
			t.Fatal(err)
		}
		text.WriteString(c.Choices[0].Text)
	}
	if text.String() != "echo: x y" || evs[len(evs)-1].data != "[DONE]" {
		t.Fatalf("text %q events %+v", text.String(), evs)
	}
}

func TestErrors(t *testing.T) {
	e := start(t, InstantConfig{}, Config{})
	chat := func(content string) string {
		return `{"model":"llama-3.1-8b","messages":[{"role":"user","content":"` + content + `"}],"max_tokens":8}`
	}
	tests := []struct {
		name       string
		path, key  string
		body       string
		headers    map[string]string
		status     int
		code       string
		retryAfter string
	}{
		{"unknown key", "/v1/chat/completions", "sk-nope", chat("hi"), nil, 401, gw.CodeInvalidAPIKey, ""},
		{"missing key", "/v1/chat/completions", "", chat("hi"), nil, 401, gw.CodeInvalidAPIKey, ""},
		{"not json", "/v1/chat/completions", testKey, `{"model":`, nil, 400, schemas.CodeMalformed, ""},
		{"no messages", "/v1/chat/completions", testKey, `{"model":"m","messages":[]}`, nil, 400, schemas.CodeMissingPrompt, ""},
		{"no model", "/v1/chat/completions", testKey, `{"messages":[{"role":"user","content":"x"}]}`, nil, 400, schemas.CodeMissingModel, ""},
		{"bad role", "/v1/chat/completions", testKey, `{"model":"m","messages":[{"role":"robot","content":"x"}]}`, nil, 400, schemas.CodeInvalidMessage, ""},
		{"bad priority header", "/v1/chat/completions", testKey, chat("hi"), map[string]string{gw.HeaderPriority: "vip"}, 400, schemas.CodeInvalidPriority, ""},
		{"shed", "/v1/chat/completions", testKey, chat("hi !shed"), nil, 429, schemas.CodeShed, "1"},
		{"quota", "/v1/completions", testKey, `{"model":"m","prompt":"hi !quota"}`, nil, 429, schemas.CodeQuotaExceeded, "1"},
		{"deadline", "/v1/chat/completions", testKey, chat("hi !deadline"), nil, 504, schemas.CodeDeadlineExceeded, ""},
		{"shed while streaming", "/v1/chat/completions", testKey, `{"model":"m","stream":true,"messages":[{"role":"user","content":"x !shed"}]}`, nil, 429, schemas.CodeShed, "1"},
		{"no route", "/v1/embeddings", testKey, `{}`, nil, 404, gw.CodeNotFound, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp := post(t, context.Background(), e.url+tt.path, tt.key, tt.body, tt.headers)
			if resp.StatusCode != tt.status {
				b, _ := io.ReadAll(resp.Body)
				t.Fatalf("status %d, want %d: %s", resp.StatusCode, tt.status, b)
			}
			if got := resp.Header.Get("Retry-After"); got != tt.retryAfter {
				t.Fatalf("Retry-After %q, want %q", got, tt.retryAfter)
			}
			body := decode[gw.ErrorBody](t, resp)
			if body.Error.Code == nil || *body.Error.Code != tt.code || body.Error.Message == "" || body.Error.Type == "" {
				t.Fatalf("error %+v, want code %s", body.Error, tt.code)
			}
		})
	}
}

func TestOverloadSheds(t *testing.T) {
	e := start(t, InstantConfig{TokenDelay: 100 * time.Millisecond, Capacity: 1}, Config{})
	const n = 6
	statuses := make(chan int, n)
	for range n {
		go func() {
			resp := post(t, context.Background(), e.url+"/v1/chat/completions", testKey,
				`{"model":"m","messages":[{"role":"user","content":"a b c"}],"max_tokens":8}`, nil)
			resp.Body.Close()
			statuses <- resp.StatusCode
		}()
	}
	got := map[int]int{}
	for range n {
		got[<-statuses]++
	}
	if got[200] < 1 || got[429] < 1 || got[200]+got[429] != n {
		t.Fatalf("statuses %v: want some 200 and some 429", got)
	}
}

func waitCancel(t *testing.T, b *InstantBackend, id string) schemas.Cancel {
	t.Helper()
	timeout := time.After(10 * time.Second)
	for {
		select {
		case c := <-b.Cancels():
			if c.RequestID == id {
				return c
			}
		case <-timeout:
			t.Fatalf("no cancel for %s", id)
		}
	}
}

func TestGatewayDeadlineCancels(t *testing.T) {
	e := start(t, InstantConfig{}, Config{DeadlineGrace: 50 * time.Millisecond})
	resp := post(t, context.Background(), e.url+"/v1/chat/completions", testKey,
		`{"model":"m","messages":[{"role":"user","content":"x !hang"}],"max_tokens":8}`, map[string]string{gw.HeaderDeadlineMs: "150"})
	id := resp.Header.Get(gw.HeaderRequestID)
	body := decode[gw.ErrorBody](t, resp)
	if resp.StatusCode != 504 || *body.Error.Code != schemas.CodeDeadlineExceeded {
		t.Fatalf("status %d body %+v", resp.StatusCode, body)
	}
	if c := waitCancel(t, e.backend, id); c.Reason != ReasonDeadlineExceeded || c.Tenant != "acme" {
		t.Fatalf("cancel %+v", c)
	}
}

func TestDisconnectMidStreamCancels(t *testing.T) {
	e := start(t, InstantConfig{TokenDelay: 5 * time.Millisecond}, Config{})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	resp := post(t, ctx, e.url+"/v1/chat/completions", testKey,
		`{"model":"m","stream":true,"messages":[{"role":"user","content":"x !hang"}],"max_tokens":8}`, nil)
	id := resp.Header.Get(gw.HeaderRequestID)
	br := bufio.NewReader(resp.Body)
	line, err := br.ReadString('\n')
	if err != nil || !strings.HasPrefix(line, "data: {") {
		t.Fatalf("first event %q %v", line, err)
	}
	// The client goes away mid-stream: the worker must hear about it.
	cancel()
	resp.Body.Close()
	c := waitCancel(t, e.backend, id)
	if c.Reason != ReasonClientDisconnected || c.Tenant != "acme" {
		t.Fatalf("cancel %+v", c)
	}
}

func get(t *testing.T, url string) *http.Response {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, url, nil)
	req.Header.Set("Authorization", "Bearer "+testKey)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

func TestModels(t *testing.T) {
	e := start(t, InstantConfig{}, Config{})
	l := decode[gw.ModelList](t, get(t, e.url+"/v1/models"))
	ms := catalog.Default().Models()
	if l.Object != "list" || len(l.Data) != len(ms)+1 || l.Data[1].ID != ms[0].Name {
		t.Fatalf("models %+v", l)
	}

	// A model only the live fleet serves (an engine's own, behind
	// --backend openai) is listed and found once a worker's heartbeat
	// names it, as requests for it are answered.
	if resp := get(t, e.url+"/v1/models/tiny"); resp.StatusCode != http.StatusNotFound {
		t.Fatalf("tiny before any heartbeat: %d", resp.StatusCode)
	}
	hb := schemas.Heartbeat{WorkerID: "eng-0", Pool: "cpu", Models: []schemas.ModelState{{Name: "tiny", State: schemas.WeightHot, ContextLength: 2048}}}
	msg, err := svc.Encode(subjects.Heartbeat("cpu", hb.WorkerID), schemas.Msgpack, hb, "")
	if err != nil {
		t.Fatal(err)
	}
	ok := func() bool {
		if err := e.nc.PublishMsg(msg); err != nil {
			t.Fatal(err)
		}
		resp := get(t, e.url+"/v1/models/tiny")
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	}
	waitfor.True(t, "GET /v1/models/tiny to find the fleet's model", 5*time.Second, ok)
	m := decode[gw.ModelObject](t, get(t, e.url+"/v1/models/tiny"))
	if m.ID != "tiny" || m.MaxContext != 2048 {
		t.Fatalf("model %+v", m)
	}
	l = decode[gw.ModelList](t, get(t, e.url+"/v1/models"))
	if len(l.Data) != len(ms)+2 || l.Data[len(l.Data)-1].ID != "tiny" {
		t.Fatalf("the list lacks the fleet's model: %+v", l.Data)
	}
}

func TestBatch(t *testing.T) {
	e := start(t, InstantConfig{}, Config{})
	input := strings.Join([]string{
		`{"custom_id":"a","method":"POST","url":"/v1/chat/completions","body":{"model":"llama-3.1-8b","messages":[{"role":"user","content":"first"}],"max_tokens":8}}`,
		`not json`,
		`{"custom_id":"b","method":"POST","url":"/v1/chat/completions","body":{"model":"llama-3.1-8b","messages":[{"role":"user","content":"second !shed"}],"max_tokens":8}}`,
	}, "\n") + "\n"
	var form bytes.Buffer
	mw := multipart.NewWriter(&form)
	mw.WriteField("purpose", "batch")
	fw, _ := mw.CreateFormFile("file", "in.jsonl")
	fw.Write([]byte(input))
	mw.Close()
	do := func(method, path, ct string, body io.Reader) *http.Response {
		req, _ := http.NewRequest(method, e.url+path, body)
		req.Header.Set("Authorization", "Bearer "+testKey)
		if ct != "" {
			req.Header.Set("Content-Type", ct)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		if resp.StatusCode != 200 {
			b, _ := io.ReadAll(resp.Body)
			t.Fatalf("%s %s: %d %s", method, path, resp.StatusCode, b)
		}
		return resp
	}
	f := decode[FileObject](t, do("POST", "/v1/files", mw.FormDataContentType(), &form))
	if f.Bytes != int64(len(input)) || f.Purpose != "batch" {
		t.Fatalf("file %+v", f)
	}
	b := decode[BatchObject](t, do("POST", "/v1/batches", "application/json",
		strings.NewReader(`{"input_file_id":"`+f.ID+`","endpoint":"/v1/chat/completions","completion_window":"24h","metadata":{"job":"nightly"}}`)))
	if b.RequestCounts.Total != 3 {
		t.Fatalf("batch %+v", b)
	}
	deadline := time.Now().Add(15 * time.Second)
	for b.Status != "completed" {
		if time.Now().After(deadline) {
			t.Fatalf("batch not completed: %+v", b)
		}
		time.Sleep(50 * time.Millisecond)
		b = decode[BatchObject](t, do("GET", "/v1/batches/"+b.ID, "", nil))
	}
	if b.RequestCounts.Completed != 1 || b.RequestCounts.Failed != 2 || b.OutputFileID == nil || b.Metadata["job"] != "nightly" {
		t.Fatalf("batch %+v", b)
	}
	resp := do("GET", "/v1/files/"+*b.OutputFileID+"/content", "", nil)
	out, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if lines := strings.Split(strings.TrimSpace(string(out)), "\n"); len(lines) != 1 || !strings.Contains(lines[0], `"custom_id":"a"`) || !strings.Contains(lines[0], "echo: first") {
		t.Fatalf("output file %s", out)
	}
	resp = do("GET", "/v1/files/"+*b.ErrorFileID+"/content", "", nil)
	errs, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	// In input order: the unparsable line 2 before line 3's shed request.
	if lines := strings.Split(strings.TrimSpace(string(errs)), "\n"); len(lines) != 2 || !strings.Contains(lines[0], batch.CodeInvalidJSON) ||
		!strings.Contains(lines[1], `"custom_id":"b"`) || !strings.Contains(lines[1], `"status_code":429`) {
		t.Fatalf("error file not the two failures in input order: %s", errs)
	}
	req, _ := e.backend.Request(batchRequestID(b.ID, 1))
	if req.Priority != schemas.PriorityBatch {
		t.Fatalf("batch line submitted with priority %q", req.Priority)
	}
}

func batchRequestID(batchID string, line int) string { return batch.RequestID(batchID, line) }

// The rough edges of issue 31 a client meets first: a method the path does
// not take is a 405 naming the ones it does; a body of the wrong JSON type
// is described in JSON's terms, never Go's; a chat prompt over the limit
// points at messages, the field the client sent.
func TestErrorAnswersSayWhatTheClientSent(t *testing.T) {
	e := start(t, InstantConfig{}, Config{})
	cases := []struct {
		name, method, path, body string
		status                   int
		code, param, allow       string
	}{
		{"GET on chat", http.MethodGet, "/v1/chat/completions", "", 405, gw.CodeMethodNotAllowed, "", "POST"},
		{"DELETE on batches", http.MethodDelete, "/v1/batches", "", 405, gw.CodeMethodNotAllowed, "", "GET, POST"},
		{"max_tokens as a string", http.MethodPost, "/v1/chat/completions",
			`{"model":"m","max_tokens":"16","messages":[{"role":"user","content":"x"}]}`, 400, schemas.CodeMalformed, "", ""},
		{"messages as an object", http.MethodPost, "/v1/chat/completions", `{"model":"m","messages":{"role":"user"}}`, 400, schemas.CodeMalformed, "", ""},
		{"chat prompt too large", http.MethodPost, "/v1/chat/completions",
			`{"model":"m","messages":[{"role":"user","content":"` + strings.Repeat("x", schemas.DefaultLimits.MaxPromptBytes+1) + `"}]}`,
			413, schemas.CodePromptTooLarge, "messages", ""},
		{"completion prompt too large", http.MethodPost, "/v1/completions",
			`{"model":"m","prompt":"` + strings.Repeat("x", schemas.DefaultLimits.MaxPromptBytes+1) + `"}`,
			413, schemas.CodePromptTooLarge, "prompt", ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			req, _ := http.NewRequest(c.method, e.url+c.path, strings.NewReader(c.body))
			req.Header.Set("Authorization", "Bearer "+testKey)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			if resp.StatusCode != c.status || resp.Header.Get("Allow") != c.allow {
				b, _ := io.ReadAll(resp.Body)
				t.Fatalf("status %d Allow %q, want %d %q: %s", resp.StatusCode, resp.Header.Get("Allow"), c.status, c.allow, b)
			}
			body := decode[gw.ErrorBody](t, resp)
			param := ""
			if body.Error.Param != nil {
				param = *body.Error.Param
			}
			if body.Error.Code == nil || *body.Error.Code != c.code || param != c.param {
				t.Fatalf("error %+v, want code %s param %q", body.Error, c.code, c.param)
			}
			for _, goName := range []string{"Go ", "struct", "gateway.", "ChatCompletionRequest", "*int"} {
				if strings.Contains(body.Error.Message, goName) {
					t.Fatalf("message %q names %q", body.Error.Message, goName)
				}
			}
		})
	}
}

// With NATS gone the gateway says so at once — 503 bus_unavailable with a
// Retry-After — instead of holding the client for a publish timeout (11 s
// in issue 31), for completions and batch endpoints alike.
func TestBusDownAnswersAtOnce(t *testing.T) {
	e := start(t, InstantConfig{}, Config{})
	e.srv.Shutdown()
	for _, c := range []struct{ method, path, body string }{
		{http.MethodPost, "/v1/chat/completions", `{"model":"m","messages":[{"role":"user","content":"x"}]}`},
		{http.MethodPost, "/v1/completions", `{"model":"m","prompt":"x"}`},
		{http.MethodGet, "/v1/batches", ""},
	} {
		req, _ := http.NewRequest(c.method, e.url+c.path, strings.NewReader(c.body))
		req.Header.Set("Authorization", "Bearer "+testKey)
		start := time.Now()
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		took := time.Since(start)
		body := decode[gw.ErrorBody](t, resp)
		if resp.StatusCode != http.StatusServiceUnavailable || body.Error.Code == nil || *body.Error.Code != gw.CodeUnavailable || resp.Header.Get("Retry-After") != "1" {
			t.Fatalf("%s %s: %d %+v, want 503 %s", c.method, c.path, resp.StatusCode, body.Error, gw.CodeUnavailable)
		}
		if took > 2*time.Second {
			t.Fatalf("%s %s took %s to say the bus is down", c.method, c.path, took)
		}
	}
}
