package worker

import (
	"time"

	"github.com/switchyard-ai/switchyard/internal/core/engine"
)

// The engine's side of the two legs, in one place: which Sequence a leg
// runs, and the KV the engine holds for a pull (internal/core/engine,
// phases.go).

// prefillSequence is a prefill leg's sequence: the prompt and its first
// token, its KV held afterwards for the decode worker to pull. The
// worker's own hold (Config.KVHold, real time, see heldKV) decides when an
// unpulled KV is freed; the engine's hold, in simulated time, is set
// beyond it so the engine never frees a KV the worker still offers.
func (w *Worker) prefillSequence(s engine.Sequence) engine.Sequence {
	s.PrefillOnly = true
	s.HoldKV = 2 * time.Duration(float64(w.cfg.KVHold)*w.cfg.SpeedUp)
	return s
}

// decodeSequence is a decode leg's sequence: the prompt's KV arrived from
// the prefill worker, and remaining tokens are left to generate. The
// engine counts the prefill's first token as this sequence's first
// (MaxTokens N generates N-1).
func decodeSequence(s engine.Sequence, remaining int) engine.Sequence {
	s.Transferred = true
	s.MaxTokens = remaining + 1
	return s
}

// engineHoldsKV reports whether the engine still holds id's KV for a pull.
// A real engine cannot be asked: vLLM keeps the blocks until its decode
// instance reads them or its abort timeout, which the worker's hold stays
// under (legs_remote.go), so within the hold it does. Callers hold w.mu.
func (w *Worker) engineHoldsKV(id string) bool { return w.remote != nil || w.eng.HoldsKV(id) }

// engineReleaseKV frees the KV held for id (its blocks stay cached as
// prefix blocks). A real engine frees its own, once read or timed out.
// Callers hold w.mu.
func (w *Worker) engineReleaseKV(id string) {
	if w.remote == nil {
		w.eng.ReleaseKV(id)
	}
}

// prefillBlocks is how many KV blocks a finished prefill holds.
func (w *Worker) prefillBlocks(f engine.Finished) int { return f.HeldBlocks }
