package vllmkv

import (
	"bufio"
	"context"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/switchyard-ai/switchyard/internal/tokens"
)

// TestInteropWithLibzmqPublisher follows a publisher built on libzmq
// (pyzmq) and Python's msgpack — the libraries vLLM's publisher runs on —
// speaking the protocol of vllm/distributed/kv_events.py
// (testdata/vllm_publisher.py). The other tests run Go sockets on both
// ends; this one checks the ZMTP interoperability of the Go library, PUB
// to SUB and ROUTER to DEALER, with startup replay and a gap filled by
// replay. It needs python3 with the zmq and msgpack modules (Debian:
// python3-zmq, python3-msgpack) and skips without them.
func TestInteropWithLibzmqPublisher(t *testing.T) {
	// The first python3 on PATH may be another installation than the
	// system's, where Debian's packages go.
	py := ""
	for _, cand := range []string{"python3", "/usr/bin/python3"} {
		if p, err := exec.LookPath(cand); err == nil && exec.Command(p, "-c", "import zmq, msgpack").Run() == nil {
			py = p
			break
		}
	}
	if py == "" {
		t.Skip("no python3 with the zmq and msgpack modules (Debian: python3-zmq python3-msgpack)")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, py, "testdata/vllm_publisher.py")
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		io.WriteString(stdin, `{"op": "quit"}`+"\n")
		stdin.Close()
		if err := cmd.Wait(); err != nil && ctx.Err() == nil {
			t.Errorf("publisher: %v: %s", err, stderr.String())
		}
	}()
	lines := make(chan string, 64)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	next := func() string {
		select {
		case l, ok := <-lines:
			if !ok {
				t.Fatalf("publisher exited: %s", stderr.String())
			}
			return l
		case <-time.After(10 * time.Second):
			t.Fatalf("publisher silent: %s", stderr.String())
		}
		return ""
	}
	var pubPort, replayPort int
	if _, err := fmt.Sscanf(next(), "ready %d %d", &pubPort, &replayPort); err != nil {
		t.Fatal(err)
	}
	send := func(drop bool, events ...map[string]any) uint64 {
		t.Helper()
		if events == nil {
			events = []map[string]any{}
		}
		b, err := json.Marshal(map[string]any{"op": "batch", "drop": drop, "events": events})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := stdin.Write(append(b, '\n')); err != nil {
			t.Fatal(err)
		}
		var seq uint64
		if _, err := fmt.Sscanf(next(), "sent %d", &seq); err != nil {
			t.Fatal(err)
		}
		return seq
	}

	toks := prompt(30, 48)
	want := tokens.BlockHashes(toks)
	const rootHash = uint64(1<<64 - 5) // past int64: msgpack uint64
	child := hex.EncodeToString([]byte(strings.Repeat("\xab", 32)))
	// Cached before the subscriber starts: only the startup replay has it.
	send(false, map[string]any{"type": "BlockStored", "block_hashes": []any{rootHash, 7}, "parent_block_hash": nil,
		"token_ids": toks[:32], "block_size": 16, "lora_id": nil, "medium": "GPU", "lora_name": nil})

	rec := follow(t, Config{Endpoint: fmt.Sprintf("tcp://127.0.0.1:%d", pubPort), Replay: fmt.Sprintf("tcp://127.0.0.1:%d", replayPort)})
	deadline := time.Now().Add(20 * time.Second)
	for {
		seq := send(false)
		rec.mu.Lock()
		got := rec.sawSeq(seq)
		rec.mu.Unlock()
		if got {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("never received the libzmq publisher's batches: %s", stderr.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
	// Lost on the PUB socket, kept for replay: the next batch reveals the
	// gap and the ROUTER socket fills it.
	send(true, map[string]any{"type": "BlockStored", "block_hashes": []any{"b:" + child}, "parent_block_hash": 7,
		"token_ids": toks[32:], "block_size": 16, "lora_id": nil, "medium": "GPU", "lora_name": nil})
	last := send(false, map[string]any{"type": "BlockRemoved", "block_hashes": []any{rootHash}, "medium": "GPU"})
	rec.waitFor(t, "the gap replayed from libzmq's ROUTER socket", func() bool { return rec.sawSeq(last) })
	if !isSorted(rec.seqs) || rec.seqs[0] != 0 || len(rec.resyncs) != 0 || len(rec.malformed) != 0 {
		t.Fatalf("seqs %v resyncs %q malformed %v", rec.seqs, rec.resyncs, rec.malformed)
	}
	if !slices.Equal(rec.tr.Hashes(), slices.Sorted(slices.Values(want[1:]))) {
		t.Fatalf("resident %x, want %x", rec.tr.Hashes(), want[1:])
	}
}
