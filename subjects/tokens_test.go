package subjects

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// TestTokensStreamShape: TOKENS keeps chunks in memory for at most
// TokensMaxAge, captures every token subject, and provisions under any
// options the other streams accept (a duplicate window longer than its
// age included).
func TestTokensStreamShape(t *testing.T) {
	for _, o := range []StreamOptions{{}, {MaxAge: 5 * time.Minute}, {DuplicateWindow: 30 * time.Minute}} {
		var tok *jetstream.StreamConfig
		for _, cfg := range Streams(o) {
			if cfg.Name == StreamTokens {
				tok = &cfg
			}
		}
		if tok == nil {
			t.Fatalf("%+v: no %s stream", o, StreamTokens)
		}
		if tok.Storage != jetstream.MemoryStorage || tok.MaxAge > TokensMaxAge || tok.Duplicates > tok.MaxAge ||
			len(tok.Subjects) != 1 || tok.Subjects[0] != TokensAll {
			t.Fatalf("%+v: TOKENS %+v", o, *tok)
		}
	}
	_, js := startJetStream(t)
	if err := Provision(context.Background(), js, StreamOptions{DuplicateWindow: 30 * time.Minute}); err != nil {
		t.Fatal(err)
	}
}
