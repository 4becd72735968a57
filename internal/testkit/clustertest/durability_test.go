package clustertest

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/switchyard-ai/switchyard/internal/adapter/bus"
	"github.com/switchyard-ai/switchyard/internal/adapter/ledger"
	"github.com/switchyard-ai/switchyard/schemas"
	"github.com/switchyard-ai/switchyard/subjects"
)

// publishAcked publishes requests id prefix-0..n-1 on sy.submit.acme and
// returns the ids JetStream acknowledged. A publish that fails (a leader
// election in progress) is retried with the same Nats-Msg-Id until ctx ends,
// so the stream's dedupe keeps it single.
func publishAcked(ctx context.Context, t *testing.T, js jetstream.JetStream, prefix string, n int) []string {
	t.Helper()
	var acked []string
	for i := 0; i < n; i++ {
		id := fmt.Sprintf("%s-%d", prefix, i)
		req := schemas.Request{ID: id, Model: "llama-3.1-8b", Prompt: "hello " + id, MaxTokens: 8}
		msg := nats.NewMsg(subjects.Submit("acme"))
		msg.Data = schemas.MustMarshal(schemas.JSON, req)
		msg.Header.Set(schemas.HeaderContentType, schemas.ContentJSON)
		msg.Header.Set(schemas.HeaderMsgID, id)
		for {
			pctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			_, err := js.PublishMsg(pctx, msg)
			cancel()
			if err == nil {
				acked = append(acked, id)
				break
			}
			if ctx.Err() != nil {
				t.Fatalf("publish %s never acknowledged: %v", id, err)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	return acked
}

// readAll returns the Nats-Msg-Ids stored in stream, in order, waiting until
// at least want messages are readable (a new leader may still be catching
// up) or ctx ends.
func readAll(ctx context.Context, t *testing.T, js jetstream.JetStream, stream string, want int) []string {
	t.Helper()
	for {
		ids, err := read(ctx, js, stream)
		if err == nil && len(ids) >= want {
			return ids
		}
		if ctx.Err() != nil {
			t.Fatalf("read back %s: %d messages (want %d), last error %v", stream, len(ids), want, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func read(ctx context.Context, js jetstream.JetStream, stream string) ([]string, error) {
	rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	cons, err := js.OrderedConsumer(rctx, stream, jetstream.OrderedConsumerConfig{})
	if err != nil {
		return nil, err
	}
	info, err := cons.Info(rctx)
	if err != nil {
		return nil, err
	}
	total := int(info.NumPending)
	var ids []string
	for len(ids) < total {
		batch, err := cons.Fetch(min(total-len(ids), 256), jetstream.FetchMaxWait(2*time.Second))
		if err != nil {
			return ids, err
		}
		got := 0
		for m := range batch.Messages() {
			ids = append(ids, m.Headers().Get(schemas.HeaderMsgID))
			got++
		}
		if err := batch.Error(); err != nil && !errors.Is(err, nats.ErrTimeout) {
			return ids, err
		}
		if got == 0 {
			return ids, fmt.Errorf("fetch returned nothing with %d pending", total-len(ids))
		}
	}
	return ids, nil
}

// sameSet fails unless got holds exactly the acked ids, each once.
func sameSet(t *testing.T, acked, got []string) {
	t.Helper()
	seen := map[string]int{}
	for _, id := range got {
		seen[id]++
	}
	for _, id := range acked {
		if seen[id] == 0 {
			t.Errorf("acknowledged message %s lost", id)
		}
	}
	for id, n := range seen {
		if n > 1 {
			t.Errorf("message %s stored %d times", id, n)
		}
	}
	if len(got) != len(acked) {
		t.Errorf("stream holds %d messages, %d were acknowledged", len(got), len(acked))
	}
}

// TestR3SurvivesStreamLeaderLoss: on a 3-node cluster with R3 streams, kill
// the node leading SUBMIT; everything acknowledged before and after is
// there, once.
func TestR3SurvivesStreamLeaderLoss(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a 3-node cluster")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	c, err := StartCluster(ctx, 3, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Shutdown()
	nc, err := c.Connect("clustertest")
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := bus.JetStream(nc)
	if err != nil {
		t.Fatal(err)
	}
	so := subjects.StreamOptions{Replicas: 3, MaxBytes: 64 << 20}
	for {
		pctx, pcancel := context.WithTimeout(ctx, 10*time.Second)
		err = subjects.Provision(pctx, js, so)
		pcancel()
		if err == nil {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("provision R3 streams: %v", err)
		}
		time.Sleep(250 * time.Millisecond)
	}
	for _, cfg := range subjects.Streams(so) {
		info, err := js.Stream(ctx, cfg.Name)
		if err != nil {
			t.Fatal(err)
		}
		if r := info.CachedInfo().Config.Replicas; r != 3 {
			t.Fatalf("stream %s has %d replicas", cfg.Name, r)
		}
	}
	const n = 150
	acked := publishAcked(ctx, t, js, "before", n)

	leader := -1
	for leader < 0 && ctx.Err() == nil {
		leader = c.StreamLeader(subjects.StreamSubmit)
		time.Sleep(50 * time.Millisecond)
	}
	if leader < 0 {
		t.Fatal("SUBMIT has no leader")
	}
	t.Logf("killing node %d, leader of %s", leader, subjects.StreamSubmit)
	killed := time.Now()
	c.Kill(leader)

	acked = append(acked, publishAcked(ctx, t, js, "after", n)...)
	t.Logf("publishing resumed on the surviving nodes %s after the kill", time.Since(killed).Round(time.Millisecond))
	if nl := c.StreamLeader(subjects.StreamSubmit); nl < 0 || nl == leader {
		t.Fatalf("no new leader for SUBMIT (got %d)", nl)
	}
	sameSet(t, acked, readAll(ctx, t, js, subjects.StreamSubmit, len(acked)))
}

// TestSingleNodeRestartKeepsAcked: a file-backed server restarted on the
// same store keeps every acknowledged message and every final result, which the ledger's compare-and-set still sees.
func TestSingleNodeRestartKeepsAcked(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	dir := t.TempDir()
	start := func() (*bus.Server, jetstream.JetStream, *nats.Conn) {
		srv, err := bus.StartServer(bus.ServerConfig{StoreDir: dir})
		if err != nil {
			t.Fatal(err)
		}
		nc, err := srv.Connect("restart-test")
		if err != nil {
			t.Fatal(err)
		}
		js, err := bus.JetStream(nc)
		if err != nil {
			t.Fatal(err)
		}
		if err := subjects.Provision(ctx, js, subjects.StreamOptions{}); err != nil {
			t.Fatal(err)
		}
		return srv, js, nc
	}
	srv, js, nc := start()
	acked := publishAcked(ctx, t, js, "req", 300)
	l, err := ledger.New(js)
	if err != nil {
		t.Fatal(err)
	}
	res := schemas.Result{ID: "req-7", Tenant: "acme", Status: schemas.StatusOK, WorkerID: "w1"}
	if ok, err := l.Finish(ctx, res, schemas.JSON); !ok || err != nil {
		t.Fatalf("finish: %v %v", ok, err)
	}
	nc.Close()
	srv.Shutdown()

	srv, js, nc = start()
	defer srv.Shutdown()
	defer nc.Close()
	sameSet(t, acked, readAll(ctx, t, js, subjects.StreamSubmit, len(acked)))
	l, err = ledger.New(js)
	if err != nil {
		t.Fatal(err)
	}
	res.WorkerID = "w1-back-from-the-dead"
	if ok, err := l.Finish(ctx, res, schemas.JSON); ok || err != nil {
		t.Fatalf("finish after restart: published=%v err=%v; the claim must have survived", ok, err)
	}
	ids := readAll(ctx, t, js, subjects.StreamResults, 1)
	if len(ids) != 1 {
		t.Fatalf("%d results after restart, want 1", len(ids))
	}
}
