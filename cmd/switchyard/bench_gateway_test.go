package main

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"
)

// TestBenchGatewaySmoke runs the gateway bench briefly and checks that its
// --json line is well formed and both sides served requests. It asserts no
// figure: performance is not a unit-test property on a shared machine.
func TestBenchGatewaySmoke(t *testing.T) {
	for _, stream := range []string{"--stream=false", "--stream=true"} {
		var out bytes.Buffer
		if err := runBenchGateway(context.Background(), []string{"--duration", "200ms", "--concurrency", "2", stream, "--json"}, &out); err != nil {
			t.Fatal(err)
		}
		lines := strings.Split(strings.TrimSpace(out.String()), "\n")
		var r GatewayBenchResult
		if err := json.Unmarshal([]byte(lines[len(lines)-1]), &r); err != nil {
			t.Fatalf("last line %q: %v", lines[len(lines)-1], err)
		}
		if r.GatewayReqPerS <= 0 || r.DirectReqPerS <= 0 || r.GatewayP50Ms <= 0 || r.DirectP50Ms <= 0 || r.Concurrency != 2 {
			t.Fatalf("result %+v\n%s", r, out.String())
		}
	}
}
