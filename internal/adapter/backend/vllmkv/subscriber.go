package vllmkv

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/go-zeromq/zmq4"
)

// Config says where an engine's KV events are published.
type Config struct {
	// Endpoint is the engine's PUB socket as this side dials it, e.g.
	// tcp://10.0.0.7:5557 (vLLM's --kv-events-config endpoint binds
	// tcp://*:5557 by default).
	Endpoint string
	// Replay is the engine's ROUTER replay socket (replay_endpoint), e.g.
	// tcp://10.0.0.7:5558; empty when the engine has none, in which case a
	// gap can only be answered with a resync.
	Replay string
	// DPRank is the engine's data-parallel rank: vLLM offsets both ports by
	// it (OffsetEndpoint), and batches it stamps with another rank are
	// refused.
	DPRank int
	// Topic is the topic prefix to subscribe to (vLLM's default topic is
	// empty: everything).
	Topic string
	// ReplayTimeout bounds one replay request (default 2 s).
	ReplayTimeout time.Duration
	Log           *slog.Logger
}

// Handler receives what a Subscriber follows. Its methods are called from
// the Subscriber's goroutine, one at a time.
type Handler interface {
	// Batch delivers the engine's batches in sequence order, each once.
	Batch(seq uint64, b Batch)
	// Resync says the engine's block set is no longer known — batches were
	// lost beyond what replay could return, the engine restarted, or a
	// batch could not be decoded — so everything learnt from this engine
	// must be dropped; what follows is applied to an empty set.
	Resync(reason string)
	// Malformed reports a frame that could not be read. The stream goes
	// on; a lost batch also shows as a gap.
	Malformed(err error)
}

// endSeq is the sequence number of the replay socket's end marker
// (Python's (-1).to_bytes(8, "big", signed=True)).
const endSeq = ^uint64(0)

// OffsetEndpoint is the endpoint of data-parallel rank rank, as vLLM's
// ZmqEventPublisher.offset_endpoint_port computes it: a tcp port plus the
// rank, an inproc name with "_dp<rank>" appended, rank 0 unchanged.
func OffsetEndpoint(endpoint string, rank int) (string, error) {
	if rank < 0 {
		return "", fmt.Errorf("vllmkv: negative data-parallel rank %d", rank)
	}
	if endpoint == "" || rank == 0 {
		return endpoint, nil
	}
	switch {
	case strings.Contains(endpoint, "inproc"):
		return fmt.Sprintf("%s_dp%d", endpoint, rank), nil
	case strings.Contains(endpoint, "tcp"):
		i := strings.LastIndexByte(endpoint, ':')
		if i < 0 {
			return endpoint, nil
		}
		port, err := strconv.Atoi(endpoint[i+1:])
		if err != nil {
			return "", fmt.Errorf("vllmkv: endpoint %q: port is not a number", endpoint)
		}
		if port+rank > 65535 {
			return "", fmt.Errorf("vllmkv: endpoint %q: port %d plus rank %d is past 65535", endpoint, port, rank)
		}
		return fmt.Sprintf("%s:%d", endpoint[:i], port+rank), nil
	}
	return "", fmt.Errorf("vllmkv: endpoint %q: data-parallel offsets need tcp or inproc (as in vLLM)", endpoint)
}

// checkDialable refuses what cannot be dialled from another process.
func checkDialable(what, ep string) error {
	switch {
	case strings.HasPrefix(ep, "tcp://"):
		if strings.Contains(ep, "*") {
			return fmt.Errorf("vllmkv: %s %q is the engine's bind address; give the engine's host, e.g. tcp://HOST:5557", what, ep)
		}
		host, port, ok := strings.Cut(strings.TrimPrefix(ep, "tcp://"), ":")
		if !ok || host == "" || port == "" {
			return fmt.Errorf("vllmkv: %s %q: want tcp://HOST:PORT", what, ep)
		}
		if _, err := strconv.ParseUint(port, 10, 16); err != nil {
			return fmt.Errorf("vllmkv: %s %q: bad port", what, ep)
		}
	case strings.HasPrefix(ep, "ipc://"):
	default:
		return fmt.Errorf("vllmkv: %s %q: want tcp://HOST:PORT or ipc://PATH", what, ep)
	}
	return nil
}

// Subscriber follows one engine's KV event stream.
type Subscriber struct {
	cfg              Config
	endpoint, replay string
}

// New checks cfg and applies the data-parallel port offset.
func New(cfg Config) (*Subscriber, error) {
	if cfg.Endpoint == "" {
		return nil, errors.New("vllmkv: no endpoint")
	}
	if cfg.ReplayTimeout <= 0 {
		cfg.ReplayTimeout = 2 * time.Second
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	s := &Subscriber{cfg: cfg}
	var err error
	if s.endpoint, err = OffsetEndpoint(cfg.Endpoint, cfg.DPRank); err != nil {
		return nil, err
	}
	if s.replay, err = OffsetEndpoint(cfg.Replay, cfg.DPRank); err != nil {
		return nil, err
	}
	if err := checkDialable("endpoint", s.endpoint); err != nil {
		return nil, err
	}
	if s.replay != "" {
		if err := checkDialable("replay endpoint", s.replay); err != nil {
			return nil, err
		}
	}
	return s, nil
}

// Endpoints are the PUB and replay endpoints dialled, after the rank's
// offset.
func (s *Subscriber) Endpoints() (pub, replay string) { return s.endpoint, s.replay }

// Run follows the stream until ctx ends. It waits for the engine to come
// up, reconnects when it goes, and recovers gaps through the replay socket
// (at start too: it asks for everything the engine still buffers, so the
// blocks stored before this side joined are known).
func (s *Subscriber) Run(ctx context.Context, h Handler) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	// The library logs on its own logger; ours says what matters.
	quiet := zmq4.WithLogger(log.New(io.Discard, "", 0))
	topic := s.cfg.Topic
	sub := &link{ep: s.endpoint, out: make(chan delivery, 256), log: s.cfg.Log, what: "event",
		open: func(ctx context.Context) (zmq4.Socket, error) {
			sck := zmq4.NewSub(ctx, quiet, zmq4.WithDialerMaxRetries(-1))
			if err := sck.SetOption(zmq4.OptionSubscribe, topic); err != nil {
				sck.Close()
				return nil, fmt.Errorf("vllmkv: subscribe: %w", err)
			}
			return sck, nil
		}}
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	wg.Add(1)
	go func() { defer wg.Done(); sub.run(ctx) }()

	var replay *link
	var replayC chan delivery
	if s.replay != "" {
		timeout := s.cfg.ReplayTimeout
		replay = &link{ep: s.replay, out: make(chan delivery, 256), log: s.cfg.Log, what: "replay",
			open: func(ctx context.Context) (zmq4.Socket, error) {
				return zmq4.NewDealer(ctx, quiet, zmq4.WithDialerMaxRetries(-1), zmq4.WithTimeout(timeout)), nil
			}}
		replayC = replay.out
		wg.Add(1)
		go func() { defer wg.Done(); replay.run(ctx) }()
	}
	f := &follower{h: h, log: s.cfg.Log, rank: s.cfg.DPRank, canReplay: replay != nil, replayTimeout: s.cfg.ReplayTimeout}
	f.request = func(from uint64) error {
		var b [8]byte
		binary.BigEndian.PutUint64(b[:], from)
		// [empty delimiter, start seq]: the ROUTER sees the REQ-style
		// envelope [identity, "", start_seq] that vLLM expects.
		return replay.send(zmq4.NewMsgFrom([]byte{}, b[:]), s.cfg.ReplayTimeout)
	}
	s.cfg.Log.Info("following vLLM KV events", "endpoint", s.endpoint, "replay", s.replay, "dp_rank", s.cfg.DPRank)
	for {
		var timeout <-chan time.Time
		if f.replaying {
			timeout = time.After(time.Until(f.replayDeadline))
		}
		select {
		case <-ctx.Done():
			return nil
		case d := <-sub.out:
			if d.fresh {
				f.reconnected()
			}
			fr, err := liveFrame(d.m)
			if err != nil {
				h.Malformed(err)
				continue
			}
			f.live(fr)
		case d := <-replayC:
			fr, err := replayFrame(d.m)
			if err != nil {
				h.Malformed(err)
				continue
			}
			f.replayed(fr)
		case <-timeout:
			f.replayTimedOut()
		}
	}
}

// link keeps one socket connected to an engine endpoint and forwards what
// it receives. When the connection drops (the engine exited) the socket is
// closed and a fresh one dials again, waiting for the engine to come back:
// the library's own reconnection was seen to leave a subscriber connected
// but deaf after a publisher restart.
type link struct {
	ep   string
	what string
	open func(ctx context.Context) (zmq4.Socket, error)
	out  chan delivery
	log  *slog.Logger

	mu  sync.Mutex
	cur zmq4.Socket // nil while connecting
}

// delivery is one received message; fresh marks the first on a new
// connection, after which the engine behind the endpoint may be another.
type delivery struct {
	m     zmq4.Msg
	fresh bool
}

// errNotConnected is a send while the link has no connection.
var errNotConnected = errors.New("vllmkv: not connected")

// send sends m, waiting up to wait for a connection (the replay socket
// redials beside the event socket after an engine restart).
func (l *link) send(m zmq4.Msg, wait time.Duration) error {
	deadline := time.Now().Add(wait)
	for {
		l.mu.Lock()
		sck := l.cur
		l.mu.Unlock()
		if sck != nil {
			return sck.SendMulti(m)
		}
		if time.Now().After(deadline) {
			return errNotConnected
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func (l *link) set(sck zmq4.Socket) {
	l.mu.Lock()
	l.cur = sck
	l.mu.Unlock()
}

func (l *link) run(ctx context.Context) {
	for first := true; ctx.Err() == nil; first = false {
		if !first {
			select {
			case <-ctx.Done():
				return
			case <-time.After(100 * time.Millisecond):
			}
		}
		sck, err := l.open(ctx)
		if err != nil {
			l.log.Error("vLLM KV "+l.what+" socket", "err", err)
			continue
		}
		// Dial waits (retrying) until the engine listens or ctx ends.
		if err := sck.Dial(l.ep); err != nil {
			sck.Close()
			if ctx.Err() == nil {
				l.log.Warn("vLLM KV "+l.what+" socket: dial", "endpoint", l.ep, "err", err)
			}
			continue
		}
		l.set(sck)
		if !first {
			l.log.Info("vLLM KV "+l.what+" socket reconnected", "endpoint", l.ep)
		}
		for fresh := true; ; fresh = false {
			m, err := sck.Recv()
			if err != nil {
				break
			}
			select {
			case l.out <- delivery{m, fresh}:
			case <-ctx.Done():
			}
			if ctx.Err() != nil {
				break
			}
		}
		l.set(nil)
		sck.Close()
		if ctx.Err() == nil {
			l.log.Info("vLLM KV "+l.what+" connection lost; redialling", "endpoint", l.ep)
		}
	}
}

// frame is one sequenced batch, or the replay's end marker.
type frame struct {
	seq     uint64
	payload []byte
	end     bool
}

func liveFrame(m zmq4.Msg) (frame, error) {
	if len(m.Frames) != 3 {
		return frame{}, fmt.Errorf("vllmkv: event message has %d frames, want 3 (topic, seq, payload)", len(m.Frames))
	}
	if len(m.Frames[1]) != 8 {
		return frame{}, fmt.Errorf("vllmkv: event sequence frame has %d bytes, want 8", len(m.Frames[1]))
	}
	return frame{seq: binary.BigEndian.Uint64(m.Frames[1]), payload: m.Frames[2]}, nil
}

func replayFrame(m zmq4.Msg) (frame, error) {
	fs := m.Frames
	if len(fs) > 0 && len(fs[0]) == 0 {
		fs = fs[1:] // the empty delimiter of the ROUTER's envelope
	}
	if len(fs) != 2 {
		return frame{}, fmt.Errorf("vllmkv: replay message has %d frames, want 2 (seq, payload)", len(fs))
	}
	if len(fs[0]) != 8 {
		return frame{}, fmt.Errorf("vllmkv: replay sequence frame has %d bytes, want 8", len(fs[0]))
	}
	seq := binary.BigEndian.Uint64(fs[0])
	if seq == endSeq || len(fs[1]) == 0 {
		return frame{end: true}, nil
	}
	return frame{seq: seq, payload: fs[1]}, nil
}

// follower orders the live stream and the replay answers into one
// gap-free sequence of batches, or says when it cannot.
//
// A gap is filled by asking the replay socket from the last batch applied,
// not the one after it: the engine behind the endpoint may have restarted
// and counted past that number before this side reconnected, and only the
// same engine still holds the very batch that was applied last. So the
// first frame of the answer must be that batch, byte for byte; otherwise
// the stream is a new engine's (or its buffer no longer reaches back), and
// the follower resyncs and replays the new stream from its start.
type follower struct {
	h         Handler
	log       *slog.Logger
	rank      int
	canReplay bool
	request   func(from uint64) error

	have        bool   // a batch was delivered since the start or the last resync
	last        uint64 // its sequence number
	lastPayload []byte // and its bytes, to recognise the engine in a replay

	replaying      bool
	replayDeadline time.Time
	replayTimeout  time.Duration
	// suspect: the event socket reconnected since batch last, so the
	// engine may have restarted even if the numbers run on.
	suspect bool
	// verifying: the next replay frame must be batch last as applied;
	// mismatch: it was not, and the rest of that answer is ignored.
	verifying, mismatch bool
	// pending holds live batches that arrived while a replay filled the
	// gap before them.
	pending []frame
}

func (f *follower) live(fr frame) {
	if f.replaying {
		f.pending = append(f.pending, fr)
		return
	}
	f.next(fr, false)
}

// next places one live batch; afterReplay is true when a replay already
// tried to fill what lies before it.
func (f *follower) next(fr frame, afterReplay bool) {
	if f.suspect && f.have && !afterReplay {
		f.suspect = false
		f.pending = append(f.pending[:0], fr)
		f.startReplay(f.last, true)
		return
	}
	switch {
	case !f.have:
		if fr.seq > 0 && f.canReplay && !afterReplay {
			f.pending = append(f.pending[:0], fr)
			f.startReplay(0, false)
			return
		}
		if fr.seq > 0 {
			f.log.Info("vLLM KV events: joined mid-stream; blocks stored before it are unknown until stored again", "first_seq", fr.seq)
		}
		f.deliver(fr)
	case fr.seq == f.last+1:
		f.deliver(fr)
	case fr.seq <= f.last:
		if afterReplay {
			return // the replay already delivered it
		}
		f.h.Resync(fmt.Sprintf("the engine's sequence went back to %d after %d: it restarted", fr.seq, f.last))
		f.have = false
		f.next(fr, false)
	default:
		if f.canReplay && !afterReplay {
			f.pending = append(f.pending[:0], fr)
			f.startReplay(f.last, true)
			return
		}
		why := "the engine has no replay socket"
		if afterReplay {
			why = "the replay did not return them"
		}
		f.h.Resync(fmt.Sprintf("lost batches %d to %d: %s", f.last+1, fr.seq-1, why))
		f.deliver(fr)
	}
}

// reconnected notes a new event connection: what was followed may have
// ended. With a replay socket the next batch is checked against the
// engine's buffer; without one the engine's state is unknown.
func (f *follower) reconnected() {
	if !f.have {
		return
	}
	if f.canReplay {
		f.suspect = true
		return
	}
	f.h.Resync("reconnected to the engine without a replay socket: what happened while disconnected is unknown")
	f.have, f.lastPayload = false, nil
}

func (f *follower) startReplay(from uint64, verify bool) {
	f.replaying, f.verifying, f.mismatch = true, verify, false
	f.replayDeadline = time.Now().Add(f.replayTimeout)
	if err := f.request(from); err != nil {
		f.log.Warn("vLLM KV replay request failed", "from", from, "err", err)
		f.verifying = false
		f.replayDone()
	}
}

func (f *follower) replayed(fr frame) {
	if !f.replaying {
		return // a late answer to a request given up on
	}
	if fr.end {
		if f.verifying {
			f.mismatch = true // nothing from the last batch applied on
		}
		f.replayDone()
		return
	}
	if f.mismatch {
		return
	}
	if f.verifying {
		f.verifying = false
		if fr.seq != f.last || !bytes.Equal(fr.payload, f.lastPayload) {
			f.mismatch = true
		}
		return
	}
	switch {
	case !f.have:
		if fr.seq > 0 {
			f.log.Info("vLLM KV events: the engine's replay buffer starts after its first batch; older blocks are unknown until stored again", "first_seq", fr.seq)
		}
		f.deliver(fr)
	case fr.seq <= f.last:
	case fr.seq == f.last+1:
		f.deliver(fr)
	default:
		// The buffer no longer reaches back to the gap.
		f.h.Resync(fmt.Sprintf("lost batches %d to %d: beyond the engine's replay buffer", f.last+1, fr.seq-1))
		f.deliver(fr)
	}
}

// replayTimedOut gives up on the replay in progress.
func (f *follower) replayTimedOut() {
	f.log.Warn("vLLM KV replay timed out", "after", f.replayTimeout)
	f.verifying, f.mismatch = false, false
	f.replayDone()
}

func (f *follower) replayDone() {
	f.replaying = false
	if f.mismatch {
		f.mismatch = false
		f.h.Resync(fmt.Sprintf("the engine's replay buffer no longer holds batch %d as it was applied: the engine restarted, or its buffer overflowed", f.last))
		f.have, f.lastPayload = false, nil
		f.startReplay(0, false) // the new stream from its start; pending waits
		return
	}
	p := f.pending
	f.pending = nil
	for _, fr := range p {
		f.next(fr, true)
	}
}

func (f *follower) deliver(fr frame) {
	f.have, f.last = true, fr.seq
	f.lastPayload = append(f.lastPayload[:0], fr.payload...)
	b, err := DecodeBatch(fr.payload)
	if err == nil && b.DPRank >= 0 && b.DPRank != f.rank {
		err = fmt.Errorf("vllmkv: batch from data-parallel rank %d on rank %d's port: check the rank given", b.DPRank, f.rank)
	}
	if err != nil {
		f.h.Malformed(fmt.Errorf("batch %d: %w", fr.seq, err))
		f.h.Resync(fmt.Sprintf("batch %d could not be read", fr.seq))
		return
	}
	f.h.Batch(fr.seq, b)
}
