package traces

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/switchyard-ai/switchyard/internal/core/tokens"
)

// tracesDir holds slices of the real traces in the steering repository, cut
// to their first rows (testdata/README.md), so the tests run in a fresh
// clone with nothing beside it.
const tracesDir = "../../testdata/traces"

func traceFile(t *testing.T, name string) string {
	t.Helper()
	p := filepath.Join(tracesDir, name)
	if _, err := os.Stat(p); err != nil {
		t.Fatalf("trace slice %s missing from the repository: %v", name, err)
	}
	return p
}

func TestMooncakeInline(t *testing.T) {
	in := `{"timestamp": 0, "input_length": 1100, "output_length": 10, "hash_ids": [0, 1, 2]}
{"timestamp": 0, "input_length": 600, "output_length": 5, "hash_ids": [0, 1]}
{"timestamp": 3000, "input_length": 700, "output_length": 0, "hash_ids": [0, 7]}
`
	tr, err := ReadMooncake(strings.NewReader(in), ReadOptions{Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	if len(tr.Requests) != 3 {
		t.Fatalf("got %d requests", len(tr.Requests))
	}
	byTokens := map[int]Request{}
	for _, r := range tr.Requests {
		byTokens[r.PromptTokens] = r
		if r.Arrival < 0 || r.Arrival > 3*time.Second {
			t.Errorf("%s arrival %v outside the trace", r.ID, r.Arrival)
		}
		if len(r.BlockHashes) != r.PromptTokens/tokens.BlockSize {
			t.Errorf("%s: %d hashes for %d tokens", r.ID, len(r.BlockHashes), r.PromptTokens)
		}
		if r.TTFTTarget <= 0 || r.TPOTTarget <= 0 || r.Tenant == "" {
			t.Errorf("%s: rules not applied: %+v", r.ID, r)
		}
	}
	a, b, c := byTokens[1100], byTokens[600], byTokens[700]
	// Rows 1 and 2 share coarse blocks 0,1: the first 600/16 fine hashes.
	if !reflect.DeepEqual(a.BlockHashes[:len(b.BlockHashes)], b.BlockHashes) {
		t.Error("shared 512-token prefix did not give a shared fine prefix")
	}
	// Row 3 shares only block 0 (32 fine blocks).
	if !reflect.DeepEqual(a.BlockHashes[:32], c.BlockHashes[:32]) || a.BlockHashes[32] == c.BlockHashes[32] {
		t.Error("row 3 should share exactly the first 512 tokens")
	}
	if c.OutputTokens != 1 {
		t.Errorf("zero output length should be clamped to 1, got %d", c.OutputTokens)
	}
	// Same session key (hash_ids[1] = 1) ⇒ same tenant.
	if a.Tenant != b.Tenant {
		t.Errorf("turns of one session got tenants %s and %s", a.Tenant, b.Tenant)
	}
}

func TestReadersDeterministic(t *testing.T) {
	cases := []struct {
		name string
		read func(seed int64) (*Trace, error)
	}{
		{"mooncake", func(s int64) (*Trace, error) {
			return ReadMooncakeFile(traceFile(t, "mooncake_fast25_conversation_first1000.jsonl"), ReadOptions{Limit: 300, Seed: s})
		}},
		{"azure", func(s int64) (*Trace, error) {
			return ReadAzureFile(traceFile(t, "azure_llm_2023_code_first1000.csv"), ReadOptions{Limit: 300, Seed: s})
		}},
		{"agentic", func(s int64) (*Trace, error) {
			return Agentic(AgenticConfig{Seed: s, Duration: time.Minute}), nil
		}},
		{"shared-prefix", func(s int64) (*Trace, error) {
			return SharedPrefix(SharedPrefixConfig{Seed: s, Ladder: []float64{3, 6}, StageDuration: 20 * time.Second}), nil
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			a, err := c.read(7)
			if err != nil {
				t.Fatal(err)
			}
			b, _ := c.read(7)
			if !reflect.DeepEqual(a.Requests, b.Requests) {
				t.Fatal("same seed gave different requests")
			}
			if len(a.Requests) == 0 {
				t.Fatal("no requests")
			}
			for i := 1; i < len(a.Requests); i++ {
				if a.Requests[i].Arrival < a.Requests[i-1].Arrival {
					t.Fatalf("request %d arrives before %d", i, i-1)
				}
			}
			other, _ := c.read(8)
			if reflect.DeepEqual(a.Requests, other.Requests) {
				t.Error("a different seed changed nothing")
			}
		})
	}
}

func TestMooncakeFileStats(t *testing.T) {
	tr, err := ReadMooncakeFile(traceFile(t, "mooncake_fast25_conversation_first1000.jsonl"), ReadOptions{Limit: 500, Seed: 1, NoJitter: true})
	if err != nil {
		t.Fatal(err)
	}
	if len(tr.Requests) != 500 {
		t.Fatalf("limit: got %d", len(tr.Requests))
	}
	// Every conversation request starts with the shared block 0.
	h0 := tr.Requests[0].BlockHashes[0]
	for _, r := range tr.Requests {
		if r.BlockHashes[0] != h0 {
			t.Fatalf("%s does not start with the shared system block", r.ID)
		}
	}
	if s := tr.Summarise(); s.IdealHitTokens <= 0.05 {
		t.Errorf("ideal hit rate %.3f, the trace shares prefixes", s.IdealHitTokens)
	}
}

func TestAgenticStructure(t *testing.T) {
	tr := Agentic(AgenticConfig{Seed: 3, Duration: 2 * time.Minute, WorkflowsPerSec: 1})
	steps := map[string]int{}
	for i, r := range tr.Requests {
		w := r.Workflow
		if w == nil {
			t.Fatalf("%s has no workflow", r.ID)
		}
		steps[w.ID]++
		if w.Step == 1 {
			if w.Prev != -1 {
				t.Errorf("%s: first step waits for %d", r.ID, w.Prev)
			}
			continue
		}
		p := tr.Requests[w.Prev]
		if p.Workflow.ID != w.ID || p.Workflow.Step != w.Step-1 || w.Prev >= i {
			t.Fatalf("%s: prev %d is %s", r.ID, w.Prev, p.ID)
		}
		// Each step's prompt extends its predecessor's.
		if !reflect.DeepEqual(r.BlockHashes[:len(p.BlockHashes)], p.BlockHashes) {
			t.Fatalf("%s does not extend %s", r.ID, p.ID)
		}
	}
	for id, n := range steps {
		if n < 3 || n > 12 {
			t.Errorf("%s has %d steps", id, n)
		}
	}
}

func TestSharedPrefixShape(t *testing.T) {
	tr := SharedPrefix(SharedPrefixConfig{Seed: 1, Ladder: []float64{3, 60}, StageDuration: 30 * time.Second})
	first, second := 0, 0
	for _, r := range tr.Requests {
		if r.PromptTokens != 7200 {
			t.Fatalf("prompt %d tokens", r.PromptTokens)
		}
		if r.Arrival < 30*time.Second {
			first++
		} else {
			second++
		}
	}
	// 90 and 1800 expected; Poisson noise is far inside these bounds.
	if first < 50 || first > 140 || second < 1600 || second > 2000 {
		t.Errorf("ladder counts %d, %d", first, second)
	}
	if s := tr.Summarise(); s.IdealHitTokens < 0.5 {
		t.Errorf("ideal hit rate %.2f, want most tokens shared", s.IdealHitTokens)
	}
}

func TestScaleAndWindow(t *testing.T) {
	tr := SharedPrefix(SharedPrefixConfig{Seed: 1, Ladder: []float64{10}, StageDuration: 40 * time.Second})
	s := tr.Scale(2)
	if got, want := s.Requests[len(s.Requests)-1].Arrival, tr.Requests[len(tr.Requests)-1].Arrival/2; got != want {
		t.Errorf("scaled arrival %v, want %v", got, want)
	}
	w := tr.Window(20 * time.Second)
	for _, r := range w.Requests {
		if r.Arrival >= 20*time.Second {
			t.Fatalf("%s at %v beyond the window", r.ID, r.Arrival)
		}
	}
	if len(w.Requests) == 0 || len(w.Requests) == len(tr.Requests) {
		t.Errorf("window kept %d of %d", len(w.Requests), len(tr.Requests))
	}
}

// TestMooncakeSliceRebased: a slice cut from the middle of the trace (its
// first line at 2,400 s) arrives from 0, as the whole trace would, so
// `sim --duration 60s` on it sees its first minute rather than nothing.
func TestMooncakeSliceRebased(t *testing.T) {
	in := `{"timestamp": 2403000, "input_length": 700, "output_length": 3, "hash_ids": [0, 7]}
{"timestamp": 2400000, "input_length": 600, "output_length": 5, "hash_ids": [0, 1]}
{"timestamp": 2406000, "input_length": 800, "output_length": 4, "hash_ids": [0, 9]}
`
	tr, err := ReadMooncake(strings.NewReader(in), ReadOptions{Seed: 1, NoJitter: true})
	if err != nil {
		t.Fatal(err)
	}
	want := map[int]time.Duration{600: 0, 700: 3 * time.Second, 800: 6 * time.Second}
	for _, r := range tr.Requests {
		if r.Arrival != want[r.PromptTokens] {
			t.Errorf("%d-token request at %v, want %v", r.PromptTokens, r.Arrival, want[r.PromptTokens])
		}
	}
	if !strings.Contains(strings.Join(tr.Rules, "\n"), "rebased") {
		t.Errorf("rules %q do not say the slice was rebased", tr.Rules)
	}
}

func TestWorkflowInTime(t *testing.T) {
	cases := []struct {
		deadline, elapsed time.Duration
		want              bool
	}{
		{10 * time.Second, 9 * time.Second, true},
		{10 * time.Second, 10 * time.Second, true},
		{10 * time.Second, 11 * time.Second, false},
		{0, time.Hour, true}, // no deadline: never late
	}
	for _, c := range cases {
		if got := (&Workflow{Deadline: c.deadline}).InTime(c.elapsed); got != c.want {
			t.Errorf("deadline %v elapsed %v: %v, want %v", c.deadline, c.elapsed, got, c.want)
		}
	}
}
