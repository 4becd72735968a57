package gateway

import (
	"bytes"
	"encoding/json"
	"io"
	"mime/multipart"
	"net/http"
	"strings"
	"testing"
	"time"
)

// apiClient calls the gateway as the OpenAI SDK would, with the test key.
type apiClient struct {
	t   *testing.T
	url string
}

func (c apiClient) do(method, path, ct string, body io.Reader) (int, []byte) {
	c.t.Helper()
	req, err := http.NewRequest(method, c.url+path, body)
	if err != nil {
		c.t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+testKey)
	if ct != "" {
		req.Header.Set("Content-Type", ct)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		c.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}

func (c apiClient) ok(method, path, ct string, body io.Reader, v any) {
	c.t.Helper()
	code, b := c.do(method, path, ct, body)
	if code != http.StatusOK {
		c.t.Fatalf("%s %s: %d %s", method, path, code, b)
	}
	if v != nil {
		if err := json.Unmarshal(b, v); err != nil {
			c.t.Fatalf("%s %s: %v: %s", method, path, err, b)
		}
	}
}

func (c apiClient) upload(name, content string) FileObject {
	c.t.Helper()
	var form bytes.Buffer
	mw := multipart.NewWriter(&form)
	mw.WriteField("purpose", "batch")
	fw, _ := mw.CreateFormFile("file", name)
	fw.Write([]byte(content))
	mw.Close()
	var f FileObject
	c.ok("POST", "/v1/files", mw.FormDataContentType(), &form, &f)
	return f
}

func (c apiClient) waitBatch(id string, status string) BatchObject {
	c.t.Helper()
	var b BatchObject
	for end := time.Now().Add(15 * time.Second); ; {
		c.ok("GET", "/v1/batches/"+id, "", nil, &b)
		if b.Status == status {
			return b
		}
		if time.Now().After(end) {
			c.t.Fatalf("batch %s is %s, want %s: %+v", id, b.Status, status, b)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func line(customID, content string) string {
	return `{"custom_id":"` + customID + `","method":"POST","url":"/v1/chat/completions","body":{"model":"llama-3.1-8b","messages":[{"role":"user","content":"` + content + `"}],"max_tokens":8}}` + "\n"
}

// TestBatchAPISurface: files.list, files.delete, batches.list and
// batches.cancel as the OpenAI SDK calls them; error_file_id only when
// something failed; one system_fingerprint for chat and batch output.
func TestBatchAPISurface(t *testing.T) {
	e := start(t, InstantConfig{TokenDelay: 10 * time.Millisecond}, Config{})
	c := apiClient{t: t, url: e.url}

	clean := c.upload("clean.jsonl", line("a", "first")+line("b", "second"))
	time.Sleep(1100 * time.Millisecond) // created_at has second resolution: order the two
	hanging := c.upload("hang.jsonl", line("h1", "wait here !hang")+line("h2", "and here !hang"))

	var files ListObject[FileObject]
	c.ok("GET", "/v1/files", "", nil, &files)
	if len(files.Data) != 2 || files.Data[0].ID != hanging.ID || files.Data[1].ID != clean.ID || files.HasMore {
		t.Fatalf("files.list %+v, want [%s %s] newest first", files, hanging.ID, clean.ID)
	}
	c.ok("GET", "/v1/files?limit=1", "", nil, &files)
	if len(files.Data) != 1 || !files.HasMore || *files.LastID != hanging.ID {
		t.Fatalf("files.list limit=1 %+v", files)
	}
	c.ok("GET", "/v1/files?after="+hanging.ID, "", nil, &files)
	if len(files.Data) != 1 || files.Data[0].ID != clean.ID {
		t.Fatalf("files.list after %+v", files)
	}
	if code, body := c.do("GET", "/v1/files?limit=0", "", nil); code != 400 || !strings.Contains(string(body), "limit") {
		t.Fatalf("limit=0: %d %s", code, body)
	}

	var done, hung BatchObject
	c.ok("POST", "/v1/batches", "application/json", strings.NewReader(`{"input_file_id":"`+clean.ID+`","endpoint":"/v1/chat/completions","completion_window":"24h"}`), &done)
	done = c.waitBatch(done.ID, "completed")
	if done.OutputFileID == nil || done.ErrorFileID != nil || done.RequestCounts.Failed != 0 {
		t.Fatalf("clean batch %+v: want an output file and error_file_id null", done)
	}
	c.ok("POST", "/v1/batches", "application/json", strings.NewReader(`{"input_file_id":"`+hanging.ID+`","endpoint":"/v1/chat/completions","completion_window":"24h"}`), &hung)
	// Files the gateway keeps for its batches are not the client's files.
	c.ok("GET", "/v1/files", "", nil, &files)
	if len(files.Data) != 2 {
		t.Fatalf("files.list after creating batches: %+v", files)
	}

	var batches ListObject[BatchObject]
	c.ok("GET", "/v1/batches", "", nil, &batches)
	if len(batches.Data) != 2 || batches.Data[0].ID != hung.ID || batches.Data[1].ID != done.ID {
		t.Fatalf("batches.list %+v, want [%s %s]", batches, hung.ID, done.ID)
	}

	var cancelled BatchObject
	time.Sleep(100 * time.Millisecond) // the hanging requests are running
	c.ok("POST", "/v1/batches/"+hung.ID+"/cancel", "", nil, &cancelled)
	if cancelled.Status != "cancelling" && cancelled.Status != "cancelled" || cancelled.CancellingAt == nil {
		t.Fatalf("cancel answered %+v", cancelled)
	}
	cancelled = c.waitBatch(hung.ID, "cancelled")
	// Nothing was answered, so no output file to name; the error file has
	// both lines, as the HTTP API would answer them (499 cancelled), in
	// input order.
	if cancelled.CancelledAt == nil || cancelled.RequestCounts.Failed != 2 || cancelled.ErrorFileID == nil || cancelled.OutputFileID != nil {
		t.Fatalf("cancelled batch %+v: want an error file and output_file_id null", cancelled)
	}
	_, errFile := c.do("GET", "/v1/files/"+*cancelled.ErrorFileID+"/content", "", nil)
	lines := strings.Split(strings.TrimSpace(string(errFile)), "\n")
	if len(lines) != 2 || !strings.Contains(lines[0], `"custom_id":"h1"`) || !strings.Contains(lines[1], `"custom_id":"h2"`) {
		t.Fatalf("cancelled error file not h1, h2: %s", errFile)
	}
	for _, l := range lines {
		if !strings.Contains(l, `"status_code":499`) || !strings.Contains(l, `"code":"cancelled"`) {
			t.Fatalf("cancelled line %s: want status_code 499, code cancelled", l)
		}
	}
	if code, _ := c.do("POST", "/v1/batches/batch_nosuch/cancel", "", nil); code != 404 {
		t.Fatalf("cancel of an unknown batch: %d", code)
	}

	// One system_fingerprint: the batch line's equals a chat completion's
	// from the same backend.
	var chatResp struct {
		SystemFingerprint string `json:"system_fingerprint"`
	}
	c.ok("POST", "/v1/chat/completions", "application/json", strings.NewReader(`{"model":"llama-3.1-8b","messages":[{"role":"user","content":"x"}],"max_tokens":4}`), &chatResp)
	_, out := c.do("GET", "/v1/files/"+*done.OutputFileID+"/content", "", nil)
	var outLine struct {
		Response struct {
			Body struct {
				SystemFingerprint string `json:"system_fingerprint"`
			} `json:"body"`
		} `json:"response"`
	}
	json.Unmarshal(bytes.SplitN(out, []byte("\n"), 2)[0], &outLine)
	if chatResp.SystemFingerprint == "" || outLine.Response.Body.SystemFingerprint != chatResp.SystemFingerprint {
		t.Fatalf("system_fingerprint: chat %q, batch %q", chatResp.SystemFingerprint, outLine.Response.Body.SystemFingerprint)
	}

	var del DeletedFile
	c.ok("DELETE", "/v1/files/"+clean.ID, "", nil, &del)
	if !del.Deleted || del.ID != clean.ID {
		t.Fatalf("files.delete %+v", del)
	}
	if code, _ := c.do("GET", "/v1/files/"+clean.ID, "", nil); code != 404 {
		t.Fatalf("deleted file still served: %d", code)
	}
	if code, _ := c.do("DELETE", "/v1/files/"+clean.ID, "", nil); code != 404 {
		t.Fatalf("second delete: %d", code)
	}
	if code, body := c.do("DELETE", "/v1/files/"+*done.OutputFileID, "", nil); code != 400 || !strings.Contains(string(body), "rendered") {
		t.Fatalf("delete of a rendered output: %d %s", code, body)
	}
}
