package loadgen

import (
	"errors"
	"fmt"
	"hash/fnv"
	"strings"
	"time"

	"github.com/switchyard-ai/switchyard/internal/core/tokens"
	"github.com/switchyard-ai/switchyard/loadgen/traces"
	"github.com/switchyard-ai/switchyard/schemas"
)

// FromTrace turns a trace's requests into live submissions, so the same
// arrivals can be driven through the running system (`switchyard loadgen
// --trace`) and through the simulator (`switchyard sim --trace`) and the two
// compared. Each request keeps its arrival time, tenant, class, deadline,
// TTFT/TPOT targets (sent as ttft_target_ms/tpot_target_ms, so the worker
// judges slo_met as the simulator does) and output length; its prompt is
// text written so the admitter's tokenizer counts exactly the trace's
// prompt tokens and two requests share a prompt prefix exactly where the
// trace says their KV blocks match: one word (one token) per position,
// the words of a block a function of the trace's chained hash of that
// block. Caching is off (no_cache), since the simulator has no response
// cache. model names the model of requests that carry none.
//
// Workflow steps are refused: a step is released when its predecessor
// finishes, which an open-loop replay cannot do faithfully.
func FromTrace(tr *traces.Trace, model string) ([]Arrival, error) {
	if tr == nil || len(tr.Requests) == 0 {
		return nil, errors.New("the trace has no requests")
	}
	out := make([]Arrival, 0, len(tr.Requests))
	var b strings.Builder
	for i := range tr.Requests {
		q := &tr.Requests[i]
		if q.Workflow != nil {
			return nil, fmt.Errorf("request %s is workflow step %d of %s: loadgen replays open-loop traces only (mooncake, azure, servegen, shared-prefix)", q.ID, q.Workflow.Step, q.Workflow.ID)
		}
		m := q.Model
		if m == "" {
			m = model
		}
		b.Reset()
		writePrompt(&b, q, i)
		req := schemas.Request{
			ID:           traceID(q.ID, i),
			Model:        m,
			Prompt:       b.String(),
			MaxTokens:    max(q.OutputTokens, 1),
			Priority:     q.Priority,
			DeadlineMs:   q.Deadline.Milliseconds(),
			TTFTTargetMs: float64(q.TTFTTarget) / float64(time.Millisecond),
			TPOTTargetMs: float64(q.TPOTTarget) / float64(time.Millisecond),
			NoCache:      true,
		}
		out = append(out, Arrival{Offset: q.Arrival, Tenant: q.Tenant, Request: req})
	}
	return out, nil
}

// writePrompt writes q's prompt: tokens.BlockSize words per full block the
// trace hashes, then words private to request i up to its prompt length.
// Words are five lowercase letters, which the tokenizer reads as one token
// each.
func writePrompt(b *strings.Builder, q *traces.Request, i int) {
	n := 0
	word := func(key uint64) {
		if n > 0 {
			b.WriteByte(' ')
		}
		for range 5 {
			b.WriteByte(byte('a' + key%26))
			key /= 26
		}
		n++
	}
	for _, h := range q.BlockHashes {
		if n+tokens.BlockSize > q.PromptTokens {
			break
		}
		for j := range tokens.BlockSize {
			word(mix(h, uint64(j)))
		}
	}
	for j := 0; n < max(q.PromptTokens, 1); j++ {
		word(mix(uint64(i)<<20|1<<63, uint64(j)))
	}
}

// mix is a 64-bit hash of (a, b), so neighbouring positions give unrelated
// words and a word repeats only where the trace's blocks do.
func mix(a, b uint64) uint64 {
	h := fnv.New64a()
	var buf [16]byte
	for k := range 8 {
		buf[k] = byte(a >> (8 * k))
		buf[8+k] = byte(b >> (8 * k))
	}
	h.Write(buf[:])
	return h.Sum64()
}

// traceID makes a trace's request id a valid submission id
// ([A-Za-z0-9_-], 1-128 characters), keeping it readable and unique by
// the request's index.
func traceID(id string, i int) string {
	var b strings.Builder
	for _, c := range id {
		if b.Len() >= 100 {
			break
		}
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9', c == '_', c == '-':
			b.WriteRune(c)
		default:
			b.WriteByte('_')
		}
	}
	return fmt.Sprintf("t%d-%s", i, b.String())
}
