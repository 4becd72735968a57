package worker

import (
	"context"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/switchyard-ai/switchyard/internal/testkit/bustest"
	"github.com/switchyard-ai/switchyard/schemas"
	"github.com/switchyard-ai/switchyard/services/svc"
	"github.com/switchyard-ai/switchyard/subjects"
)

// streamTokens is a 1,200-token answer streamed the way the worker
// streams it (a chunk per chunkTokens tokens, then the final marker).
const streamTokens = 1200

func benchWorker(b *testing.B, provisioned bool) (*Worker, bustest.Env) {
	var env bustest.Env
	if provisioned {
		env = bustest.StartProvisioned(b, subjects.StreamOptions{})
	} else {
		env = bustest.Start(b) // no TOKENS: chunks are core NATS only, as before
	}
	sh, err := svc.New("worker", "w", env.NC, slog.New(slog.DiscardHandler))
	if err != nil {
		b.Fatal(err)
	}
	return &Worker{sh: sh}, env
}

func streamOne(w *Worker, id string) {
	a := schemas.Admitted{Tenant: "acme", Request: schemas.Request{ID: id}}
	s := newTokenStream(&a)
	g := newSimWords(id)
	for i := range streamTokens {
		s.add(g.next(1), 1, time.Time{})
		if (i+1)%chunkTokens == 0 {
			w.flush(s, false)
		}
	}
	w.flush(s, true)
}

// BenchmarkStreamPublish: the worker's cost of streaming one answer, with
// TOKENS capturing every chunk (the failover record) and without it.
func BenchmarkStreamPublish(b *testing.B) {
	for _, tc := range []struct {
		name        string
		provisioned bool
	}{{"core-only", false}, {"captured-in-TOKENS", true}} {
		b.Run(tc.name, func(b *testing.B) {
			w, env := benchWorker(b, tc.provisioned)
			b.ResetTimer()
			for i := range b.N {
				streamOne(w, fmt.Sprintf("bench-%d", i))
			}
			if err := env.NC.Flush(); err != nil {
				b.Fatal(err)
			}
			b.StopTimer()
			if tc.provisioned {
				st, err := env.JS.Stream(context.Background(), subjects.StreamTokens)
				if err != nil {
					b.Fatal(err)
				}
				// The server stores asynchronously; wait for the last chunk.
				want := uint64(b.N) * (streamTokens/chunkTokens + 1)
				for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
					info, err := st.Info(context.Background())
					if err == nil && info.State.Msgs >= want {
						b.ReportMetric(float64(info.State.Bytes)/float64(b.N), "stored-B/stream")
						break
					}
				}
			}
			b.ReportMetric(float64(streamTokens/chunkTokens+1), "chunks/stream")
		})
	}
}

// BenchmarkReadStreamed: a taking-over worker reading back a 1,200-token
// stream before it continues it.
func BenchmarkReadStreamed(b *testing.B) {
	w, env := benchWorker(b, true)
	streamOne(w, "read")
	env.NC.Flush()
	time.Sleep(100 * time.Millisecond)
	b.ResetTimer()
	for range b.N {
		r, err := readStreamed(context.Background(), env.JS, "acme", "read")
		if err != nil || r.tokens != streamTokens {
			b.Fatalf("read %d tokens, %v", r.tokens, err)
		}
	}
}
