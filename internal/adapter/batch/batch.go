// Package batch owns Switchyard's batch submission in the OpenAI Batch API
// JSONL format: parsing input lines ({custom_id, method, url, body}) into
// batch-class schemas.Request values with deterministic request ids,
// formatting results as OpenAI batch output and error-file lines, and the
// batch state record kept in the JetStream KV bucket sy_batches. Parsing and
// formatting are pure functions; store.go is the only part that talks to
// NATS.
package batch

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/switchyard-ai/switchyard/internal/adapter/gateway"
	"github.com/switchyard-ai/switchyard/schemas"
)

// The endpoints a batch line may target. Embeddings and the Responses API
// are not served by Switchyard's engines, so lines naming them are refused
// per line rather than failing the whole batch.
const (
	EndpointChat       = "/v1/chat/completions"
	EndpointCompletion = "/v1/completions"
)

// Error codes written to the error file for lines that never became a
// request. They follow OpenAI's batch error codes where one exists.
const (
	CodeInvalidJSON       = "invalid_json"
	CodeMissingCustomID   = "missing_custom_id"
	CodeDuplicateCustomID = "duplicate_custom_id"
	CodeInvalidMethod     = "invalid_method"
	CodeInvalidURL        = "invalid_url"
	CodeInvalidBody       = "invalid_body"
	CodeLineTooLong       = "line_too_long"
	CodeNotFinished       = "not_finished"
)

// MaxLineBytes bounds one input line. OpenAI caps a whole batch file at
// 200 MB; a single line beyond this is almost certainly a broken file.
const MaxLineBytes = 4 << 20

// DefaultDeadline is the completion window of a batch: OpenAI's 24h.
const DefaultDeadline = 24 * time.Hour

// Options shapes how lines become requests.
type Options struct {
	// Deadline is every request's latency budget; zero means DefaultDeadline.
	// It cannot exceed schemas.DefaultLimits.MaxDeadline, which the admitter
	// enforces.
	Deadline time.Duration
	// DefaultMaxTokens applies when a body sets neither max_tokens nor
	// max_completion_tokens (OpenAI lets both be omitted; Switchyard needs a
	// bound to plan KV memory). Zero means 256.
	DefaultMaxTokens int
}

func (o Options) withDefaults() Options {
	if o.Deadline <= 0 {
		o.Deadline = DefaultDeadline
	}
	if o.DefaultMaxTokens <= 0 {
		o.DefaultMaxTokens = 256
	}
	return o
}

// InputLine is one line of an OpenAI batch input file.
type InputLine struct {
	CustomID string          `json:"custom_id"`
	Method   string          `json:"method"`
	URL      string          `json:"url"`
	Body     json.RawMessage `json:"body"`
}

// Item is one accepted line: the request to publish and how to map its
// result back.
type Item struct {
	// Line is the 1-based line number in the input file.
	Line      int    `json:"line"`
	CustomID  string `json:"custom_id"`
	RequestID string `json:"request_id"`
	URL       string `json:"url"`
	// Request is not stored in the batch record: it is in the SUBMIT stream.
	Request schemas.Request `json:"-"`
}

// LineError is one line that never became a request.
type LineError struct {
	Line     int    `json:"line"`
	CustomID string `json:"custom_id,omitempty"`
	Code     string `json:"code"`
	Message  string `json:"message"`
}

func (e LineError) Error() string {
	return fmt.Sprintf("line %d: %s: %s", e.Line, e.Code, e.Message)
}

// NewID derives a batch id from the tenant and the file's bytes, so that
// submitting the same file again names the same batch and, through the
// per-line request ids, the same requests, which JetStream then dedupes.
func NewID(tenant string, content []byte) string {
	h := sha256.New()
	h.Write([]byte(tenant))
	h.Write([]byte{0})
	h.Write(content)
	return "batch_" + hex.EncodeToString(h.Sum(nil))[:24]
}

// RequestID is the request id of line n of batch id. It is a valid
// schemas id as long as the batch id is (the id charset plus '-').
func RequestID(batchID string, line int) string {
	return fmt.Sprintf("%s-%06d", batchID, line)
}

// Parse reads an OpenAI batch input file. Bad lines become LineErrors; only
// a read failure of r itself is returned as an error. Blank lines are
// skipped but still counted, so line numbers match an editor's.
func Parse(r io.Reader, batchID string, opts Options) ([]Item, []LineError, error) {
	if !schemas.ValidID(batchID) {
		return nil, nil, fmt.Errorf("batch id %q must be 1-128 characters of [A-Za-z0-9_-]", batchID)
	}
	opts = opts.withDefaults()
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), MaxLineBytes)
	var (
		items []Item
		bad   []LineError
		seen  = map[string]int{}
		n     int
	)
	for sc.Scan() {
		n++
		raw := bytes.TrimSpace(sc.Bytes())
		if len(raw) == 0 {
			continue
		}
		it, lerr := ParseLine(batchID, n, raw, opts)
		if lerr != nil {
			bad = append(bad, *lerr)
			continue
		}
		if first, dup := seen[it.CustomID]; dup {
			bad = append(bad, LineError{Line: n, CustomID: it.CustomID, Code: CodeDuplicateCustomID,
				Message: fmt.Sprintf("custom_id %q already used on line %d", it.CustomID, first)})
			continue
		}
		seen[it.CustomID] = n
		items = append(items, it)
	}
	if err := sc.Err(); err != nil {
		if errors.Is(err, bufio.ErrTooLong) {
			// The scanner cannot resume after an over-long token, so the rest
			// of the file is reported as one error rather than silently lost.
			bad = append(bad, LineError{Line: n + 1, Code: CodeLineTooLong,
				Message: fmt.Sprintf("line longer than %d bytes; this and later lines were not read", MaxLineBytes)})
			return items, bad, nil
		}
		return items, bad, fmt.Errorf("read batch input: %w", err)
	}
	return items, bad, nil
}

// openAIBody is the subset of the chat and completions request bodies that
// Switchyard understands. Unknown fields are ignored, as OpenAI does for
// fields a model does not support.
// ParseLine turns one input line into an Item, or says why it cannot.
func ParseLine(batchID string, line int, raw []byte, opts Options) (Item, *LineError) {
	opts = opts.withDefaults()
	fail := func(customID, code, format string, args ...any) (Item, *LineError) {
		return Item{}, &LineError{Line: line, CustomID: customID, Code: code, Message: fmt.Sprintf(format, args...)}
	}
	var in InputLine
	if err := json.Unmarshal(raw, &in); err != nil {
		return fail("", CodeInvalidJSON, "line is not a JSON object: %s", schemas.DecodeErrorText(err))
	}
	if strings.TrimSpace(in.CustomID) == "" {
		return fail("", CodeMissingCustomID, "custom_id is required")
	}
	if in.Method != "POST" {
		return fail(in.CustomID, CodeInvalidMethod, "method must be POST, got %q", in.Method)
	}
	if in.URL != EndpointChat && in.URL != EndpointCompletion {
		return fail(in.CustomID, CodeInvalidURL, "url %q is not supported; use %s or %s", in.URL, EndpointChat, EndpointCompletion)
	}
	if len(in.Body) == 0 || bytes.Equal(in.Body, []byte("null")) {
		return fail(in.CustomID, CodeInvalidBody, "body is required")
	}
	// The body is converted exactly as the HTTP gateway converts the same
	// body, so the two doors accept and refuse the same requests.
	var probe struct {
		Stream bool `json:"stream"`
	}
	if err := json.Unmarshal(in.Body, &probe); err != nil {
		return fail(in.CustomID, CodeInvalidBody, "body: %s", schemas.DecodeErrorText(err))
	}
	if probe.Stream {
		return fail(in.CustomID, CodeInvalidBody, "stream is not supported in a batch")
	}
	id := RequestID(batchID, line)
	var req schemas.Request
	var cerr *schemas.Error
	rt := gateway.Routing{Priority: schemas.PriorityBatch, DeadlineMs: opts.Deadline.Milliseconds()}
	switch in.URL {
	case EndpointChat:
		var b gateway.ChatCompletionRequest
		if err := gateway.DecodeJSON(in.Body, &b); err != nil {
			return fail(in.CustomID, CodeInvalidBody, "body: %s", err.Message)
		}
		rt.Metadata = b.Metadata
		req, cerr = gateway.ChatToRequest(id, b, rt, opts.DefaultMaxTokens)
	case EndpointCompletion:
		var b gateway.CompletionRequest
		if err := gateway.DecodeJSON(in.Body, &b); err != nil {
			return fail(in.CustomID, CodeInvalidBody, "body: %s", err.Message)
		}
		rt.Metadata = b.Metadata
		req, cerr = gateway.CompletionToRequest(id, b, rt, opts.DefaultMaxTokens)
	}
	if cerr != nil {
		return fail(in.CustomID, CodeInvalidBody, "%s", cerr.Error())
	}
	meta := map[string]string{"batch_id": batchID, "custom_id": in.CustomID}
	for k, v := range req.Metadata {
		if _, reserved := meta[k]; !reserved {
			meta[k] = v
		}
	}
	req.Metadata = meta
	// Judge here what can be judged without tenant policy or the fleet, so a
	// malformed line lands in the error file at submit time instead of as a
	// rejected result much later.
	if verr := req.Validate(time.Now(), nil, schemas.Limits{}); verr != nil {
		return fail(in.CustomID, CodeInvalidBody, "%s", verr.Error())
	}
	return Item{Line: line, CustomID: in.CustomID, RequestID: req.ID, URL: in.URL, Request: req}, nil
}

func bytesReader(b []byte) io.Reader { return bytes.NewReader(b) }
