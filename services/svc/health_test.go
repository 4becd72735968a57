package svc

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/switchyard-ai/switchyard/internal/testkit/bustest"
	"github.com/switchyard-ai/switchyard/internal/testkit/waitfor"
	"github.com/switchyard-ai/switchyard/schemas"
	"github.com/switchyard-ai/switchyard/subjects"
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

// TestSLOLeavesOutClientErrors: switchyard_slo_total counts what the
// service did — an ok within its SLO, a shed, a cancel — and not a request
// the client got wrong.
func TestSLOLeavesOutClientErrors(t *testing.T) {
	env := bustest.StartProvisioned(t, subjects.StreamOptions{})
	sh, err := New("admitter", "a1", env.NC, slog.Default())
	if err != nil {
		t.Fatal(err)
	}
	for i, res := range []schemas.Result{
		{Status: schemas.StatusOK, SLOMet: true, Priority: "interactive"},
		{Status: schemas.StatusShed, Error: &schemas.Error{Code: schemas.CodeShed}, Priority: "interactive"},
		{Status: schemas.StatusRejected, Error: &schemas.Error{Code: schemas.CodeMalformed}},
		{Status: schemas.StatusRejected, Error: &schemas.Error{Code: schemas.CodePriorityNotAllowed}, Priority: "critical"},
		{Status: schemas.StatusFailed, Error: &schemas.Error{Code: schemas.CodeCancelled}, Priority: "interactive"},
	} {
		res.ID, res.Tenant = fmt.Sprintf("r%d", i), "acme"
		if err := sh.PublishResult(context.Background(), res, schemas.JSON); err != nil {
			t.Fatal(err)
		}
	}
	var b strings.Builder
	sh.Metrics.WritePrometheus(&b)
	got := map[string]bool{}
	for _, line := range strings.Split(b.String(), "\n") {
		if strings.HasPrefix(line, "switchyard_slo_total{") {
			got[line] = true
		}
	}
	want := map[string]bool{`switchyard_slo_total{class="interactive",met="true"} 1`: true, `switchyard_slo_total{class="interactive",met="false"} 2`: true}
	if len(got) != len(want) {
		t.Fatalf("slo series %v, want %v", got, want)
	}
	for l := range want {
		if !got[l] {
			t.Fatalf("slo series %v, want %v", got, want)
		}
	}
}
