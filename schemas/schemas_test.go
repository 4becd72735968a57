package schemas

import (
	"reflect"
	"strings"
	"testing"
	"time"
)

func TestCodecRoundTripBothFormats(t *testing.T) {
	temp := 0.0
	dl := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	in := Request{ID: "r1", Model: "llama-3.1-8b", Messages: []Message{{Role: "user", Content: "hi"}}, MaxTokens: 8,
		Temperature: &temp, Priority: PriorityInteractive, DeadlineMs: 1500, Deadline: &dl,
		Workflow: &Workflow{ID: "wf", Step: 2, Of: 3, ToolState: "t"}, Metadata: map[string]string{"task": "classify"}}
	for _, f := range []Format{JSON, Msgpack} {
		b, err := Marshal(f, in)
		if err != nil {
			t.Fatalf("%s marshal: %v", f, err)
		}
		var out Request
		if err := Unmarshal(f, b, &out); err != nil {
			t.Fatalf("%s unmarshal: %v", f, err)
		}
		// msgpack decodes times in the local zone: the instant must match.
		if out.Deadline == nil || !out.Deadline.Equal(*in.Deadline) {
			t.Fatalf("%s deadline %v, want %v", f, out.Deadline, in.Deadline)
		}
		out.Deadline = in.Deadline
		if !reflect.DeepEqual(in, out) {
			t.Fatalf("%s round trip:\n in %+v\nout %+v", f, in, out)
		}
	}
}

func TestFormatFromContentType(t *testing.T) {
	tests := []struct {
		ct      string
		want    Format
		wantErr bool
	}{
		{"", JSON, false},
		{"application/json; charset=utf-8", JSON, false},
		{"application/msgpack", Msgpack, false},
		{"application/x-msgpack", Msgpack, false},
		{"application/protobuf", JSON, true},
	}
	for _, tc := range tests {
		got, err := FormatFromContentType(tc.ct)
		if (err != nil) != tc.wantErr || (!tc.wantErr && got != tc.want) {
			t.Errorf("FormatFromContentType(%q) = %v, %v", tc.ct, got, err)
		}
		if err != nil {
			if e, ok := err.(*Error); !ok || e.Code != CodeUnsupportedContentType {
				t.Errorf("error %v is not a named unsupported_content_type", err)
			}
		}
	}
}

func TestUnmarshalRejectsTrailingJSON(t *testing.T) {
	var r Request
	if err := Unmarshal(JSON, []byte(`{"model":"m"} {"x":1}`), &r); err == nil {
		t.Fatal("trailing data must be an error")
	}
}

func TestValidate(t *testing.T) {
	now := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	past := now.Add(-time.Second)
	known := func(m string) bool { return m == "llama-3.1-8b" }
	ok := func() Request { return Request{Model: "llama-3.1-8b", Prompt: "hi", MaxTokens: 4} }
	tests := []struct {
		name string
		mut  func(*Request)
		code string
	}{
		{"valid", func(*Request) {}, ""},
		{"auto model is allowed", func(r *Request) { r.Model = "auto" }, ""},
		{"bad id", func(r *Request) { r.ID = "has space" }, CodeInvalidID},
		{"missing model", func(r *Request) { r.Model = " " }, CodeMissingModel},
		{"unknown model", func(r *Request) { r.Model = "gpt-17" }, CodeUnknownModel},
		{"no prompt", func(r *Request) { r.Prompt = "" }, CodeMissingPrompt},
		{"both prompt and messages", func(r *Request) { r.Messages = []Message{{Role: "user", Content: "x"}} }, CodeAmbiguousPrompt},
		{"bad role", func(r *Request) { r.Prompt = ""; r.Messages = []Message{{Role: "robot", Content: "x"}} }, CodeInvalidMessage},
		{"zero max_tokens", func(r *Request) { r.MaxTokens = 0 }, CodeInvalidMaxTokens},
		{"huge max_tokens", func(r *Request) { r.MaxTokens = 1 << 20 }, CodeInvalidMaxTokens},
		{"prompt too large", func(r *Request) { r.Prompt = strings.Repeat("x", DefaultLimits.MaxPromptBytes+1) }, CodePromptTooLarge},
		{"bad temperature", func(r *Request) { v := 3.0; r.Temperature = &v }, CodeInvalidTemperature},
		{"zero top_p", func(r *Request) { v := 0.0; r.TopP = &v }, CodeInvalidTopP},
		{"top_p above 1", func(r *Request) { v := 1.5; r.TopP = &v }, CodeInvalidTopP},
		{"five stop sequences", func(r *Request) { r.Stop = []string{"a", "b", "c", "d", "e"} }, CodeOversized},
		{"bad priority", func(r *Request) { r.Priority = "urgent" }, CodeInvalidPriority},
		{"negative deadline", func(r *Request) { r.DeadlineMs = -1 }, CodeInvalidDeadline},
		{"negative ttft target", func(r *Request) { r.TTFTTargetMs = -5 }, CodeInvalidDeadline},
		{"huge tpot target", func(r *Request) { r.TPOTTargetMs = 1e12 }, CodeInvalidDeadline},
		{"deadline in the past", func(r *Request) { r.Deadline = &past }, CodeInvalidDeadline},
		{"workflow step 0", func(r *Request) { r.Workflow = &Workflow{ID: "w", Step: 0} }, CodeInvalidWorkflow},
		{"workflow step beyond of", func(r *Request) { r.Workflow = &Workflow{ID: "w", Step: 4, Of: 3} }, CodeInvalidWorkflow},
		{"newer wire version", func(r *Request) { r.V = Version + 1 }, CodeMalformed},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := ok()
			tc.mut(&r)
			e := r.Validate(now, known, Limits{})
			switch {
			case tc.code == "" && e != nil:
				t.Fatalf("unexpected error %v", e)
			case tc.code != "" && (e == nil || e.Code != tc.code):
				t.Fatalf("error %v, want code %s", e, tc.code)
			}
		})
	}
}

func TestEffectiveDeadlineTakesTheEarlier(t *testing.T) {
	now := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	abs := now.Add(2 * time.Second)
	r := Request{DeadlineMs: 5000, Deadline: &abs}
	if got := r.EffectiveDeadline(now, time.Minute); !got.Equal(abs) {
		t.Fatalf("got %v want %v", got, abs)
	}
	r = Request{}
	if got := r.EffectiveDeadline(now, time.Minute); !got.Equal(now.Add(time.Minute)) {
		t.Fatalf("fallback: got %v", got)
	}
}

func TestStatusForCode(t *testing.T) {
	for code, want := range map[string]string{
		CodeShed: StatusShed, CodeDeadlineExceeded: StatusFailed, CodeCancelled: StatusFailed,
		CodeMalformed: StatusRejected, CodeQuotaExceeded: StatusRejected, CodeRetryBudget: StatusFailed,
	} {
		if got := StatusForCode(code); got != want {
			t.Errorf("StatusForCode(%s) = %s, want %s", code, got, want)
		}
	}
}

// prompt_too_large names the field the client sent: a chat client is
// pointed at its messages, not at a prompt it never set.
func TestPromptTooLargeNamesTheField(t *testing.T) {
	big := strings.Repeat("x", DefaultLimits.MaxPromptBytes+1)
	for _, c := range []struct {
		r     Request
		field string
	}{
		{Request{Model: "m", Prompt: big, MaxTokens: 4}, "prompt"},
		{Request{Model: "m", Messages: []Message{{Role: "user", Content: big}}, MaxTokens: 4}, "messages"},
	} {
		if e := c.r.Validate(time.Now(), nil, Limits{}); e == nil || e.Code != CodePromptTooLarge || e.Field != c.field {
			t.Errorf("error %v, want %s on %s", e, CodePromptTooLarge, c.field)
		}
	}
}

// The parameters that change an answer survive both encodings, so a
// msgpack client's stop, tools and response_format reach the cache key as
// a JSON client's do.
func TestAnswerParametersRoundTrip(t *testing.T) {
	top := 0.5
	in := Request{Model: "m", Prompt: "p", MaxTokens: 4, TopP: &top, Stop: []string{"\n"},
		ResponseFormat: map[string]any{"type": "json_object"},
		Tools:          []map[string]any{{"type": "function", "function": map[string]any{"name": "f"}}}}
	for _, f := range []Format{JSON, Msgpack} {
		b, err := Marshal(f, in)
		if err != nil {
			t.Fatal(err)
		}
		var out Request
		if err := Unmarshal(f, b, &out); err != nil {
			t.Fatal(err)
		}
		fn, _ := out.Tools[0]["function"].(map[string]any)
		if out.TopP == nil || *out.TopP != 0.5 || len(out.Stop) != 1 || out.ResponseFormat["type"] != "json_object" || fn["name"] != "f" {
			t.Errorf("%v: %+v", f, out)
		}
	}
}

// A decode failure is described in JSON's terms, never Go's: no struct,
// package or Go type name reaches a client.
func TestDecodeErrorTextNamesNoGoTypes(t *testing.T) {
	cases := []struct {
		body string
		want string
	}{
		{`{"model":"m","max_tokens":"16"}`, `field "max_tokens" must be an integer, got string`},
		{`{"model":7}`, `field "model" must be a string, got number`},
		{`{"messages":{"role":"user"}}`, `field "messages" must be an array, got object`},
		{`{"temperature":true}`, `field "temperature" must be a number, got bool`},
		{`[1]`, `the body must be an object, got array`},
		{`{"model":}`, `invalid JSON at byte 10`},
		{`{"model":"m"`, `ends before the value is complete`},
		{`{"model":"m"} {}`, `trailing data`},
	}
	for _, c := range cases {
		var r Request
		err := Unmarshal(JSON, []byte(c.body), &r)
		if err == nil {
			t.Fatalf("%s decoded", c.body)
		}
		got := DecodeErrorText(err)
		if !strings.Contains(got, c.want) {
			t.Errorf("%s: %q, want it to say %q", c.body, got, c.want)
		}
		for _, goName := range []string{"Go ", "schemas.", "Request.", "int64", "*float64", "struct"} {
			if strings.Contains(got, goName) {
				t.Errorf("%s: %q names %q", c.body, got, goName)
			}
		}
	}
	var r Request
	if err := Unmarshal(Msgpack, []byte{0xc1}, &r); err == nil || strings.Contains(DecodeErrorText(err), "schemas.") {
		t.Errorf("msgpack: %v", DecodeErrorText(err))
	}
}
