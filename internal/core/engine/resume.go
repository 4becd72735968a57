package engine

import "fmt"

// Resume is the sequence that continues s on this replica after emitted of
// its output tokens were generated on another replica, which was lost, and
// already streamed to the client. The lost replica's KV cache went with it
// (the KV-cache twist), so continuing is not free: the emitted tokens join
// the prompt and are prefilled here with it — PromptTokens+emitted tokens
// of prefill, less whatever prefix of the prompt this replica's cache holds
// (the prompt's block hashes still name its leading blocks; the emitted
// tail has none, as no other request shares it) — and then only the
// remaining MaxTokens−emitted are generated. The result is what a fresh
// request with that longer prompt would cost, which is exactly what a real
// engine does when it is sent prompt+emitted text.
//
// A sequence with nothing left to generate cannot be resumed; the caller
// already holds its whole answer.
func Resume(s Sequence, emitted int) (Sequence, error) {
	switch {
	case emitted < 0:
		return Sequence{}, fmt.Errorf("engine: resume %s: negative emitted tokens (%d)", s.ID, emitted)
	case emitted >= s.MaxTokens:
		return Sequence{}, fmt.Errorf("engine: resume %s: %d tokens already emitted of max %d, nothing left to generate", s.ID, emitted, s.MaxTokens)
	}
	s.PromptTokens += emitted
	s.MaxTokens -= emitted
	return s, nil
}
