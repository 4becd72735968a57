package worker

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"

	"github.com/switchyard-ai/switchyard/internal/adapter/backend/vllmkv"
	"github.com/switchyard-ai/switchyard/schemas"
	"github.com/switchyard-ai/switchyard/services/svc"
	"github.com/switchyard-ai/switchyard/subjects"
)

// VLLMKVConfig says where the fronted vLLM engine publishes its KV cache
// events (its --kv-events-config endpoint and replay_endpoint, as this
// worker dials them). Empty Endpoint: the engine's events are not followed.
type VLLMKVConfig struct {
	Endpoint string // e.g. tcp://127.0.0.1:5557
	Replay   string // e.g. tcp://127.0.0.1:5558; empty if the engine has none
	DPRank   int    // the engine's data-parallel rank: vLLM offsets both ports by it
}

// vllmRelay follows the engine's KV events and republishes them, in
// Switchyard's block hashes, as this worker's KV events on sy.kv.<worker>,
// so the router's prefix index follows the real engine. The translator is
// guarded by Worker.mu, with kvSeq, so a snapshot and the event stream
// agree.
type vllmRelay struct {
	sub       *vllmkv.Subscriber
	tr        *vllmkv.Translator
	malformed atomic.Uint64
	resyncs   atomic.Uint64
}

// startVLLMKV starts following the engine's KV events when configured; the
// returned function stops it and waits.
func (w *Worker) startVLLMKV(ctx context.Context) (func(), error) {
	c := w.cfg.VLLMKV
	if c.Endpoint == "" {
		if c.Replay != "" || c.DPRank != 0 {
			return nil, errors.New("worker: --vllm-kv-replay and --vllm-dp-rank need --vllm-kv-endpoint")
		}
		return func() {}, nil
	}
	if w.remote == nil {
		return nil, fmt.Errorf("worker %s: --vllm-kv-endpoint follows a real vLLM engine: it needs --backend openai", w.cfg.ID)
	}
	log := w.sh.Log.With("component", "vllm-kv")
	sub, err := vllmkv.New(vllmkv.Config{Endpoint: c.Endpoint, Replay: c.Replay, DPRank: c.DPRank, Log: log})
	if err != nil {
		return nil, fmt.Errorf("worker %s: %w", w.cfg.ID, err)
	}
	r := &vllmRelay{sub: sub, tr: vllmkv.NewTranslator()}
	w.mu.Lock()
	w.vkv = r
	w.mu.Unlock()
	m := w.sh.Metrics
	m.NewGauge(fmt.Sprintf(`switchyard_worker_vllm_kv_resident_blocks{worker=%q}`, w.cfg.ID), func() float64 {
		w.mu.Lock()
		defer w.mu.Unlock()
		return float64(r.tr.Resident())
	})
	m.NewGauge(fmt.Sprintf(`switchyard_worker_vllm_kv_resyncs_total{worker=%q}`, w.cfg.ID), func() float64 { return float64(r.resyncs.Load()) })
	m.NewGauge(fmt.Sprintf(`switchyard_worker_vllm_kv_malformed_total{worker=%q}`, w.cfg.ID), func() float64 { return float64(r.malformed.Load()) })
	m.NewGauge(fmt.Sprintf(`switchyard_worker_vllm_kv_unchained_blocks_total{worker=%q}`, w.cfg.ID), func() float64 {
		w.mu.Lock()
		defer w.mu.Unlock()
		return float64(r.tr.Stats().Unchained)
	})
	pub, replay := sub.Endpoints()
	log.Info("relaying vLLM KV events", "endpoint", pub, "replay", replay, "dp_rank", c.DPRank)
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := sub.Run(runCtx, relayHandler{w, r}); err != nil {
			log.Error("vLLM KV events stopped", "err", err)
		}
	}()
	return func() { cancel(); <-done }, nil
}

// relayHandler applies what the subscriber follows to the worker.
type relayHandler struct {
	w *Worker
	r *vllmRelay
}

func (h relayHandler) Batch(_ uint64, b vllmkv.Batch) {
	h.w.mu.Lock()
	defer h.w.mu.Unlock()
	for _, c := range h.r.tr.Apply(b) {
		h.w.publishKVChange(c)
	}
}

func (h relayHandler) Resync(reason string) {
	h.r.resyncs.Add(1)
	h.w.mu.Lock()
	h.w.publishKVChange(h.r.tr.Reset())
	h.w.mu.Unlock()
	h.w.sh.Log.Warn("vLLM KV state lost: cleared this worker's prefix entries", "reason", reason)
	h.w.sh.Emit(schemas.Event{Kind: "kv_resync", WorkerID: h.w.cfg.ID, Reason: reason})
}

func (h relayHandler) Malformed(err error) {
	h.r.malformed.Add(1)
	h.w.sh.Log.Warn("unreadable vLLM KV event", "err", err)
}

// publishKVChange publishes one change as this worker's next KV event.
// Callers hold w.mu.
func (w *Worker) publishKVChange(c vllmkv.Change) {
	w.kvSeq++
	e := schemas.KVEvent{V: schemas.Version, WorkerID: w.cfg.ID, Seq: w.kvSeq, Kind: c.Kind, Hashes: c.Hashes, At: w.sh.Now()}
	if m, err := svc.Encode(subjects.KV(w.cfg.ID), schemas.Msgpack, e, ""); err == nil {
		w.sh.NC.PublishMsg(m)
	}
}

// cachedHashes is the worker's resident block set for a snapshot: the
// engine's as relayed when following vLLM, else the simulated engine's.
// Callers hold w.mu.
func (w *Worker) cachedHashes() []uint64 {
	if w.vkv != nil {
		return w.vkv.tr.Hashes()
	}
	return w.eng.CachedHashes()
}
