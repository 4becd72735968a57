package stack

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/switchyard-ai/switchyard/internal/testkit/waitfor"
	"github.com/switchyard-ai/switchyard/schemas"
	"github.com/switchyard-ai/switchyard/services/client"
	"github.com/switchyard-ai/switchyard/services/svc"
	"github.com/switchyard-ai/switchyard/subjects"
)

// fakeVLLM speaks the wire format of a vLLM server: streamed chat
// completions as server-sent events and a Prometheus /metrics page with
// vLLM's metric names. No real engine runs in CI; this proves the worker's
// openai backend end to end through the whole system.
func fakeVLLM(t *testing.T, served *atomic.Int32) *httptest.Server {
	return httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/metrics":
			fmt.Fprint(w, "# TYPE vllm:kv_cache_usage_perc gauge\nvllm:kv_cache_usage_perc{model_name=\"m\"} 0.25\n"+
				"# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running{model_name=\"m\"} 1\n"+
				"# TYPE vllm:num_requests_waiting gauge\nvllm:num_requests_waiting{model_name=\"m\"} 0\n")
		case "/v1/chat/completions":
			var body map[string]any
			json.NewDecoder(r.Body).Decode(&body)
			served.Add(1)
			w.Header().Set("Content-Type", "text/event-stream")
			fl := w.(http.Flusher)
			for i, tok := range []string{"Paris", " is", " the", " capital."} {
				fmt.Fprintf(w, "data: {\"id\":\"c1\",\"object\":\"chat.completion.chunk\",\"choices\":[{\"index\":0,\"delta\":{\"content\":%q},\"finish_reason\":null}]}\n\n", tok)
				fl.Flush()
				if i == 0 {
					time.Sleep(5 * time.Millisecond)
				}
			}
			fmt.Fprint(w, "data: {\"id\":\"c1\",\"object\":\"chat.completion.chunk\",\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}]}\n\n")
			fmt.Fprint(w, "data: {\"id\":\"c1\",\"object\":\"chat.completion.chunk\",\"choices\":[],\"usage\":{\"prompt_tokens\":12,\"completion_tokens\":4,\"total_tokens\":16}}\n\n")
			fmt.Fprint(w, "data: [DONE]\n\n")
		default:
			http.NotFound(w, r)
		}
	}))
}

func TestOpenAIBackendThroughTheSystem(t *testing.T) {
	var served atomic.Int32
	srv := fakeVLLM(t, &served)
	defer srv.Close()
	st := startStack(t, Config{Fleet: []WorkerSpec{{GPU: "h100", Model: "llama-3.1-8b", Backend: "openai", OpenAIURL: srv.URL}}})
	nc, err := st.Connect("t")
	if err != nil {
		t.Fatal(err)
	}
	// The worker's heartbeat says plainly that it is not simulated.
	hbs := make(chan schemas.Heartbeat, 4)
	sub, _ := nc.Subscribe(subjects.HeartbeatAll, func(m *nats.Msg) {
		var hb schemas.Heartbeat
		if svc.Decode(m.Header, m.Data, &hb) == nil {
			select {
			case hbs <- hb:
			default:
			}
		}
	})
	defer sub.Unsubscribe()
	cl, _ := client.New(nc)
	// Chunks arrive on the subscription's goroutine.
	var mu sync.Mutex
	var chunks []string
	streamed := func() string {
		mu.Lock()
		defer mu.Unlock()
		return strings.Join(chunks, "")
	}
	tokSub, err := cl.Stream("acme", "real-1", func(c schemas.TokenChunk) {
		mu.Lock()
		defer mu.Unlock()
		chunks = append(chunks, c.Text)
	})
	if err != nil {
		t.Fatal(err)
	}
	defer tokSub.Unsubscribe()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	res, err := cl.Do(ctx, "acme", &schemas.Request{ID: "real-1", Model: "llama-3.1-8b", Stream: true,
		Messages: []schemas.Message{{Role: "user", Content: "What is the capital of France?"}}, MaxTokens: 16})
	if err != nil {
		t.Fatal(err)
	}
	if res.Status != schemas.StatusOK || res.Simulated || res.Text != "Paris is the capital." || res.Usage.CompletionTokens != 4 || res.FinishReason != "stop" {
		t.Fatalf("result %+v", res)
	}
	if res.Timing.TTFTMs <= 0 || res.Timing.TotalMs < res.Timing.TTFTMs {
		t.Fatalf("timing not measured: %+v", res.Timing)
	}
	if served.Load() != 1 {
		t.Fatalf("backend served %d requests", served.Load())
	}
	// Once the server's /metrics has been scraped, KV use shows up.
	deadline := time.After(10 * time.Second)
	for scraped := false; !scraped; {
		select {
		case hb := <-hbs:
			if hb.Simulated || hb.Backend != "openai" {
				t.Fatalf("heartbeat %+v", hb)
			}
			scraped = hb.KVBlocksFree < hb.KVBlocksTotal
		case <-deadline:
			t.Fatal("no heartbeat reported the backend's KV usage")
		}
	}
	// Chunks are core NATS and may trail the stored result.
	waitfor.True(t, "the streamed chunks", 10*time.Second, func() bool { return strings.Contains(streamed(), "Paris is the capital.") })
}
