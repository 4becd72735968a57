package gateway

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/switchyard-ai/switchyard/internal/core/catalog"
	"github.com/switchyard-ai/switchyard/schemas"
)

func TestParseRouting(t *testing.T) {
	tests := []struct {
		name    string
		headers map[string]string
		meta    map[string]string
		want    Routing
		code    string
		field   string
	}{
		{name: "empty"},
		{name: "headers", headers: map[string]string{HeaderPriority: "Interactive", HeaderDeadlineMs: "1500", HeaderWorkflowID: "wf-1", HeaderWorkflowStep: "2", HeaderWorkflowOf: "5"},
			want: Routing{Priority: "interactive", DeadlineMs: 1500, Workflow: &schemas.Workflow{ID: "wf-1", Step: 2, Of: 5}}},
		{name: "metadata", meta: map[string]string{"priority": "batch", "deadline_ms": "60000", "workflow_id": "w", "workflow_step": "3", "workflow_deadline_ms": "9000", "session_id": "s1", "team": "search"},
			want: Routing{Priority: "batch", DeadlineMs: 60000, Workflow: &schemas.Workflow{ID: "w", Step: 3, DeadlineMs: 9000}, SessionID: "s1", Metadata: map[string]string{"team": "search"}}},
		{name: "header wins over metadata", headers: map[string]string{HeaderPriority: "critical"}, meta: map[string]string{"priority": "batch"},
			want: Routing{Priority: "critical"}},
		{name: "workflow step defaults to 1", headers: map[string]string{HeaderWorkflowID: "w"}, want: Routing{Workflow: &schemas.Workflow{ID: "w", Step: 1}}},
		{name: "bad priority", headers: map[string]string{HeaderPriority: "urgent"}, code: schemas.CodeInvalidPriority, field: HeaderPriority},
		{name: "bad deadline", meta: map[string]string{"deadline_ms": "soon"}, code: schemas.CodeInvalidDeadline, field: "metadata.deadline_ms"},
		{name: "zero deadline", headers: map[string]string{HeaderDeadlineMs: "0"}, code: schemas.CodeInvalidDeadline},
		{name: "step past of", headers: map[string]string{HeaderWorkflowID: "w", HeaderWorkflowStep: "4", HeaderWorkflowOf: "3"}, code: schemas.CodeInvalidWorkflow},
		{name: "step without id", headers: map[string]string{HeaderWorkflowStep: "2"}, code: schemas.CodeInvalidWorkflow},
		{name: "bad workflow id", headers: map[string]string{HeaderWorkflowID: "a.b"}, code: schemas.CodeInvalidWorkflow},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := http.Header{}
			for k, v := range tt.headers {
				h.Set(k, v)
			}
			got, err := ParseRouting(h, tt.meta)
			if tt.code != "" {
				if err == nil || err.Code != tt.code {
					t.Fatalf("err = %v, want code %s", err, tt.code)
				}
				if tt.field != "" && err.Field != tt.field {
					t.Fatalf("field = %q, want %q", err.Field, tt.field)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			gj, _ := json.Marshal(got)
			wj, _ := json.Marshal(tt.want)
			if string(gj) != string(wj) {
				t.Fatalf("got %s\nwant %s", gj, wj)
			}
		})
	}
}

func TestFromError(t *testing.T) {
	tests := []struct {
		code       string
		status     int
		outCode    string
		retryAfter int
	}{
		{schemas.CodeMalformed, 400, schemas.CodeMalformed, 0},
		{schemas.CodeInvalidMaxTokens, 400, schemas.CodeInvalidMaxTokens, 0},
		{schemas.CodeContextTooLong, 400, CodeContextExceeded, 0},
		{schemas.CodeUnknownModel, 404, CodeModelNotFound, 0},
		{schemas.CodePromptTooLarge, 413, schemas.CodePromptTooLarge, 0},
		{schemas.CodeUnknownTenant, 401, schemas.CodeUnknownTenant, 0},
		{schemas.CodePriorityNotAllowed, 403, schemas.CodePriorityNotAllowed, 0},
		{schemas.CodeShed, 429, schemas.CodeShed, RetryAfterShed},
		{schemas.CodeQuotaExceeded, 429, schemas.CodeQuotaExceeded, RetryAfterQuota},
		{schemas.CodeBudgetExhausted, 429, schemas.CodeBudgetExhausted, 0},
		{schemas.CodeDeadlineExceeded, 504, schemas.CodeDeadlineExceeded, 0},
		{schemas.CodeWorkflowDoomed, 504, schemas.CodeWorkflowDoomed, 0},
		{schemas.CodeCancelled, 499, schemas.CodeCancelled, 0},
		{schemas.CodeUnplaceable, 422, schemas.CodeUnplaceable, 0},
		{schemas.CodeRetryBudget, 503, schemas.CodeRetryBudget, RetryAfterRetry},
		{schemas.CodeWorkerFailed, 502, schemas.CodeWorkerFailed, 0},
		{schemas.CodeInternal, 500, schemas.CodeInternal, 0},
	}
	for _, tt := range tests {
		t.Run(tt.code, func(t *testing.T) {
			e := FromError(schemas.Errf(tt.code, "f", "msg"))
			if e.Status != tt.status || *e.Body.Error.Code != tt.outCode || e.RetryAfter != tt.retryAfter {
				t.Fatalf("got status %d code %s retry %d, want %d %s %d", e.Status, *e.Body.Error.Code, e.RetryAfter, tt.status, tt.outCode, tt.retryAfter)
			}
			if e.Body.Error.Param == nil || *e.Body.Error.Param != "f" || e.Body.Error.Message != "msg" {
				t.Fatalf("param/message lost: %+v", e.Body.Error)
			}
		})
	}
	if _, isErr := FromResult(schemas.Result{Status: schemas.StatusOK}); isErr {
		t.Fatal("ok result mapped to an error")
	}
	if e, _ := FromResult(schemas.Result{Status: schemas.StatusShed}); e.Status != 429 {
		t.Fatalf("shed without error object: status %d", e.Status)
	}
	b, _ := json.Marshal(Unauthorized("no").Body)
	if string(b) != `{"error":{"message":"no","type":"invalid_request_error","param":null,"code":"invalid_api_key"}}` {
		t.Fatalf("error body %s", b)
	}
}

func TestChatToRequest(t *testing.T) {
	body := `{"model":"llama-3.1-8b","messages":[{"role":"system","content":"be brief"},{"role":"user","content":[{"type":"text","text":"hi "},{"type":"text","text":"there"}]}],"max_completion_tokens":32,"temperature":0,"stream":true,"user":"u1","metadata":{"priority":"interactive","k":"v"},"top_p":0.9,"stop":"\n\n","response_format":{"type":"json_object"}}`
	var b ChatCompletionRequest
	if err := DecodeJSON([]byte(body), &b); err != nil {
		t.Fatal(err)
	}
	rt, perr := ParseRouting(http.Header{}, b.Metadata)
	if perr != nil {
		t.Fatal(perr)
	}
	req, err := ChatToRequest("id1", b, rt, 99)
	if err != nil {
		t.Fatal(err)
	}
	if req.ID != "id1" || req.MaxTokens != 32 || !req.Stream || req.Priority != "interactive" || req.SessionID != "u1" ||
		len(req.Messages) != 2 || req.Messages[1].Content != "hi there" || req.Metadata["k"] != "v" || *req.Temperature != 0 {
		t.Fatalf("request %+v", req)
	}
	// What changes the answer is carried to the request (and so into a
	// cache key), not dropped.
	if req.TopP == nil || *req.TopP != 0.9 || len(req.Stop) != 1 || req.Stop[0] != "\n\n" || req.ResponseFormat["type"] != "json_object" {
		t.Fatalf("top_p, stop or response_format lost: %+v", req)
	}

	bad := []struct {
		name, body, code string
	}{
		{"no messages", `{"model":"m","messages":[]}`, schemas.CodeMissingPrompt},
		{"n=2", `{"model":"m","n":2,"messages":[{"role":"user","content":"x"}]}`, schemas.CodeMalformed},
		{"image part", `{"model":"m","messages":[{"role":"user","content":[{"type":"image_url"}]}]}`, schemas.CodeInvalidMessage},
		{"tools", `{"model":"m","tools":[{"type":"function"}],"messages":[{"role":"user","content":"x"}]}`, schemas.CodeMalformed},
		{"stop not strings", `{"model":"m","stop":[1],"messages":[{"role":"user","content":"x"}]}`, schemas.CodeMalformed},
	}
	for _, tt := range bad {
		t.Run(tt.name, func(t *testing.T) {
			var b ChatCompletionRequest
			if err := DecodeJSON([]byte(tt.body), &b); err != nil {
				t.Fatal(err)
			}
			if _, err := ChatToRequest("x", b, Routing{}, 10); err == nil || err.Code != tt.code {
				t.Fatalf("err %v, want %s", err, tt.code)
			}
		})
	}
	var x ChatCompletionRequest
	for _, s := range []string{"", "{", `{"model":1}`, `{} {}`} {
		if err := DecodeJSON([]byte(s), &x); err == nil || err.Code != schemas.CodeMalformed {
			t.Fatalf("DecodeJSON(%q) = %v, want malformed", s, err)
		}
	}
}

func TestCompletionToRequest(t *testing.T) {
	tests := []struct {
		body, prompt, code string
		max, stop          int
	}{
		{body: `{"model":"m","prompt":"once"}`, prompt: "once", max: 7},
		{body: `{"model":"m","prompt":["one"],"max_tokens":3}`, prompt: "one", max: 3},
		{body: `{"model":"m","prompt":"p","stop":["a","b"]}`, prompt: "p", max: 7, stop: 2},
		{body: `{"model":"m","prompt":"p","stop":{}}`, code: schemas.CodeMalformed},
		{body: `{"model":"m","prompt":["a","b"]}`, code: schemas.CodeMalformed},
		{body: `{"model":"m","prompt":[1,2]}`, code: schemas.CodeMalformed},
		{body: `{"model":"m"}`, code: schemas.CodeMissingPrompt},
	}
	for _, tt := range tests {
		var b CompletionRequest
		if err := DecodeJSON([]byte(tt.body), &b); err != nil {
			t.Fatal(err)
		}
		req, err := CompletionToRequest("i", b, Routing{}, 7)
		if tt.code != "" {
			if err == nil || err.Code != tt.code {
				t.Fatalf("%s: err %v, want %s", tt.body, err, tt.code)
			}
			continue
		}
		if err != nil || req.Prompt != tt.prompt || req.MaxTokens != tt.max || len(req.Stop) != tt.stop {
			t.Fatalf("%s: %+v %v", tt.body, req, err)
		}
	}
}

func TestStreamState(t *testing.T) {
	chunk := func(seq uint64, text string) schemas.TokenChunk { return schemas.TokenChunk{Seq: seq, Text: text} }
	tests := []struct {
		name    string
		chunks  []schemas.TokenChunk
		final   string
		relayed string
		rest    string
		restOK  bool
	}{
		{"in order", []schemas.TokenChunk{chunk(1, "a"), chunk(2, "b")}, "abc", "ab", "c", true},
		{"no chunks", nil, "all", "", "all", true},
		{"gap stops relaying", []schemas.TokenChunk{chunk(1, "a"), chunk(3, "c"), chunk(4, "d")}, "abcd", "a", "bcd", true},
		{"retry restarts at 1", []schemas.TokenChunk{chunk(1, "x"), chunk(2, "y"), chunk(1, "x")}, "xyz", "xy", "z", true},
		{"diverged final", []schemas.TokenChunk{chunk(1, "x")}, "abc", "x", "", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var s StreamState
			var got strings.Builder
			for _, c := range tt.chunks {
				got.WriteString(s.Chunk(c))
			}
			rest, ok := s.Final(tt.final)
			if got.String() != tt.relayed || rest != tt.rest || ok != tt.restOK {
				t.Fatalf("relayed %q rest %q ok %v; want %q %q %v", got.String(), rest, ok, tt.relayed, tt.rest, tt.restOK)
			}
		})
	}
}

func TestKeys(t *testing.T) {
	k, err := ParseKeys([]byte(`{"tenants":{"acme":{"weight":3}},"api_keys":{"sk-a":"acme","sk-b":"beta"}}`))
	if err != nil {
		t.Fatal(err)
	}
	if tn, ok := k.Tenant("sk-a"); !ok || tn != "acme" {
		t.Fatalf("sk-a -> %q %v", tn, ok)
	}
	for _, bad := range []string{"", "sk-", "sk-c"} {
		if _, ok := k.Tenant(bad); ok {
			t.Fatalf("key %q accepted", bad)
		}
	}
	for _, doc := range []string{`{"api_keys":{"k":"a.b"}}`, `{"api_keys":{"":"a"}}`, `{"api_keys":[1]}`, `nope`} {
		if _, err := ParseKeys([]byte(doc)); err == nil {
			t.Fatalf("ParseKeys(%s) accepted", doc)
		}
	}
	for _, tt := range []struct {
		h, key string
		ok     bool
	}{{"Bearer sk-1", "sk-1", true}, {"bearer  sk-2 ", "sk-2", true}, {"Basic x", "", false}, {"Bearer ", "", false}, {"", "", false}} {
		if key, ok := BearerKey(tt.h); key != tt.key || ok != tt.ok {
			t.Fatalf("BearerKey(%q) = %q %v", tt.h, key, ok)
		}
	}
}

func TestModelsAndChunks(t *testing.T) {
	ms := catalog.Default().Models()
	l := Models(ms)
	if l.Object != "list" || len(l.Data) != len(ms)+1 || l.Data[0].ID != AutoModel {
		t.Fatalf("models %+v", l)
	}
	res := schemas.Result{Status: schemas.StatusOK, Text: "hello", Model: "m", Usage: schemas.Usage{PromptTokens: 3, CompletionTokens: 2, CachedTokens: 1}}
	c := ChatResponse("r1", 5, "asked", res)
	if c.ID != "chatcmpl-r1" || c.Choices[0].FinishReason != "stop" || c.Usage.TotalTokens != 5 || c.Usage.PromptTokensDetails.CachedTokens != 1 || c.Model != "m" {
		t.Fatalf("chat response %+v", c)
	}
	ev, err := SSEEvent(ChatChunk("r1", 5, "m", "assistant", "he"))
	if err != nil {
		t.Fatal(err)
	}
	want := `data: {"id":"chatcmpl-r1","object":"chat.completion.chunk","created":5,"model":"m","choices":[{"index":0,"delta":{"role":"assistant","content":"he"},"finish_reason":null,"logprobs":null}]}` + "\n\n"
	if string(ev) != want {
		t.Fatalf("chunk\n%s\nwant\n%s", ev, want)
	}
	// Usage travels once, in the trailing chunk with empty choices, never
	// also in the finish chunk (a client summing chunks would count it twice).
	fin, _ := SSEEvent(ChatFinalChunk("r1", 5, "m", "length"))
	if !strings.Contains(string(fin), `"finish_reason":"length"`) || strings.Contains(string(fin), `"usage"`) {
		t.Fatalf("final chunk %s", fin)
	}
	uc, _ := SSEEvent(ChatUsageChunk("r1", 5, "m", UsageOf(res.Usage)))
	if !strings.Contains(string(uc), `"choices":[]`) || !strings.Contains(string(uc), `"total_tokens":5`) {
		t.Fatalf("usage chunk %s", uc)
	}
	tfin, _ := SSEEvent(TextFinalChunk("r1", 5, "m", "stop"))
	tuc, _ := SSEEvent(TextUsageChunk("r1", 5, "m", UsageOf(res.Usage)))
	if strings.Contains(string(tfin), `"usage"`) || !strings.Contains(string(tuc), `"total_tokens":5`) || !strings.Contains(string(tuc), `"choices":[]`) {
		t.Fatalf("text final %s usage %s", tfin, tuc)
	}
}
