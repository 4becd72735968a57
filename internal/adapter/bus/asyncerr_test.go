package bus

import (
	"bytes"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
)

// TestSlowConsumerIsLogged: a subscription whose handler falls behind its
// pending limit has messages dropped by nats.go; the connection's error
// handler says so, naming the subject and how many were dropped, instead
// of the loss passing unseen.
func TestSlowConsumerIsLogged(t *testing.T) {
	srv, err := StartServer(ServerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Shutdown()
	buf := &lockedWriter{}
	log := slog.New(slog.NewTextHandler(buf, nil))
	nc, err := srv.Connect("slow", nats.ErrorHandler(AsyncErrorLogger(log, "slow")))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	release := make(chan struct{})
	sub, err := nc.Subscribe("sy.hb.test", func(*nats.Msg) { <-release })
	if err != nil {
		t.Fatal(err)
	}
	if err := sub.SetPendingLimits(2, -1); err != nil {
		t.Fatal(err)
	}
	for range 20 {
		if err := nc.Publish("sy.hb.test", []byte("x")); err != nil {
			t.Fatal(err)
		}
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for !strings.Contains(buf.String(), "slow consumer") {
		if time.Now().After(deadline) {
			close(release)
			t.Fatalf("no slow-consumer line; log:\n%s", buf.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
	close(release)
	if out := buf.String(); !strings.Contains(out, "subject=sy.hb.test") || !strings.Contains(out, "dropped=") {
		t.Fatalf("the line does not name the subject and the drops:\n%s", out)
	}
}

// lockedWriter serialises the handler's writes with the test's reads.
type lockedWriter struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedWriter) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
