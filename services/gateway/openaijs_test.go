package gateway

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestOpenAIJSClient runs the official OpenAI JavaScript client
// (.ci/js/gateway/test.mjs, npm `openai` at the version pinned in
// package.json) against the gateway over real HTTP on 127.0.0.1, with the
// instant backend behind the bus: paced tokens so streaming is visible,
// and a capacity of two in flight so a burst is shed.
func TestOpenAIJSClient(t *testing.T) {
	dir, err := filepath.Abs(filepath.Join("..", "..", ".ci", "js", "gateway"))
	if err != nil {
		t.Fatal(err)
	}
	require := os.Getenv("SWITCHYARD_REQUIRE_TOOLS") == "1"
	missing := func(what string) {
		if require {
			t.Fatalf("%s (SWITCHYARD_REQUIRE_TOOLS=1; run .ci/install-js.sh)", what)
		}
		t.Skipf("%s: run .ci/install-js.sh", what)
	}
	node, err := exec.LookPath("node")
	if err != nil {
		missing("node not on PATH")
	}
	if _, err := os.Stat(filepath.Join(dir, "node_modules", "openai", "package.json")); err != nil {
		missing("openai npm package not installed in " + dir)
	}
	e := start(t, InstantConfig{TokenDelay: 40 * time.Millisecond, Capacity: 2}, Config{})
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, "test.mjs")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "OPENAI_BASE_URL="+e.url+"/v1", "OPENAI_API_KEY="+testKey)
	out, err := cmd.CombinedOutput()
	t.Logf("node test.mjs:\n%s", out)
	if err != nil {
		t.Fatalf("node test.mjs: %v", err)
	}
	if !strings.Contains(string(out), " passed, 0 failed") {
		t.Fatalf("no passing summary from test.mjs")
	}
}
