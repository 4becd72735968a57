// Package bustest starts what tests need from the bus: a real embedded
// JetStream server (never a mock), a connection to it, and optionally
// Switchyard's streams, all torn down when the test ends.
package bustest

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/switchyard-ai/switchyard/internal/adapter/bus"
	"github.com/switchyard-ai/switchyard/subjects"
)

// Env is a running test server and one connection to it.
type Env struct {
	Server *bus.Server
	NC     *nats.Conn
	JS     jetstream.JetStream
}

// Start runs an in-process JetStream server and connects to it.
func Start(t testing.TB) Env {
	t.Helper()
	return StartListening(t, "")
}

// StartListening is Start with the server also listening on listen (e.g.
// "127.0.0.1:0" for a free loopback port; "" for none), for a test that
// hands a command line its URL (Server.ClientURL).
func StartListening(t testing.TB, listen string) Env {
	t.Helper()
	srv, err := bus.StartServer(bus.ServerConfig{Listen: listen})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Shutdown)
	nc, err := srv.Connect(t.Name())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := bus.JetStream(nc)
	if err != nil {
		t.Fatal(err)
	}
	return Env{Server: srv, NC: nc, JS: js}
}

// StartProvisioned is Start plus every Switchyard stream (opts sized).
func StartProvisioned(t testing.TB, opts subjects.StreamOptions) Env {
	t.Helper()
	e := Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := subjects.Provision(ctx, e.JS, opts); err != nil {
		t.Fatal(err)
	}
	return e
}
