package batch

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/switchyard-ai/switchyard/schemas"
)

func TestParseLine(t *testing.T) {
	const id = "batch_test"
	tests := []struct {
		name     string
		line     string
		wantCode string
		check    func(t *testing.T, it Item)
	}{
		{
			name: "chat with string content",
			line: `{"custom_id":"a","method":"POST","url":"/v1/chat/completions","body":{"model":"llama-3.1-8b","messages":[{"role":"user","content":"hi there"}],"max_tokens":7,"temperature":0}}`,
			check: func(t *testing.T, it Item) {
				r := it.Request
				if r.ID != "batch_test-000001" || r.Priority != schemas.PriorityBatch || r.MaxTokens != 7 {
					t.Fatalf("request = %+v", r)
				}
				if r.DeadlineMs != (24 * time.Hour).Milliseconds() {
					t.Fatalf("deadline_ms = %d, want 24h", r.DeadlineMs)
				}
				if len(r.Messages) != 1 || r.Messages[0].Content != "hi there" || !r.Deterministic() {
					t.Fatalf("messages = %+v", r.Messages)
				}
				if r.Metadata["custom_id"] != "a" || r.Metadata["batch_id"] != id {
					t.Fatalf("metadata = %v", r.Metadata)
				}
			},
		},
		{
			name: "chat with text parts and max_completion_tokens",
			line: `{"custom_id":"b","method":"POST","url":"/v1/chat/completions","body":{"model":"m","messages":[{"role":"user","content":[{"type":"text","text":"one "},{"type":"text","text":"two"}]}],"max_completion_tokens":9,"max_tokens":3}}`,
			check: func(t *testing.T, it Item) {
				if it.Request.Messages[0].Content != "one two" || it.Request.MaxTokens != 9 {
					t.Fatalf("request = %+v", it.Request)
				}
			},
		},
		{
			name: "completion with default max tokens",
			line: `{"custom_id":"c","method":"POST","url":"/v1/completions","body":{"model":"m","prompt":["once"]}}`,
			check: func(t *testing.T, it Item) {
				if it.Request.Prompt != "once" || it.Request.MaxTokens != 256 || it.URL != EndpointCompletion {
					t.Fatalf("request = %+v", it.Request)
				}
			},
		},
		{name: "not json", line: `{"custom_id":`, wantCode: CodeInvalidJSON},
		{name: "missing custom_id", line: `{"method":"POST","url":"/v1/completions","body":{"model":"m","prompt":"x"}}`, wantCode: CodeMissingCustomID},
		{name: "GET", line: `{"custom_id":"d","method":"GET","url":"/v1/completions","body":{"model":"m","prompt":"x"}}`, wantCode: CodeInvalidMethod},
		{name: "embeddings", line: `{"custom_id":"e","method":"POST","url":"/v1/embeddings","body":{"model":"m","input":"x"}}`, wantCode: CodeInvalidURL},
		{name: "no body", line: `{"custom_id":"f","method":"POST","url":"/v1/completions"}`, wantCode: CodeInvalidBody},
		{name: "missing model", line: `{"custom_id":"g","method":"POST","url":"/v1/completions","body":{"prompt":"x"}}`, wantCode: CodeInvalidBody},
		{name: "stream", line: `{"custom_id":"h","method":"POST","url":"/v1/completions","body":{"model":"m","prompt":"x","stream":true}}`, wantCode: CodeInvalidBody},
		{name: "n=2", line: `{"custom_id":"i","method":"POST","url":"/v1/completions","body":{"model":"m","prompt":"x","n":2}}`, wantCode: CodeInvalidBody},
		{name: "image part", line: `{"custom_id":"j","method":"POST","url":"/v1/chat/completions","body":{"model":"m","messages":[{"role":"user","content":[{"type":"image_url"}]}]}}`, wantCode: CodeInvalidBody},
		{name: "prompt on chat", line: `{"custom_id":"k","method":"POST","url":"/v1/chat/completions","body":{"model":"m","prompt":"x"}}`, wantCode: CodeInvalidBody},
		{name: "bad role", line: `{"custom_id":"l","method":"POST","url":"/v1/chat/completions","body":{"model":"m","messages":[{"role":"robot","content":"x"}]}}`, wantCode: CodeInvalidBody},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			it, lerr := ParseLine(id, 1, []byte(tc.line), Options{})
			if tc.wantCode != "" {
				if lerr == nil || lerr.Code != tc.wantCode {
					t.Fatalf("error = %v, want code %s", lerr, tc.wantCode)
				}
				return
			}
			if lerr != nil {
				t.Fatalf("unexpected error %v", lerr)
			}
			tc.check(t, it)
		})
	}
}

func TestParseFile(t *testing.T) {
	in := strings.Join([]string{
		`{"custom_id":"x","method":"POST","url":"/v1/completions","body":{"model":"m","prompt":"a"}}`,
		``,
		`not json`,
		`{"custom_id":"x","method":"POST","url":"/v1/completions","body":{"model":"m","prompt":"b"}}`,
		`{"custom_id":"y","method":"POST","url":"/v1/completions","body":{"model":"m","prompt":"c"}}`,
	}, "\n")
	items, bad, err := Parse(strings.NewReader(in), "batch_f", Options{Deadline: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	if len(items) != 2 || items[0].Line != 1 || items[1].Line != 5 || items[1].RequestID != "batch_f-000005" {
		t.Fatalf("items = %+v", items)
	}
	if items[0].Request.DeadlineMs != time.Hour.Milliseconds() {
		t.Fatalf("configured deadline not applied: %d", items[0].Request.DeadlineMs)
	}
	if len(bad) != 2 || bad[0].Line != 3 || bad[0].Code != CodeInvalidJSON || bad[1].Line != 4 || bad[1].Code != CodeDuplicateCustomID {
		t.Fatalf("bad = %+v", bad)
	}
	if _, _, err := Parse(strings.NewReader(in), "bad id!", Options{}); err == nil {
		t.Fatal("invalid batch id accepted")
	}
}

func TestNewIDIsDeterministic(t *testing.T) {
	a, b := NewID("acme", []byte("x")), NewID("acme", []byte("x"))
	if a != b || NewID("beta", []byte("x")) == a || NewID("acme", []byte("y")) == a {
		t.Fatalf("ids not a function of (tenant, content): %s %s", a, b)
	}
	if !schemas.ValidID(RequestID(a, 999999)) {
		t.Fatalf("request id %q is not a valid id", RequestID(a, 999999))
	}
}

func TestFormatResult(t *testing.T) {
	fin := time.Unix(1700000000, 0)
	tests := []struct {
		name   string
		url    string
		res    schemas.Result
		ok     bool
		status int
		want   string // a substring of the JSON line
	}{
		{"chat ok", EndpointChat, schemas.Result{ID: "r1", Status: schemas.StatusOK, Text: "hello", Model: "m", Usage: schemas.Usage{PromptTokens: 3, CompletionTokens: 1, CachedTokens: 2}, FinishedAt: fin}, true, 200,
			`"body":{"id":"chatcmpl-r1","object":"chat.completion","created":1700000000,"model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"hello"},"finish_reason":"stop","logprobs":null}],"usage":{"prompt_tokens":3,"completion_tokens":1,"total_tokens":4,"prompt_tokens_details":{"cached_tokens":2}}}`},
		{"completion ok", EndpointCompletion, schemas.Result{ID: "r2", Status: schemas.StatusOK, Text: "t", FinishReason: "length", FinishedAt: fin}, true, 200, `"object":"text_completion"`},
		{"shed", EndpointChat, schemas.Result{ID: "r3", Status: schemas.StatusShed, Error: &schemas.Error{Code: schemas.CodeShed, Message: "busy"}}, false, 429, `"error":{"message":"busy","type":"rate_limit_error","param":null,"code":"shed"}`},
		// What the gateway answers the same result with: 404 not_found_error
		// under OpenAI's code name, not "rejected".
		{"unknown model", EndpointChat, schemas.Result{ID: "r4", Status: schemas.StatusRejected, Error: &schemas.Error{Code: schemas.CodeUnknownModel, Message: "no", Field: "model"}}, false, 404,
			`"error":{"message":"no","type":"not_found_error","param":"model","code":"model_not_found"}`},
		{"deadline", EndpointChat, schemas.Result{ID: "r5", Status: schemas.StatusFailed, Error: &schemas.Error{Code: schemas.CodeDeadlineExceeded}}, false, 504, `"status_code":504`},
		// Cancelled is the client's doing (HTTP 499), not a server failure.
		{"cancelled", EndpointChat, schemas.Result{ID: "r6", Status: schemas.StatusFailed, Error: &schemas.Error{Code: schemas.CodeCancelled, Message: "batch cancelled"}}, false, 499,
			`"error":{"message":"batch cancelled","type":"invalid_request_error","param":null,"code":"cancelled"}`},
		{"failed without an error", EndpointChat, schemas.Result{ID: "r7", Status: schemas.StatusFailed}, false, 500, `"type":"server_error"`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			line, ok := FormatResult(Item{CustomID: "c", RequestID: "q", URL: tc.url}, tc.res)
			if ok != tc.ok || line.Response.StatusCode != tc.status {
				t.Fatalf("ok=%v status=%d, want %v %d", ok, line.Response.StatusCode, tc.ok, tc.status)
			}
			b, _ := json.Marshal(line)
			if !bytes.Contains(b, []byte(tc.want)) || !bytes.Contains(b, []byte(`"custom_id":"c"`)) || !bytes.Contains(b, []byte(`"error":null`)) && tc.ok {
				t.Fatalf("line %s\nlacks %s", b, tc.want)
			}
		})
	}
}

func TestWriteFiles(t *testing.T) {
	items := []Item{{Line: 1, CustomID: "a", RequestID: "b-1"}, {Line: 3, CustomID: "c", RequestID: "b-3"}}
	bad := []LineError{{Line: 2, Code: CodeInvalidJSON, Message: "x"}}
	res := map[string]schemas.Result{"b-1": {ID: "b-1", Status: schemas.StatusOK}}
	var out, errs bytes.Buffer
	if _, err := WriteFiles(&out, &errs, "b", items, bad, res, false); err == nil {
		t.Fatal("missing result not reported without partial")
	}
	out.Reset()
	errs.Reset()
	c, err := WriteFiles(&out, &errs, "b", items, bad, res, true)
	if err != nil {
		t.Fatal(err)
	}
	if c != (Counts{Output: 1, Errors: 2, Missing: 1}) {
		t.Fatalf("counts = %+v", c)
	}
	lines := strings.Split(strings.TrimSpace(errs.String()), "\n")
	if len(lines) != 2 || !strings.Contains(lines[0], CodeInvalidJSON) || !strings.Contains(lines[1], CodeNotFinished) {
		t.Fatalf("error file not in line order: %q", lines)
	}
}

func TestBar(t *testing.T) {
	for _, tc := range []struct {
		n, total int
		want     string
	}{
		{0, 10, "x [>         ] 0/10   0%"},
		{5, 10, "x [=====>    ] 5/10  50%"},
		{10, 10, "x [==========] 10/10 100%"},
		{0, 0, "x [==========] 0/0 100%"},
	} {
		if got := Bar("x", tc.n, tc.total, 10, 0); !strings.HasPrefix(got, tc.want) {
			t.Errorf("Bar(%d,%d) = %q, want prefix %q", tc.n, tc.total, got, tc.want)
		}
	}
}
