package batch

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"sort"

	"github.com/switchyard-ai/switchyard/internal/adapter/gateway"
	"github.com/switchyard-ai/switchyard/schemas"
)

// OutputLine is one line of an OpenAI batch output or error file.
type OutputLine struct {
	ID       string       `json:"id"`
	CustomID string       `json:"custom_id"`
	Response *Response    `json:"response"`
	Error    *OutputError `json:"error"`
}

// Response is the HTTP response a line would have received.
type Response struct {
	StatusCode int    `json:"status_code"`
	RequestID  string `json:"request_id"`
	Body       any    `json:"body"`
}

// OutputError is the error of a line that has no response at all.
type OutputError struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

// FormatResult turns a final result into an output line. ok reports
// whether it belongs in the output file (true) or the error file (false),
// which is how OpenAI splits a batch's lines.
func FormatResult(it Item, r schemas.Result) (line OutputLine, ok bool) {
	line = OutputLine{ID: "batch_req_" + it.RequestID, CustomID: it.CustomID}
	resp := &Response{StatusCode: http.StatusOK, RequestID: r.ID}
	line.Response = resp
	if ae, failed := gateway.FromResult(r); failed {
		// The gateway's own error answer: its type (not_found_error,
		// rate_limit_error, ...) and OpenAI's code names, not our status.
		resp.StatusCode, resp.Body = ae.Status, ae.Body
		return line, false
	}
	// The bodies are the gateway's own non-streaming answers, so a batch
	// line and the same request through /v1 read alike.
	created := r.FinishedAt.Unix()
	if it.URL == EndpointCompletion {
		resp.Body = gateway.CompletionResponse(r.ID, created, it.Request.Model, r)
		return line, true
	}
	resp.Body = gateway.ChatResponse(r.ID, created, it.Request.Model, r)
	return line, true
}

// FormatLineError is the error-file line of an input line that never
// became a request. Its id is derived like a request's so that re-running
// `batch results` writes identical files.
func FormatLineError(batchID string, e LineError) OutputLine {
	return OutputLine{
		ID:       "batch_req_" + RequestID(batchID, e.Line),
		CustomID: e.CustomID,
		Error:    &OutputError{Code: e.Code, Message: e.Message},
	}
}

// FormatMissing is the error-file line of a request with no final result
// yet, written only when the caller asks for partial results.
func FormatMissing(it Item) OutputLine {
	return OutputLine{
		ID:       "batch_req_" + it.RequestID,
		CustomID: it.CustomID,
		Error:    &OutputError{Code: CodeNotFinished, Message: "no final result yet for request " + it.RequestID},
	}
}

// Counts says how many lines went where.
type Counts struct {
	Output, Errors, Missing int
}

// WriteFiles writes a batch's output and error files in input line order:
// ok results to out, everything else (bad input lines, non-ok results, and
// with partial, requests without a result yet) to errOut, which may be nil
// to drop error lines. Without partial a missing result is an error, so a
// caller never mistakes an unfinished batch for a complete one.
func WriteFiles(out, errOut io.Writer, batchID string, items []Item, bad []LineError, results map[string]schemas.Result, partial bool) (Counts, error) {
	type entry struct {
		line int
		ok   bool
		out  OutputLine
	}
	var c Counts
	entries := make([]entry, 0, len(items)+len(bad))
	for _, it := range items {
		r, done := results[it.RequestID]
		if !done {
			c.Missing++
			if partial {
				entries = append(entries, entry{it.Line, false, FormatMissing(it)})
			}
			continue
		}
		l, ok := FormatResult(it, r)
		entries = append(entries, entry{it.Line, ok, l})
	}
	if c.Missing > 0 && !partial {
		return c, fmt.Errorf("%d of %d requests have no result yet; wait, or ask for partial results", c.Missing, len(items))
	}
	for _, e := range bad {
		entries = append(entries, entry{e.Line, false, FormatLineError(batchID, e)})
	}
	sort.Slice(entries, func(i, j int) bool { return entries[i].line < entries[j].line })
	outEnc := json.NewEncoder(out)
	var errEnc *json.Encoder
	if errOut != nil {
		errEnc = json.NewEncoder(errOut)
	}
	for _, e := range entries {
		switch {
		case e.ok:
			c.Output++
			if err := outEnc.Encode(e.out); err != nil {
				return c, fmt.Errorf("write output: %w", err)
			}
		case errEnc != nil:
			c.Errors++
			if err := errEnc.Encode(e.out); err != nil {
				return c, fmt.Errorf("write errors: %w", err)
			}
		default:
			c.Errors++
		}
	}
	return c, nil
}
