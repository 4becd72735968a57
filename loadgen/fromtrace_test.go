package loadgen

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/switchyard-ai/switchyard/internal/core/tokens"
	"github.com/switchyard-ai/switchyard/loadgen/traces"
	"github.com/switchyard-ai/switchyard/schemas"
)

// TestFromTraceKeepsLengthsAndPrefixSharing: the admitter's tokenizer reads
// each written prompt as exactly the trace's prompt length, and two
// requests' block hashes (as the live system computes them) agree on
// exactly the leading blocks the trace says they share.
func TestFromTraceKeepsLengthsAndPrefixSharing(t *testing.T) {
	tr := &traces.Trace{Name: "t", Requests: []traces.Request{
		{ID: "a", Arrival: 0, PromptTokens: 70, OutputTokens: 8, BlockHashes: []uint64{11, 12, 13, 14}, Tenant: "docs-qa", Priority: schemas.PriorityStandard,
			TTFTTarget: 1500 * time.Millisecond, TPOTTarget: 75 * time.Millisecond, Deadline: 3 * time.Second},
		{ID: "b/2", Arrival: time.Second, PromptTokens: 50, OutputTokens: 4, BlockHashes: []uint64{11, 12, 99}, Tenant: "support-bot", Priority: schemas.PriorityCritical},
		{ID: "c", Arrival: 2 * time.Second, PromptTokens: 5, OutputTokens: 0, Tenant: "docs-qa"},
	}}
	arr, err := FromTrace(tr, "llama-3.1-8b")
	if err != nil {
		t.Fatal(err)
	}
	hashes := make([][]uint64, len(arr))
	for i, a := range arr {
		q := tr.Requests[i]
		toks := tokens.Tokenize(a.Request.Prompt)
		if len(toks) != max(q.PromptTokens, 1) {
			t.Errorf("%s: %d tokens, want %d", q.ID, len(toks), q.PromptTokens)
		}
		hashes[i] = tokens.BlockHashes(toks)
		if err := a.Request.Validate(time.Now(), nil, schemas.Limits{}); err != nil {
			t.Errorf("%s: %v", q.ID, err)
		}
		if a.Offset != q.Arrival || a.Tenant != q.Tenant || a.Request.Priority != q.Priority || !a.Request.NoCache || a.Request.Model != "llama-3.1-8b" {
			t.Errorf("%s: arrival %+v", q.ID, a)
		}
	}
	if got := arr[0].Request; got.TTFTTargetMs != 1500 || got.TPOTTargetMs != 75 || got.DeadlineMs != 3000 || got.MaxTokens != 8 {
		t.Errorf("targets not carried: %+v", got)
	}
	if arr[2].Request.MaxTokens != 1 {
		t.Errorf("a zero output length must still ask for one token, got %d", arr[2].Request.MaxTokens)
	}
	if !slices.Equal(hashes[0][:2], hashes[1][:2]) || hashes[0][2] == hashes[1][2] {
		t.Errorf("shared prefix not kept: %v vs %v", hashes[0], hashes[1])
	}
	if strings.ContainsAny(arr[1].Request.ID, "/") {
		t.Errorf("id %q is not a valid submission id", arr[1].Request.ID)
	}
}

func TestFromTraceRefusesWorkflows(t *testing.T) {
	tr := &traces.Trace{Requests: []traces.Request{{ID: "s1", PromptTokens: 10, Workflow: &traces.Workflow{ID: "w", Step: 1, Of: 2, Prev: -1}}}}
	if _, err := FromTrace(tr, "m"); err == nil || !strings.Contains(err.Error(), "open-loop") {
		t.Fatalf("err = %v, want the open-loop refusal", err)
	}
	if _, err := FromTrace(&traces.Trace{}, "m"); err == nil {
		t.Fatal("an empty trace must be refused")
	}
}
