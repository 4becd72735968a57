package routing

import (
	"testing"
	"time"

	"github.com/switchyard-ai/switchyard/schemas"
)

// TestRelayedKVEventsMakeAWorkerPrecise: a worker behind the openai
// backend is indexed by guess (each dispatched prompt assumed cached) until
// it sends KV events of its own (a vLLM engine relayed); from then on it is
// indexed from them, whatever its heartbeats say about its backend.
func TestRelayedKVEventsMakeAWorkerPrecise(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	c := New(Config{})
	hb := schemas.Heartbeat{WorkerID: "v1", Backend: "openai", GPU: "h100", KVBlocksTotal: 100, KVBlocksFree: 100, SentAt: t0, Seq: 1}
	c.Apply(Input{Kind: InHeartbeat, At: t0, Heartbeat: &hb}, nil)
	if !c.approxKV["v1"] {
		t.Fatal("an openai worker without KV events should be indexed by guess")
	}
	kv := schemas.KVEvent{WorkerID: "v1", Seq: 1, Kind: schemas.KVStored, Hashes: []uint64{1, 2}, At: t0}
	c.Apply(Input{Kind: InKV, At: t0, KV: &kv}, nil)
	if c.approxKV["v1"] || !c.preciseKV["v1"] {
		t.Fatal("a worker that sent KV events is still guessed at")
	}
	// A later heartbeat does not make it a guess again.
	hb1 := hb
	hb1.Seq, hb1.KVSeq, hb1.SentAt = 2, 1, t0.Add(time.Second)
	c.Apply(Input{Kind: InHeartbeat, At: t0.Add(time.Second), Heartbeat: &hb1}, nil)
	if c.approxKV["v1"] {
		t.Fatal("a heartbeat turned a precise worker back into a guessed one")
	}
}
