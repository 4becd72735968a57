package worker

import (
	"context"
	"log/slog"
	"math"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/switchyard-ai/switchyard/internal/core/catalog"
	"github.com/switchyard-ai/switchyard/internal/testkit/bustest"
	"github.com/switchyard-ai/switchyard/schemas"
	"github.com/switchyard-ai/switchyard/services/svc"
	"github.com/switchyard-ai/switchyard/subjects"
)

// legWorker starts a simulated worker of role on its own connection.
func legWorker(ctx context.Context, t *testing.T, env bustest.Env, id, role string) {
	t.Helper()
	nc, err := env.Server.Connect(id)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	sh, err := svc.New("worker", id, nc, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	if err := sh.UseLedger(); err != nil {
		t.Fatal(err)
	}
	w, err := New(sh, Config{ID: id, GPU: "h100", Model: "llama-3.1-8b", SpeedUp: 10, Role: role, Link: "ib-ndr"})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { defer close(done); _ = w.Run(ctx) }()
	t.Cleanup(func() { <-done })
}

// legsHarness watches what the legs leave on the bus: handles, results
// and streamed chunks.
type legsHarness struct {
	mu      sync.Mutex
	handles []schemas.KVHandle
	results []schemas.Result
	chunks  []schemas.TokenChunk
}

func watchLegs(t *testing.T, nc *nats.Conn) *legsHarness {
	t.Helper()
	h := &legsHarness{}
	for subj, fn := range map[string]func(*nats.Msg){
		subjects.HandoffAll(): func(m *nats.Msg) {
			var kv schemas.KVHandle
			if svc.Decode(m.Header, m.Data, &kv) == nil {
				h.mu.Lock()
				h.handles = append(h.handles, kv)
				h.mu.Unlock()
			}
		},
		subjects.ResultAll: func(m *nats.Msg) {
			var r schemas.Result
			if svc.Decode(m.Header, m.Data, &r) == nil {
				h.mu.Lock()
				h.results = append(h.results, r)
				h.mu.Unlock()
			}
		},
		subjects.TokensAll: func(m *nats.Msg) {
			var c schemas.TokenChunk
			if svc.Decode(m.Header, m.Data, &c) == nil {
				h.mu.Lock()
				h.chunks = append(h.chunks, c)
				h.mu.Unlock()
			}
		},
	} {
		sub, err := nc.Subscribe(subj, fn)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { sub.Unsubscribe() })
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	return h
}

func (h *legsHarness) wait(t *testing.T, what string, ok func() bool) {
	t.Helper()
	for deadline := time.Now().Add(20 * time.Second); ; {
		h.mu.Lock()
		done := ok()
		h.mu.Unlock()
		if done {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("no %s within 20 s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func publishDispatch(t *testing.T, js jetstream.JetStream, d schemas.Dispatch, msgID string) {
	t.Helper()
	m, err := svc.Encode(subjects.Dispatch(d.WorkerID), schemas.Msgpack, d, msgID)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := js.PublishMsg(context.Background(), m); err != nil {
		t.Fatal(err)
	}
}

// TestTwoLegs runs a streamed request's two legs on two simulated workers
// by hand (no router): the prefill worker streams the first token, stores
// a KV handle and keeps its dispatch unacked until the decode worker has
// pulled the KV; the decode worker continues the stream from chunk 2 and
// publishes the one final result, whose text is the whole answer, with
// both legs' GPU time. A decode leg whose source is gone reports a failed
// handle (kv_source_gone) and acks; a worker refuses a leg its role does
// not take with an error result.
func TestTwoLegs(t *testing.T) {
	env := bustest.StartProvisioned(t, subjects.StreamOptions{})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	legWorker(ctx, t, env, "p1", schemas.RolePrefill)
	legWorker(ctx, t, env, "d1", schemas.RoleDecode)
	h := watchLegs(t, env.NC)
	time.Sleep(200 * time.Millisecond) // the workers' consumers exist

	const id, tenant, model, maxTokens = "split-1", "acme", "llama-3.1-8b", 40
	now := time.Now()
	adm := schemas.Admitted{Tenant: tenant, Model: model, PromptTokens: 6000, SubmittedAt: now, Deadline: now.Add(time.Minute),
		Priority: schemas.PriorityInteractive,
		Request:  schemas.Request{ID: id, Model: model, Prompt: strings.Repeat("x ", 6000), MaxTokens: maxTokens, Stream: true}}
	publishDispatch(t, env.JS, schemas.Dispatch{Admitted: adm, WorkerID: "p1", PlacedAt: now, Phase: schemas.PhasePrefill, DecodeWorker: "d1"}, id+"-a0-p")
	h.wait(t, "KV handle", func() bool { return len(h.handles) == 1 })
	kv := h.handles[0]
	if kv.Worker != "p1" || kv.DecodeWorker != "d1" || kv.Link != "ib-ndr" || kv.PromptTokens != 6000 || kv.Blocks < 6000/16 ||
		kv.GPUSeconds <= 0 || kv.FirstToken == "" || kv.Failed != nil || !kv.ExpiresAt.After(time.Now()) {
		t.Fatalf("handle %+v", kv)
	}
	h.mu.Lock()
	if len(h.chunks) != 1 || h.chunks[0].Seq != 1 || h.chunks[0].Text != kv.FirstToken || len(h.results) != 0 {
		t.Fatalf("after the prefill leg: chunks %+v, results %d; want chunk 1 = the first token, no result", h.chunks, len(h.results))
	}
	h.mu.Unlock()
	if n := ackPending(ctx, t, env.JS, "p1"); n != 1 {
		t.Fatalf("prefill dispatch: %d unacked, want 1 while its KV waits for the pull", n)
	}

	publishDispatch(t, env.JS, schemas.Dispatch{Admitted: adm, WorkerID: "d1", PlacedAt: time.Now(), Phase: schemas.PhaseDecode,
		Handoff: &kv, TransferSeconds: 0.05}, id+"-a0-d")
	h.wait(t, "final result", func() bool { return len(h.results) == 1 })
	time.Sleep(100 * time.Millisecond)
	h.mu.Lock()
	res := h.results[0]
	var text strings.Builder
	for i, c := range h.chunks {
		if c.Seq != uint64(i+1) {
			t.Fatalf("chunk %d has seq %d", i+1, c.Seq)
		}
		text.WriteString(c.Text)
	}
	last := h.chunks[len(h.chunks)-1]
	h.mu.Unlock()
	if res.Status != schemas.StatusOK || res.WorkerID != "d1" || res.Usage.CompletionTokens != maxTokens || res.Usage.PromptTokens != 6000 {
		t.Fatalf("result %+v", res)
	}
	if want := SimulatedText(id, model, maxTokens); res.Text != want || text.String() != want || !last.Done {
		t.Fatalf("result text %q, chunks %q (last done %v); want the whole answer %q", res.Text, text.String(), last.Done, want)
	}
	if res.GPUSeconds <= kv.GPUSeconds || res.Timing.TTFTMs <= 0 || res.Timing.ITLMs <= 0 {
		t.Fatalf("gpu %.4f (prefill %.4f), ttft %.1f ms, itl %.2f ms", res.GPUSeconds, kv.GPUSeconds, res.Timing.TTFTMs, res.Timing.ITLMs)
	}
	// Each leg priced by its own worker: the handle's cost from the
	// prefill worker, the decode leg's at this worker's rate.
	if h100, _ := catalog.Default().GPU("h100"); kv.CostUSD <= 0 ||
		math.Abs(res.CostUSD-((res.GPUSeconds-kv.GPUSeconds)/3600*h100.PricePerHour+kv.CostUSD)) > 1e-12 {
		t.Fatalf("cost $%.9f (handle $%.9f) over %.4f GPU-s: want the decode leg's cost plus the handle's", res.CostUSD, kv.CostUSD, res.GPUSeconds)
	}
	for _, w := range []string{"p1", "d1"} {
		if n := ackPending(ctx, t, env.JS, w); n != 0 {
			t.Fatalf("%s: %d dispatches unacked after the result", w, n)
		}
	}
	t.Logf("split: ttft %.1f ms, itl %.2f ms, gpu %.4f s (prefill %.4f s)", res.Timing.TTFTMs, res.Timing.ITLMs, res.GPUSeconds, kv.GPUSeconds)

	// The KV's source is gone: the decode leg reports it and acks.
	ghost := kv
	ghost.Worker, ghost.RequestID = "ghost", "split-2"
	adm2 := adm
	adm2.Request.ID, adm2.Request.Stream = "split-2", false
	publishDispatch(t, env.JS, schemas.Dispatch{Admitted: adm2, WorkerID: "d1", PlacedAt: time.Now(), Phase: schemas.PhaseDecode, Handoff: &ghost}, "split-2-a0-d")
	h.wait(t, "failed handle", func() bool { return len(h.handles) == 2 })
	if f := h.handles[1]; f.Failed == nil || !strings.HasPrefix(f.Failed.Message, PullSourceGone) || f.DecodeWorker != "d1" || f.RequestID != "split-2" {
		t.Fatalf("failed handle %+v (failed %+v)", f, f.Failed)
	}
	time.Sleep(100 * time.Millisecond)
	if n := ackPending(ctx, t, env.JS, "d1"); n != 0 {
		t.Fatalf("d1: %d dispatches unacked after the failed pull was stored", n)
	}

	// A real engine's handle (vLLM's kv_transfer_params) cannot be decoded
	// by a simulated engine: the leg fails back to the router.
	real := kv
	real.RequestID, real.Engine = "split-3", map[string]any{"do_remote_prefill": true, "remote_engine_id": "vllm-p"}
	adm4 := adm2
	adm4.Request.ID = "split-3"
	publishDispatch(t, env.JS, schemas.Dispatch{Admitted: adm4, WorkerID: "d1", PlacedAt: time.Now(), Phase: schemas.PhaseDecode, Handoff: &real}, "split-3-a0-d")
	h.wait(t, "failed handle (engine mismatch)", func() bool { return len(h.handles) == 3 })
	if f := h.handles[2]; f.Failed == nil || !strings.HasPrefix(f.Failed.Message, PullEngineMismatch) || f.RequestID != "split-3" {
		t.Fatalf("failed handle %+v (failed %+v)", f, f.Failed)
	}

	// A whole request on a prefill-only worker is refused with a result.
	adm3 := adm2
	adm3.Request.ID = "whole-1"
	publishDispatch(t, env.JS, schemas.Dispatch{Admitted: adm3, WorkerID: "p1", PlacedAt: time.Now()}, "whole-1-a0")
	h.wait(t, "refusal", func() bool { return len(h.results) == 2 })
	if r := h.results[1]; r.ID != "whole-1" || r.Error == nil || !strings.Contains(r.Error.Message, "role prefill") {
		t.Fatalf("refusal %+v (%+v)", r, r.Error)
	}
}

func ackPending(ctx context.Context, t *testing.T, js jetstream.JetStream, worker string) int {
	t.Helper()
	c, err := js.Consumer(ctx, subjects.StreamDispatch, subjects.WorkerConsumer(worker))
	if err != nil {
		t.Fatal(err)
	}
	info, err := c.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return info.NumAckPending
}
