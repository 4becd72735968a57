package subjects

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/switchyard-ai/switchyard/internal/adapter/bus"
)

func TestBuildersAndParsersAgree(t *testing.T) {
	if tn, batch, err := ParseIntake(Submit("acme")); err != nil || tn != "acme" || batch {
		t.Fatalf("submit: %q batch=%v %v", tn, batch, err)
	}
	if tn, batch, err := ParseIntake(BatchSubmit("acme")); err != nil || tn != "acme" || !batch {
		t.Fatalf("batch submit: %q batch=%v %v", tn, batch, err)
	}
	if tn, id, err := ParseResult(Result("acme", "r1")); err != nil || tn != "acme" || id != "r1" {
		t.Fatalf("result: %q %q %v", tn, id, err)
	}
	if w, err := ParseDispatch(Dispatch("gpu-0")); err != nil || w != "gpu-0" {
		t.Fatalf("dispatch: %q %v", w, err)
	}
	if pool, w, err := ParseHeartbeat(Heartbeat("h100", "gpu-0")); err != nil || pool != "h100" || w != "gpu-0" {
		t.Fatalf("heartbeat: %q %q %v", pool, w, err)
	}
	if r, err := ParseFairShare(FairShare("r1")); err != nil || r != "r1" {
		t.Fatalf("fair share: %q %v", r, err)
	}
	for _, bad := range []string{"sy.rpc.fair", "sy.rpc.book.r1", "sy.rpc.fair.r1.x", "sy.rpc.fair.*"} {
		if _, err := ParseFairShare(bad); err == nil {
			t.Errorf("ParseFairShare(%q) accepted", bad)
		}
	}
	for _, bad := range []string{"sy.submit", "sy.submit.a.b", "xx.submit.a", "sy.submit.*", "sy.admitted.a"} {
		if _, _, err := ParseIntake(bad); err == nil {
			t.Errorf("ParseIntake(%q) accepted", bad)
		}
	}
}

func TestValidToken(t *testing.T) {
	for s, want := range map[string]bool{"acme": true, "a-b_c": true, "": false, "a.b": false, "a*": false, "a>": false, "a b": false} {
		if got := ValidToken(s); got != want {
			t.Errorf("ValidToken(%q) = %v", s, got)
		}
	}
}

func TestDeadlineBuckets(t *testing.T) {
	tests := []struct {
		d    time.Duration
		want string
	}{{500 * time.Millisecond, "d1s"}, {time.Second, "d1s"}, {5 * time.Second, "d10s"}, {30 * time.Second, "d1m"},
		{5 * time.Minute, "d10m"}, {30 * time.Minute, "d1h"}, {5 * time.Hour, "dlong"}}
	for _, tc := range tests {
		if got := DeadlineBucket(tc.d); got != tc.want {
			t.Errorf("DeadlineBucket(%s) = %s, want %s", tc.d, got, tc.want)
		}
	}
}

// TestProvisionIsIdempotent provisions every stream twice on a real
// server: a second service starting must not fail or change anything.
func TestProvisionIsIdempotent(t *testing.T) {
	nc, js := startJetStream(t)
	ctx := context.Background()
	for i := 0; i < 2; i++ {
		if err := Provision(ctx, js, StreamOptions{}); err != nil {
			t.Fatalf("provision %d: %v", i, err)
		}
	}
	for _, cfg := range Streams(StreamOptions{}) {
		st, err := js.Stream(ctx, cfg.Name)
		if err != nil {
			t.Fatalf("stream %s: %v", cfg.Name, err)
		}
		info := st.CachedInfo()
		if info.Config.Retention != cfg.Retention || info.Config.Duplicates != cfg.Duplicates {
			t.Fatalf("stream %s config drifted: %+v", cfg.Name, info.Config)
		}
	}
	// A core publish on a submit subject is recorded (that is how `nats pub` works).
	if err := nc.Publish(Submit("acme"), []byte(`{}`)); err != nil {
		t.Fatal(err)
	}
	nc.Flush()
	deadline := time.Now().Add(5 * time.Second)
	for {
		st, _ := js.Stream(ctx, StreamSubmit)
		info, _ := st.Info(ctx)
		if info.State.Msgs == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("core publish not recorded: %+v", info.State)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// startJetStream runs an embedded JetStream server for one test and
// connects to it; both end with the test. (internal/testkit/bustest does
// this for other packages, but it imports subjects: these in-package tests
// cannot use it.)
func startJetStream(t *testing.T) (*nats.Conn, jetstream.JetStream) {
	t.Helper()
	srv, err := bus.StartServer(bus.ServerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Shutdown)
	nc, err := srv.Connect("t")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := bus.JetStream(nc)
	if err != nil {
		t.Fatal(err)
	}
	return nc, js
}
