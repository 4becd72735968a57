package vllmkv

import (
	"bufio"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/switchyard-ai/switchyard/internal/core/tokens"
)

// The tests in this file follow a publisher built on libzmq (pyzmq) and
// Python's msgpack — the libraries vLLM's publisher runs on — speaking the
// protocol of vllm/distributed/kv_events.py (testdata/vllm_publisher.py).
// The other tests run Go sockets on both ends; these check the ZMTP
// interoperability of the Go library, PUB to SUB and ROUTER to DEALER.
// They need python3 with the zmq and msgpack modules (Debian: python3-zmq,
// python3-msgpack) and skip without them.

// pythonWithZMQ is a python3 that imports zmq and msgpack, or "".
func pythonWithZMQ() string {
	// The first python3 on PATH may be another installation than the
	// system's, where Debian's packages go.
	for _, cand := range []string{"python3", "/usr/bin/python3"} {
		if p, err := exec.LookPath(cand); err == nil && exec.Command(p, "-c", "import zmq, msgpack").Run() == nil {
			return p
		}
	}
	return ""
}

// pyPublisher drives one testdata/vllm_publisher.py process.
type pyPublisher struct {
	t                   *testing.T
	cmd                 *exec.Cmd
	stdin               io.WriteCloser
	lines               chan string
	stderr              *strings.Builder
	pubPort, replayPort int
	stopped             bool
}

// startPyPublisher starts the publisher, on the given ports if any.
func startPyPublisher(t *testing.T, ports ...int) *pyPublisher {
	t.Helper()
	py := pythonWithZMQ()
	if py == "" {
		const missing = "no python3 with the zmq and msgpack modules (Debian: python3-zmq python3-msgpack; bash .ci/install-python-zmq.sh)"
		if os.Getenv("SWITCHYARD_REQUIRE_TOOLS") == "1" {
			t.Fatal(missing + " (SWITCHYARD_REQUIRE_TOOLS=1)")
		}
		t.Skip(missing)
	}
	args := []string{"testdata/vllm_publisher.py"}
	for _, p := range ports {
		args = append(args, fmt.Sprint(p))
	}
	p := &pyPublisher{t: t, cmd: exec.Command(py, args...), lines: make(chan string, 64), stderr: &strings.Builder{}}
	var err error
	if p.stdin, err = p.cmd.StdinPipe(); err != nil {
		t.Fatal(err)
	}
	stdout, err := p.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	p.cmd.Stderr = p.stderr
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.stop)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			p.lines <- sc.Text()
		}
		close(p.lines)
	}()
	if _, err := fmt.Sscanf(p.next(), "ready %d %d", &p.pubPort, &p.replayPort); err != nil {
		t.Fatal(err)
	}
	return p
}

func (p *pyPublisher) next() string {
	p.t.Helper()
	select {
	case l, ok := <-p.lines:
		if !ok {
			p.t.Fatalf("publisher exited: %s", p.stderr.String())
		}
		return l
	case <-time.After(10 * time.Second):
		p.t.Fatalf("publisher silent: %s", p.stderr.String())
	}
	return ""
}

// send publishes one batch (with drop, only into the replay buffer) and
// returns its sequence number.
func (p *pyPublisher) send(drop bool, events ...map[string]any) uint64 {
	p.t.Helper()
	if events == nil {
		events = []map[string]any{}
	}
	b, err := json.Marshal(map[string]any{"op": "batch", "drop": drop, "events": events})
	if err != nil {
		p.t.Fatal(err)
	}
	if _, err := p.stdin.Write(append(b, '\n')); err != nil {
		p.t.Fatal(err)
	}
	var seq uint64
	if _, err := fmt.Sscanf(p.next(), "sent %d", &seq); err != nil {
		p.t.Fatal(err)
	}
	return seq
}

// stop ends the process (its sockets close with it).
func (p *pyPublisher) stop() {
	if p.stopped {
		return
	}
	p.stopped = true
	io.WriteString(p.stdin, `{"op": "quit"}`+"\n")
	p.stdin.Close()
	done := make(chan error, 1)
	go func() { done <- p.cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			p.t.Errorf("publisher: %v: %s", err, p.stderr.String())
		}
	case <-time.After(10 * time.Second):
		p.cmd.Process.Kill()
		<-done
		p.t.Error("publisher did not quit")
	}
}

func (p *pyPublisher) config() Config {
	return Config{Endpoint: fmt.Sprintf("tcp://127.0.0.1:%d", p.pubPort), Replay: fmt.Sprintf("tcp://127.0.0.1:%d", p.replayPort)}
}

// warmUpPy publishes empty batches until the subscriber has one.
func warmUpPy(t *testing.T, p *pyPublisher, rec *recorder) {
	t.Helper()
	rec.release()
	deadline := time.Now().Add(20 * time.Second)
	for {
		seq := p.send(false)
		rec.mu.Lock()
		got := rec.sawSeq(seq)
		rec.mu.Unlock()
		if got {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("never received the libzmq publisher's batches: %s", p.stderr.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func TestInteropWithLibzmqPublisher(t *testing.T) {
	p := startPyPublisher(t)
	toks := prompt(30, 48)
	want := tokens.BlockHashes(toks)
	const rootHash = uint64(1<<64 - 5) // past int64: msgpack uint64
	child := hex.EncodeToString([]byte(strings.Repeat("\xab", 32)))
	// Cached before the subscriber starts: only the startup replay has it.
	p.send(false, map[string]any{"type": "BlockStored", "block_hashes": []any{rootHash, 7}, "parent_block_hash": nil,
		"token_ids": toks[:32], "block_size": 16, "lora_id": nil, "medium": "GPU", "lora_name": nil})

	rec := follow(t, p.config())
	warmUpPy(t, p, rec)
	// Lost on the PUB socket, kept for replay: the next batch reveals the
	// gap and the ROUTER socket fills it.
	p.send(true, map[string]any{"type": "BlockStored", "block_hashes": []any{"b:" + child}, "parent_block_hash": 7,
		"token_ids": toks[32:], "block_size": 16, "lora_id": nil, "medium": "GPU", "lora_name": nil})
	last := p.send(false, map[string]any{"type": "BlockRemoved", "block_hashes": []any{rootHash}, "medium": "GPU"})
	rec.waitFor(t, "the gap replayed from libzmq's ROUTER socket", func() bool { return rec.sawSeq(last) })
	if !isSorted(rec.seqs) || rec.seqs[0] != 0 || len(rec.resyncs) != 0 || len(rec.malformed) != 0 {
		t.Fatalf("seqs %v resyncs %q malformed %v", rec.seqs, rec.resyncs, rec.malformed)
	}
	if !slices.Equal(rec.tr.Hashes(), slices.Sorted(slices.Values(want[1:]))) {
		t.Fatalf("resident %x, want %x", rec.tr.Hashes(), want[1:])
	}
}

func TestInteropEngineRestartsOnItsPorts(t *testing.T) {
	// The engine process exits and a new one binds the same ports: the
	// subscriber reconnects, sees the sequence start again, resyncs and
	// follows the new engine.
	base := freePortPair(t, 0, 1)
	p := startPyPublisher(t, base, base+1)
	rec := follow(t, p.config())
	warmUpPy(t, p, rec)
	stored := func(seed uint32, h uint64) map[string]any {
		return map[string]any{"type": "BlockStored", "block_hashes": []any{h}, "parent_block_hash": nil,
			"token_ids": prompt(seed, 16), "block_size": 16, "lora_id": nil, "medium": "GPU", "lora_name": nil}
	}
	for range 3 {
		p.send(false, stored(50, 1))
	}
	rec.waitFor(t, "the first engine's block", func() bool { return rec.tr.Resident() == 1 && len(rec.seqs) >= 4 })
	rec.release()
	p.stop()

	p2 := startPyPublisher(t, base, base+1)
	p2.send(false, stored(51, 2))
	want := tokens.BlockHashes(prompt(51, 16))
	deadline := time.Now().Add(20 * time.Second)
	for {
		p2.send(false)
		rec.mu.Lock()
		ok := len(rec.resyncs) == 1 && slices.Equal(rec.tr.Hashes(), want)
		rec.mu.Unlock()
		if ok {
			break
		}
		if time.Now().After(deadline) {
			rec.mu.Lock()
			defer rec.mu.Unlock()
			t.Fatalf("never followed the restarted engine: seqs %v resyncs %q resident %d", rec.seqs, rec.resyncs, rec.tr.Resident())
		}
		time.Sleep(50 * time.Millisecond)
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if !strings.Contains(rec.resyncs[0], "restarted") || len(rec.malformed) != 0 {
		t.Fatalf("resyncs %q malformed %v", rec.resyncs, rec.malformed)
	}
}
