package clienttest

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/switchyard-ai/switchyard/schemas"
	"github.com/switchyard-ai/switchyard/services/stack"
)

// repoRoot finds the module root, where the project's scripts install tools.
func repoRoot(t *testing.T) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatal("go.mod not found above the test directory")
		}
		dir = parent
	}
}

// requireTool skips when a tool is missing, unless SWITCHYARD_REQUIRE_TOOLS=1
// (set by .ci/run after .ci/install-tools.sh) turns the skip into a failure
// so CI cannot pass by not running the test.
func requireTool(t *testing.T, what string, ok bool) {
	t.Helper()
	if ok {
		return
	}
	msg := what + " not installed; run .ci/install-tools.sh"
	if os.Getenv("SWITCHYARD_REQUIRE_TOOLS") == "1" {
		t.Fatal(msg + " (SWITCHYARD_REQUIRE_TOOLS=1)")
	}
	t.Skip(msg)
}

// natsCLI returns the natscli binary: on PATH, or where install-tools puts it.
func natsCLI(t *testing.T) string {
	if p, err := exec.LookPath("nats"); err == nil {
		return p
	}
	p := filepath.Join(repoRoot(t), ".tools", "bin", "nats")
	_, err := os.Stat(p)
	requireTool(t, "natscli", err == nil)
	return p
}

// system starts a whole Switchyard (embedded JetStream, admitter, router,
// one simulated worker running 50x real time) listening on a TCP port for
// outside clients.
func system(t *testing.T) *stack.Stack {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	st, err := stack.Start(ctx, stack.Config{Listen: "127.0.0.1:0", Workers: 1, SpeedUp: 50})
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	t.Cleanup(func() {
		st.Close()
		cancel()
	})
	return st
}

// waitSubscribed waits until a client connection with the given name holds
// a subscription on the server, so a publish cannot race the subscribe.
func waitSubscribed(t *testing.T, ns *server.Server, name string) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		cz, err := ns.Connz(&server.ConnzOptions{})
		if err == nil {
			for _, c := range cz.Conns {
				if c.Name == name && c.NumSubs > 0 {
					return
				}
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("client %q never subscribed", name)
}

func checkResult(t *testing.T, raw []byte, tenant, id string) schemas.Result {
	t.Helper()
	var r schemas.Result
	if err := json.Unmarshal(bytes.TrimSpace(raw), &r); err != nil {
		t.Fatalf("result is not JSON: %v\n%s", err, raw)
	}
	if r.ID != id || r.Tenant != tenant || r.Status != schemas.StatusOK || r.Text == "" || r.Usage.CompletionTokens == 0 {
		t.Fatalf("unexpected result %+v", r)
	}
	return r
}

const request = `{"model":"llama-3.1-8b","prompt":"hi","max_tokens":16}`

// TestNatsCLI does exactly what docs/clients.md shows: `nats sub` on the
// tenant's results, `nats pub` of a JSON request with a Nats-Msg-Id, then
// reads the stored result back with `nats stream get`.
func TestNatsCLI(t *testing.T) {
	bin := natsCLI(t)
	st := system(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	base := []string{"--no-context", "--server", st.URL}

	sub := exec.CommandContext(ctx, bin, append(base, "--connection-name", "clienttest-sub", "sub", "sy.result.acme.>", "--count", "1", "--raw")...)
	var subErr bytes.Buffer
	sub.Stderr = &subErr
	out, err := sub.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := sub.Start(); err != nil {
		t.Fatal(err)
	}
	waitSubscribed(t, st.Server.NS, "clienttest-sub")

	pub := exec.CommandContext(ctx, bin, append(base, "pub", "sy.submit.acme", request, "-H", "Nats-Msg-Id:req1")...)
	if b, err := pub.CombinedOutput(); err != nil {
		t.Fatalf("nats pub: %v\n%s", err, b)
	}
	line, err := bufio.NewReader(out).ReadBytes('\n')
	if err != nil && err != io.EOF {
		t.Fatalf("nats sub output: %v (stderr %s)", err, subErr.String())
	}
	if err := sub.Wait(); err != nil {
		t.Fatalf("nats sub: %v\n%s", err, subErr.String())
	}
	live := checkResult(t, line, "acme", "req1")

	// A late reader: the result is in the RESULTS stream.
	get := exec.CommandContext(ctx, bin, append(base, "stream", "get", "RESULTS", "--last-for", "sy.result.acme.req1", "--json")...)
	b, err := get.CombinedOutput()
	if err != nil {
		t.Fatalf("nats stream get: %v\n%s", err, b)
	}
	var stored struct {
		Subject string `json:"subject"`
		Data    []byte `json:"data"`
	}
	if err := json.Unmarshal(b, &stored); err != nil {
		t.Fatalf("nats stream get output: %v\n%s", err, b)
	}
	late := checkResult(t, stored.Data, "acme", "req1")
	if stored.Subject != "sy.result.acme.req1" || late.Text != live.Text {
		t.Fatalf("stored result %s %+v differs from live %+v", stored.Subject, late, live)
	}
}

// TestJavaScriptClient runs .ci/js/natsclient/submit.mjs with the npm nats
// package: publish, live receive and a late JetStream read.
func TestJavaScriptClient(t *testing.T) {
	node, err := exec.LookPath("node")
	requireTool(t, "node", err == nil)
	dir := filepath.Join(repoRoot(t), ".ci", "js", "natsclient")
	_, err = os.Stat(filepath.Join(dir, "node_modules", "nats", "package.json"))
	requireTool(t, "npm package nats", err == nil)
	st := system(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, "submit.mjs", "acme", "js-req-1", request)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "NATS_URL="+st.URL)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	b, err := cmd.Output()
	if err != nil {
		t.Fatalf("node submit.mjs: %v\n%s", err, stderr.String())
	}
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	checkResult(t, []byte(lines[len(lines)-1]), "acme", "js-req-1")
}
