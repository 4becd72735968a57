package vllmkv

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log"
	"log/slog"
	"strconv"
	"strings"
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
	// The library logs reconnects on its own logger; ours says what matters.
	quiet := zmq4.WithLogger(log.New(io.Discard, "", 0))
	sub := zmq4.NewSub(ctx, quiet, zmq4.WithDialerMaxRetries(-1), zmq4.WithAutomaticReconnect(true))
	defer sub.Close()
	if err := sub.SetOption(zmq4.OptionSubscribe, s.cfg.Topic); err != nil {
		return fmt.Errorf("vllmkv: subscribe: %w", err)
	}
	errc := make(chan error, 2)
	live := make(chan zmq4.Msg, 256)
	go pump(ctx, sub, s.endpoint, live, errc)

	var replayC chan zmq4.Msg
	var dealer zmq4.Socket
	if s.replay != "" {
		dealer = zmq4.NewDealer(ctx, quiet, zmq4.WithDialerMaxRetries(-1), zmq4.WithAutomaticReconnect(true),
			zmq4.WithTimeout(s.cfg.ReplayTimeout))
		defer dealer.Close()
		replayC = make(chan zmq4.Msg, 256)
		go pump(ctx, dealer, s.replay, replayC, errc)
	}
	f := &follower{h: h, log: s.cfg.Log, rank: s.cfg.DPRank, canReplay: dealer != nil}
	f.request = func(from uint64) error {
		var b [8]byte
		binary.BigEndian.PutUint64(b[:], from)
		// [empty delimiter, start seq]: the ROUTER sees the REQ-style
		// envelope [identity, "", start_seq] that vLLM expects.
		return dealer.SendMulti(zmq4.NewMsgFrom([]byte{}, b[:]))
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
		case err := <-errc:
			return err
		case m := <-live:
			fr, err := liveFrame(m)
			if err != nil {
				h.Malformed(err)
				continue
			}
			f.live(fr, s.cfg.ReplayTimeout)
		case m := <-replayC:
			fr, err := replayFrame(m)
			if err != nil {
				h.Malformed(err)
				continue
			}
			f.replayed(fr)
		case <-timeout:
			f.log.Warn("vLLM KV replay timed out", "after", s.cfg.ReplayTimeout)
			f.replayDone()
		}
	}
}

// pump dials ep (waiting for the engine) and forwards every message.
func pump(ctx context.Context, sck zmq4.Socket, ep string, out chan<- zmq4.Msg, errc chan<- error) {
	if err := sck.Dial(ep); err != nil {
		if ctx.Err() == nil {
			errc <- fmt.Errorf("vllmkv: dial %s: %w", ep, err)
		}
		return
	}
	for {
		m, err := sck.Recv()
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			// A dropped connection: the socket redials on its own.
			select {
			case <-ctx.Done():
				return
			case <-time.After(50 * time.Millisecond):
			}
			continue
		}
		select {
		case out <- m:
		case <-ctx.Done():
			return
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
type follower struct {
	h         Handler
	log       *slog.Logger
	rank      int
	canReplay bool
	request   func(from uint64) error

	have bool   // a batch was delivered since the start or the last restart
	last uint64 // its sequence number

	replaying      bool
	replayDeadline time.Time
	// pending holds live batches that arrived while a replay filled the
	// gap before them.
	pending []frame
}

func (f *follower) live(fr frame, timeout time.Duration) {
	if f.replaying {
		f.pending = append(f.pending, fr)
		return
	}
	f.next(fr, false, timeout)
}

// next places one live batch; afterReplay is true when a replay already
// tried to fill what lies before it.
func (f *follower) next(fr frame, afterReplay bool, timeout time.Duration) {
	switch {
	case !f.have:
		if fr.seq > 0 && f.canReplay && !afterReplay {
			f.startReplay(0, fr, timeout)
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
		f.h.Resync(fmt.Sprintf("the engine's sequence went back from %d to %d: it restarted", f.last, fr.seq))
		f.have = false
		f.next(fr, false, timeout)
	default:
		if f.canReplay && !afterReplay {
			f.startReplay(f.last+1, fr, timeout)
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

func (f *follower) startReplay(from uint64, trigger frame, timeout time.Duration) {
	f.pending = append(f.pending[:0], trigger)
	f.replaying = true
	f.replayDeadline = time.Now().Add(timeout)
	if err := f.request(from); err != nil {
		f.log.Warn("vLLM KV replay request failed", "from", from, "err", err)
		f.replayDone()
	}
}

func (f *follower) replayed(fr frame) {
	if !f.replaying {
		return // a late answer to a request given up on
	}
	switch {
	case fr.end:
		f.replayDone()
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

func (f *follower) replayDone() {
	f.replaying = false
	p := f.pending
	f.pending = nil
	for _, fr := range p {
		f.next(fr, true, 0)
	}
}

func (f *follower) deliver(fr frame) {
	f.have, f.last = true, fr.seq
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
