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

// TestBenchEngineSmoke runs the engine bench for a few pairs against the
// pinned Ollama and checks its --json line: both paths answered, from a
// real engine, with identical token counts. It asserts no latency figure.
func TestBenchEngineSmoke(t *testing.T) {
	if _, err := enginetest.FindOllama(); errors.Is(err, enginetest.ErrNoOllama) {
		if os.Getenv("SWITCHYARD_REQUIRE_TOOLS") == "1" {
			t.Fatal(err.Error() + " (SWITCHYARD_REQUIRE_TOOLS=1)")
		}
		t.Skip(err.Error())
	}
	var out bytes.Buffer
	if err := runBenchEngine(context.Background(), []string{"--requests", "3", "--max-tokens", "4", "--json"}, &out); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	var r EngineBenchResult
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &r); err != nil {
		t.Fatalf("last line %q: %v", lines[len(lines)-1], err)
	}
	if r.Requests != 3 || r.Simulated || !r.TokenCountsIdentical || r.CompletionTokens != 4 || r.PromptTokens <= 0 ||
		r.DirectTTFTP50Ms <= 0 || r.SwitchyardTTFTP50Ms <= 0 || r.SwitchyardTotalP50Ms < r.SwitchyardTTFTP50Ms {
		t.Fatalf("result %+v\n%s", r, out.String())
	}
}

func TestBenchEngineRejectsFlags(t *testing.T) {
	for _, args := range [][]string{{"--requests", "0"}, {"--max-tokens", "-1"}} {
		if err := runBenchEngine(context.Background(), args, &bytes.Buffer{}); err == nil || !strings.Contains(err.Error(), "must be >= 1") {
			t.Errorf("%v: err = %v", args, err)
		}
	}
}
