package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"strings"
	"testing"

	"github.com/switchyard-ai/switchyard/internal/testkit/enginetest"
)

// TestBenchEnginePrefix runs the prefix bench at a small size against the
// pinned Ollama and checks its last line: the contract's keys, figures
// that add up (the same prompts under both policies; evaluated plus
// cached is the whole prompt), and their direction — Switchyard's
// placement has the engines evaluate fewer prompt tokens than
// round-robin, and its TTFT p50 is lower. The workload is seeded, so both
// policies get the same turns and the token counts repeat run to run;
// only the TTFT is the machine's.
func TestBenchEnginePrefix(t *testing.T) {
	if _, err := enginetest.FindOllama(); errors.Is(err, enginetest.ErrNoOllama) {
		if os.Getenv("SWITCHYARD_REQUIRE_TOOLS") == "1" {
			t.Fatal(err.Error() + " (SWITCHYARD_REQUIRE_TOOLS=1)")
		}
		t.Skip(err.Error())
	}
	var out bytes.Buffer
	args := []string{"--prefix", "--requests", "24", "--system-chars", "480", "--gap", "550ms", "--json"}
	if err := runBenchEngine(context.Background(), args, &out); err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	last := []byte(lines[len(lines)-1])
	// The contract, key by key, as a reader who knows only it would parse it.
	var top map[string]json.RawMessage
	var shape map[string]map[string]any
	if err := json.Unmarshal(last, &top); err != nil {
		t.Fatalf("last line %q: %v", last, err)
	}
	if err := json.Unmarshal(top["prefix"], &shape); err != nil {
		t.Fatalf("last line's prefix %q: %v", top["prefix"], err)
	}
	for _, policy := range []string{"switchyard", "round-robin"} {
		for _, key := range []string{"prompt_eval_tokens", "ttft_p50_ms", "ttft_p99_ms"} {
			if _, ok := shape[policy][key].(float64); !ok {
				t.Errorf("prefix.%s.%s missing or not a number in %s", policy, key, last)
			}
		}
	}
	var r PrefixBenchResult
	if err := json.Unmarshal(last, &r); err != nil {
		t.Fatal(err)
	}
	sy, rr := r.Prefix.Switchyard, r.Prefix.RoundRobin
	for name, a := range map[string]PrefixArm{"switchyard": sy, "round-robin": rr} {
		if a.Requests != 24 || a.PromptEvalTokens <= 0 || a.PromptEvalTokens+a.CachedPromptTokens != a.PromptTokens ||
			a.TTFTP50Ms <= 0 || a.TTFTP99Ms < a.TTFTP50Ms || len(a.Workers) == 0 {
			t.Errorf("%s: figures do not add up: %+v", name, a)
		}
	}
	if sy.PromptTokens != rr.PromptTokens {
		t.Errorf("the policies were sent different prompts: %d and %d tokens", sy.PromptTokens, rr.PromptTokens)
	}
	if r.Simulated {
		t.Error("a simulated result from a real engine")
	}
	if sy.PromptEvalTokens >= rr.PromptEvalTokens {
		t.Errorf("switchyard's engines evaluated %d prompt tokens, round-robin's %d: prefix affinity saved nothing\n%s",
			sy.PromptEvalTokens, rr.PromptEvalTokens, out.String())
	}
	if sy.TTFTP50Ms >= rr.TTFTP50Ms {
		t.Errorf("switchyard's TTFT p50 %.1f ms is not below round-robin's %.1f ms\n%s", sy.TTFTP50Ms, rr.TTFTP50Ms, out.String())
	}
}

func TestBenchEnginePrefixRejectsFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--prefix", "--requests", "0"}, "must be >= 1"},
		{[]string{"--prefix", "--slots", "0"}, "must be >= 1"},
		{[]string{"--prefix", "--concurrency", "0"}, "must be >= 1"},
		{[]string{"--prefix", "--gap", "-1s"}, "--gap must be >= 0"},
		{[]string{"--prefix", "--users", "2", "--system-prompts", "4"}, "every system prompt needs a user"},
		{[]string{"--prefix", "--openai-url", "http://127.0.0.1:1"}, "--openai-url is not supported with --prefix"},
	} {
		if err := runBenchEngine(context.Background(), tc.args, &bytes.Buffer{}); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: err = %v, want %q", tc.args, err, tc.want)
		}
	}
}

// TestWantsPrefix: --prefix selects the mode in every form the flag
// package takes, and a flag's value that reads "prefix" does not.
func TestWantsPrefix(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want bool
	}{
		{[]string{"--prefix"}, true},
		{[]string{"-prefix", "--json"}, true},
		{[]string{"--requests", "3", "--prefix=true"}, true},
		{[]string{"--prefix=false"}, false},
		{[]string{"--model", "prefix"}, false},
		{[]string{"--json", "--", "--prefix"}, false},
		{nil, false},
	} {
		if got := wantsPrefix(tc.args); got != tc.want {
			t.Errorf("wantsPrefix(%q) = %v, want %v", tc.args, got, tc.want)
		}
	}
}

// TestPrefixTurns: the workload is a function of its options, every turn
// is its user's system prompt and a question of its own, and users keep
// their system prompt.
func TestPrefixTurns(t *testing.T) {
	w := PrefixWorkload{Requests: 40, SystemPrompts: 3, SystemChars: 200, Users: 9, Seed: 7}
	a, b := prefixTurns(w), prefixTurns(w)
	if len(a) != 40 {
		t.Fatalf("%d turns", len(a))
	}
	systems := map[int]string{}
	for i, turn := range a {
		if turn != b[i] {
			t.Fatalf("turn %d differs between two builds: %+v, %+v", i, turn, b[i])
		}
		if turn.system != turn.user%3 {
			t.Fatalf("turn %d: user %d on system prompt %d", i, turn.user, turn.system)
		}
		sys, question, ok := strings.Cut(turn.prompt, "\n\n")
		if !ok || len(sys) != 200 || !strings.HasPrefix(question, "User ") {
			t.Fatalf("turn %d prompt %q", i, turn.prompt)
		}
		if prev, seen := systems[turn.system]; seen && prev != sys {
			t.Fatalf("system prompt %d changed between turns", turn.system)
		}
		systems[turn.system] = sys
	}
	if len(systems) != 3 {
		t.Fatalf("%d system prompts used, want 3", len(systems))
	}
	w.Seed = 8
	if prefixTurns(w)[0] == a[0] && prefixTurns(w)[1] == a[1] {
		t.Fatal("the seed changes nothing")
	}
}
