// Package vllmkvtest is a Go stand-in for vLLM's ZmqEventPublisher
// (vllm/distributed/kv_events.py), field by field, for tests: PUB frames
// (topic, seq as 8 bytes big-endian, msgpack payload), an in-memory replay
// buffer of the last bufferSteps batches served on a ROUTER socket, and the
// msgpack shapes msgspec produces for EventBatch and its tagged event
// structs, in the releases' two encodings. It is test support: it reports
// failures through testing.TB.
package vllmkvtest

import (
	"bytes"
	"context"
	"encoding/binary"
	"io"
	"log"
	"sync"
	"testing"

	"github.com/go-zeromq/zmq4"
	"github.com/vmihailenco/msgpack/v5"
)

// Shape is which msgspec encoding a vLLM release uses.
type Shape int

const (
	// ShapeMap: current vLLM (main): structs without array_like, so maps
	// in field order, events tagged by a leading "type" key, fields equal
	// to their default (None) omitted where they have a default.
	ShapeMap Shape = iota
	// ShapeArray: releases with array_like=True on EventBatch and
	// KVCacheEvent: arrays, the tag first, trailing defaults omitted.
	ShapeArray
	// ShapeArrayNoMedium: the first releases, whose BlockStored ended at
	// lora_id and BlockRemoved at block_hashes, and whose batch had no rank.
	ShapeArrayNoMedium
)

// Event is one KVCacheEvent with Python's values: nil is None; hashes
// are uint64 (int) or []byte (bytes).
type Event struct {
	Type      string
	Hashes    []any
	Parent    any
	Tokens    []uint32
	BlockSize int
	LoRAID    any
	Medium    any
	LoRAName  any
	ExtraKeys []any // nil: None (omitted as a default)
	GroupIdx  any   // nil: None (omitted as a default)
}

// Stored is a BlockStored in GPU memory.
func Stored(parent any, blockSize int, toks []uint32, hashes ...any) Event {
	return Event{Type: TypeBlockStored, Hashes: hashes, Parent: parent, Tokens: toks, BlockSize: blockSize, Medium: MediumGPU}
}

// Removed is a BlockRemoved from GPU memory.
func Removed(hashes ...any) Event {
	return Event{Type: TypeBlockRemoved, Hashes: hashes, Medium: MediumGPU}
}

// Cleared is AllBlocksCleared.
func Cleared() Event { return Event{Type: TypeAllBlocksCleared} }

// EncodeBatch is msgspec.msgpack.Encoder().encode(KVEventBatch(...)).
func EncodeBatch(t testing.TB, sh Shape, ts float64, rank int, events ...Event) []byte {
	t.Helper()
	var buf bytes.Buffer
	e := msgpack.NewEncoder(&buf)
	must := func(err error) {
		if err != nil {
			t.Fatal(err)
		}
	}
	val := func(v any) {
		switch x := v.(type) {
		case nil:
			must(e.EncodeNil())
		case uint64:
			must(e.EncodeUint(x))
		case int:
			must(e.EncodeInt(int64(x)))
		case string:
			must(e.EncodeString(x))
		case []byte:
			must(e.EncodeBytes(x))
		default:
			t.Fatalf("EncodeBatch: no encoding for %T", v)
		}
	}
	list := func(xs []any) {
		must(e.EncodeArrayLen(len(xs)))
		for _, x := range xs {
			val(x)
		}
	}
	toks := func(ts []uint32) {
		must(e.EncodeArrayLen(len(ts)))
		for _, x := range ts {
			must(e.EncodeUint(uint64(x)))
		}
	}
	extra := func(xs []any) {
		must(e.EncodeArrayLen(len(xs)))
		for _, x := range xs {
			if x == nil {
				must(e.EncodeNil())
				continue
			}
			must(e.EncodeArrayLen(1)) // a one-element tuple, e.g. (lora_name,)
			val(x)
		}
	}
	key := func(k string) {
		if sh == ShapeMap {
			must(e.EncodeString(k))
		}
	}
	event := func(ev Event) {
		// The fields present, in declaration order.
		type field struct {
			name string
			put  func()
		}
		var fs []field
		switch ev.Type {
		case TypeBlockStored:
			fs = []field{
				{"block_hashes", func() { list(ev.Hashes) }},
				{"parent_block_hash", func() { val(ev.Parent) }},
				{"token_ids", func() { toks(ev.Tokens) }},
				{"block_size", func() { val(ev.BlockSize) }},
				{"lora_id", func() { val(ev.LoRAID) }},
			}
			if sh != ShapeArrayNoMedium {
				fs = append(fs, field{"medium", func() { val(ev.Medium) }}, field{"lora_name", func() { val(ev.LoRAName) }})
				// extra_keys and group_idx default to None: omitted then
				// (for arrays only when nothing after them is set).
				if ev.ExtraKeys != nil || ev.GroupIdx != nil {
					fs = append(fs, field{"extra_keys", func() {
						if ev.ExtraKeys == nil {
							must(e.EncodeNil())
						} else {
							extra(ev.ExtraKeys)
						}
					}})
				}
				if ev.GroupIdx != nil {
					fs = append(fs, field{"group_idx", func() { val(ev.GroupIdx) }})
				}
			}
		case TypeBlockRemoved:
			fs = []field{{"block_hashes", func() { list(ev.Hashes) }}}
			if sh != ShapeArrayNoMedium {
				fs = append(fs, field{"medium", func() { val(ev.Medium) }})
				if ev.GroupIdx != nil {
					fs = append(fs, field{"group_idx", func() { val(ev.GroupIdx) }})
				}
			}
		}
		if sh == ShapeMap {
			must(e.EncodeMapLen(len(fs) + 1))
			must(e.EncodeString("type"))
		} else {
			must(e.EncodeArrayLen(len(fs) + 1))
		}
		must(e.EncodeString(ev.Type))
		for _, f := range fs {
			key(f.name)
			f.put()
		}
	}
	n := 3
	if sh == ShapeArrayNoMedium {
		n = 2
	}
	if sh == ShapeMap {
		must(e.EncodeMapLen(n))
	} else {
		must(e.EncodeArrayLen(n))
	}
	key("ts")
	must(e.EncodeFloat64(ts))
	key("events")
	must(e.EncodeArrayLen(len(events)))
	for _, ev := range events {
		event(ev)
	}
	if n == 3 {
		key("data_parallel_rank")
		val(rank)
	}
	return buf.Bytes()
}

// Publisher is ZmqEventPublisher: a PUB socket, a ROUTER replay socket
// and a replay buffer of the last bufferSteps batches.
type Publisher struct {
	t           testing.TB
	pub, router zmq4.Socket
	topic       []byte

	mu          sync.Mutex
	seq         uint64
	buffer      []buffered
	bufferSteps int
	replays     int
	close       func()
}

type buffered struct {
	seq     uint64
	payload []byte
}

// Event type tags and the GPU medium, as vLLM spells them.
const (
	TypeBlockStored      = "BlockStored"
	TypeBlockRemoved     = "BlockRemoved"
	TypeAllBlocksCleared = "AllBlocksCleared"
	MediumGPU            = "GPU"
)

var quietLog = zmq4.WithLogger(log.New(io.Discard, "", 0))

// Start binds pubEP and, unless replayEP is empty, replayEP (use
// port 0 for any free port; Endpoints tells which were bound).
func Start(t testing.TB, pubEP, replayEP string, bufferSteps int) *Publisher {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	p := &Publisher{t: t, pub: zmq4.NewPub(ctx, quietLog), bufferSteps: bufferSteps}
	if err := p.pub.Listen(pubEP); err != nil {
		t.Fatalf("publisher listen %s: %v", pubEP, err)
	}
	var wg sync.WaitGroup
	if replayEP != "" {
		p.router = zmq4.NewRouter(ctx, quietLog)
		if err := p.router.Listen(replayEP); err != nil {
			t.Fatalf("replay listen %s: %v", replayEP, err)
		}
		wg.Add(1)
		go func() { defer wg.Done(); p.serveReplay() }()
	}
	p.close = sync.OnceFunc(func() {
		cancel()
		p.pub.Close()
		if p.router != nil {
			p.router.Close()
		}
		wg.Wait()
	})
	t.Cleanup(p.close)
	return p
}

// Close stops the publisher as an engine that exits does: its sockets
// close and their connections drop.
func (p *Publisher) Close() { p.close() }

// Endpoints are the bound PUB and replay endpoints, to dial.
func (p *Publisher) Endpoints() (pub, replay string) {
	pub = "tcp://" + p.pub.Addr().String()
	if p.router != nil {
		replay = "tcp://" + p.router.Addr().String()
	}
	return pub, replay
}

// Publish sends one payload under the next sequence number and buffers
// it; with drop the PUB send is skipped, as when a subscriber's queue
// overflows (the batch stays in the replay buffer).
func (p *Publisher) Publish(payload []byte, drop bool) uint64 {
	p.mu.Lock()
	seq := p.seq
	p.seq++
	p.buffer = append(p.buffer, buffered{seq, payload})
	if len(p.buffer) > p.bufferSteps {
		p.buffer = p.buffer[len(p.buffer)-p.bufferSteps:]
	}
	p.mu.Unlock()
	if !drop {
		var sb [8]byte
		binary.BigEndian.PutUint64(sb[:], seq)
		p.Send(zmq4.NewMsgFrom(p.topic, sb[:], payload))
	}
	return seq
}

// Restart is the engine starting again: a new publisher's count() from 0
// and an empty buffer.
func (p *Publisher) Restart() {
	p.mu.Lock()
	p.seq, p.buffer = 0, nil
	p.mu.Unlock()
}

// Send sends m on the PUB socket as it is (malformed frames too).
func (p *Publisher) Send(m zmq4.Msg) {
	if err := p.pub.SendMulti(m); err != nil {
		p.t.Errorf("publisher send: %v", err)
	}
}

// serveReplay is _service_replay: [client_id, "", start_seq] in; every
// buffered batch from start_seq as [client_id, "", seq, payload], then
// [client_id, "", -1, ""].
func (p *Publisher) serveReplay() {
	for {
		m, err := p.router.Recv()
		if err != nil {
			return
		}
		if len(m.Frames) != 3 {
			continue // "Invalid replay request"
		}
		id, start := m.Frames[0], binary.BigEndian.Uint64(m.Frames[2])
		p.mu.Lock()
		p.replays++
		buf := append([]buffered(nil), p.buffer...)
		p.mu.Unlock()
		for _, b := range buf {
			if b.seq >= start {
				var sb [8]byte
				binary.BigEndian.PutUint64(sb[:], b.seq)
				if p.router.SendMulti(zmq4.NewMsgFrom(id, []byte{}, sb[:], b.payload)) != nil {
					return
				}
			}
		}
		end := []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff}
		if p.router.SendMulti(zmq4.NewMsgFrom(id, []byte{}, end, []byte{})) != nil {
			return
		}
	}
}

// Replays counts the replay requests served.
func (p *Publisher) Replays() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.replays
}
