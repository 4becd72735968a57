package svc

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/switchyard-ai/switchyard/internal/testkit/bustest"
	"github.com/switchyard-ai/switchyard/internal/testkit/waitfor"
)

// TestHealthzFollowsTheNATSConnection: a service's /healthz answers 200
// while its NATS connection is up and 503, naming the connection, once the
// server is gone — a probe must not call a service healthy that can neither
// consume nor publish.
func TestHealthzFollowsTheNATSConnection(t *testing.T) {
	env := bustest.Start(t)
	reg := &Registry{}
	reg.AddHealth(ConnHealth(env.NC))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	addr, err := reg.Serve(ctx, "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	probe := func() (int, string) {
		resp, err := http.Get("http://" + addr + "/healthz")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, body := probe(); code != http.StatusOK {
		t.Fatalf("connected: %d %q, want 200", code, body)
	}
	env.Server.Shutdown()
	var code int
	var body string
	waitfor.True(t, "healthz to report the lost connection", 10*time.Second, func() bool {
		code, body = probe()
		return code == http.StatusServiceUnavailable
	})
	if !strings.Contains(body, "nats: not connected") {
		t.Fatalf("503 body %q does not say why", body)
	}
}
