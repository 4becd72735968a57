package stack

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/switchyard-ai/switchyard/schemas"
	"github.com/switchyard-ai/switchyard/services/client"
)

// startStack runs a real embedded JetStream server with every service.
func startStack(t *testing.T, cfg Config) *Stack {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	if cfg.SpeedUp == 0 {
		cfg.SpeedUp = 20
	}
	st, err := Start(ctx, cfg)
	if err != nil {
		t.Fatalf("start stack: %v", err)
	}
	t.Cleanup(st.Close)
	return st
}

// TestWalkingSkeleton publishes requests the way any NATS client would —
// a plain core publish with a JSON body, and one in msgpack — and checks
// each gets its final result; malformed and invalid ones get specific
// error results on the result subject, and the services keep running.
func TestWalkingSkeleton(t *testing.T) {
	st := startStack(t, Config{Workers: 2, MetricsAddr: "127.0.0.1:0"})
	nc, err := st.Connect("test-client")
	if err != nil {
		t.Fatal(err)
	}
	cl, err := client.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	msgpackBody, err := schemas.Marshal(schemas.Msgpack, schemas.Request{ID: "mp-1", Model: "llama-3.1-8b", Prompt: "hello in msgpack", MaxTokens: 8})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name        string
		id          string
		headerID    string
		contentType string
		body        []byte
		wantStatus  string
		wantCode    string
	}{
		{name: "json core publish", id: "json-1", body: []byte(`{"id":"json-1","model":"llama-3.1-8b","prompt":"hello","max_tokens":8}`), wantStatus: schemas.StatusOK},
		{name: "json id from header", id: "hdr-1", headerID: "hdr-1", body: []byte(`{"model":"llama-3.1-8b","messages":[{"role":"user","content":"hi"}],"max_tokens":4}`), wantStatus: schemas.StatusOK},
		{name: "msgpack", id: "mp-1", contentType: schemas.ContentMsgpack, body: msgpackBody, wantStatus: schemas.StatusOK},
		{name: "malformed json", id: "bad-1", headerID: "bad-1", body: []byte(`{"model": "llama-3.1-8b", "prompt": `), wantStatus: schemas.StatusRejected, wantCode: schemas.CodeMalformed},
		{name: "undecodable bytes with header id", id: "bin-1", headerID: "bin-1", contentType: schemas.ContentMsgpack, body: []byte{0xc1, 0xff, 0x00}, wantStatus: schemas.StatusRejected, wantCode: schemas.CodeMalformed},
		{name: "unknown model", id: "um-1", body: []byte(`{"id":"um-1","model":"gpt-17","prompt":"hi","max_tokens":8}`), wantStatus: schemas.StatusRejected, wantCode: schemas.CodeUnknownModel},
		{name: "max_tokens zero", id: "mt-0", body: []byte(`{"id":"mt-0","model":"llama-3.1-8b","prompt":"hi","max_tokens":0}`), wantStatus: schemas.StatusRejected, wantCode: schemas.CodeInvalidMaxTokens},
		{name: "max_tokens negative", id: "mt-neg", body: []byte(`{"id":"mt-neg","model":"llama-3.1-8b","prompt":"hi","max_tokens":-3}`), wantStatus: schemas.StatusRejected, wantCode: schemas.CodeInvalidMaxTokens},
		{name: "129-character id answered under itself", id: strings.Repeat("x", 129), headerID: strings.Repeat("x", 129), body: []byte(`{"model":"llama-3.1-8b","prompt":"hi","max_tokens":4}`), wantStatus: schemas.StatusRejected, wantCode: schemas.CodeInvalidID},
		{name: "unsupported content type", id: "ct-1", headerID: "ct-1", contentType: "application/protobuf", body: []byte{1, 2, 3}, wantStatus: schemas.StatusRejected, wantCode: schemas.CodeUnsupportedContentType},
	}
	for _, tc := range tests {
		m := nats.NewMsg("sy.submit.acme")
		m.Data = tc.body
		if tc.headerID != "" {
			m.Header.Set("Nats-Msg-Id", tc.headerID)
		}
		if tc.contentType != "" {
			m.Header.Set("Content-Type", tc.contentType)
		}
		if err := nc.PublishMsg(m); err != nil {
			t.Fatalf("%s: publish: %v", tc.name, err)
		}
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			res, err := cl.Result(ctx, "acme", tc.id)
			if err != nil {
				t.Fatalf("no result for %s: %v", tc.id, err)
			}
			if res.Status != tc.wantStatus {
				t.Fatalf("status %q (error %+v), want %q", res.Status, res.Error, tc.wantStatus)
			}
			if tc.wantCode != "" && (res.Error == nil || res.Error.Code != tc.wantCode) {
				t.Fatalf("error %+v, want code %q", res.Error, tc.wantCode)
			}
			if tc.wantStatus == schemas.StatusOK {
				if !res.Simulated || res.Usage.CompletionTokens == 0 || res.WorkerID == "" || res.Text == "" {
					t.Fatalf("incomplete simulated result: %+v", res)
				}
			}
		})
	}
	// The services survived the bad input: a fresh request still completes.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	res, err := cl.Do(ctx, "acme", &schemas.Request{Model: "llama-3.1-8b", Prompt: "still alive?", MaxTokens: 4})
	if err != nil || res.Status != schemas.StatusOK {
		t.Fatalf("after bad input: %+v %v", res, err)
	}
	if err := st.Err(); err != nil {
		t.Fatalf("a service stopped: %v", err)
	}
	// The dashboard's p99 panels need Prometheus `le` buckets.
	resp, err := http.Get("http://" + st.MetricsAddr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	page, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`switchyard_placement_seconds_bucket{le="`, `switchyard_router_queue_seconds_bucket{le="`} {
		if !strings.Contains(string(page), want) {
			t.Errorf("/metrics has no %s…}", want)
		}
	}
}
