package vllmkv

import (
	"context"
	"crypto/sha256"
	"fmt"
	"io"
	"net"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-zeromq/zmq4"
	"github.com/vmihailenco/msgpack/v5"

	"github.com/switchyard-ai/switchyard/internal/adapter/backend/vllmkv/vllmkvtest"
	"github.com/switchyard-ai/switchyard/internal/adapter/freeport"
	"github.com/switchyard-ai/switchyard/internal/core/tokens"
	"github.com/switchyard-ai/switchyard/schemas"
)

// prompt is n token ids as a real tokenizer gives them (Llama 3's BOS
// first), deterministic per seed.
func prompt(seed uint32, n int) []uint32 {
	out := make([]uint32, n)
	out[0] = 128000
	x := seed*2654435761 + 1
	for i := 1; i < n; i++ {
		x ^= x << 13
		x ^= x >> 17
		x ^= x << 5
		out[i] = x % 128256
	}
	return out
}

// bytesHash is a SHA-256 block hash as newer vLLM releases send it.
func bytesHash(i int) []byte {
	h := sha256.Sum256([]byte(fmt.Sprint("block", i)))
	return h[:]
}

func TestDecodeBatchShapes(t *testing.T) {
	toks := prompt(1, 32)
	for _, tc := range []struct {
		name  string
		sh    vllmkvtest.Shape
		rank  int
		hash0 any
		want  int // DPRank decoded
	}{
		{"current vLLM: maps, int hashes", vllmkvtest.ShapeMap, 0, uint64(1<<63 + 12345), 0},
		{"current vLLM: maps, bytes hashes, rank 3", vllmkvtest.ShapeMap, 3, bytesHash(0), 3},
		{"array_like releases", vllmkvtest.ShapeArray, 1, uint64(7), 1},
		{"first releases: no medium, no rank", vllmkvtest.ShapeArrayNoMedium, 0, uint64(7), -1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ev := vllmkvtest.Stored(nil, 16, toks, tc.hash0, uint64(99))
			rm := vllmkvtest.Removed(tc.hash0)
			payload := vllmkvtest.EncodeBatch(t, tc.sh, 1764580000.25, tc.rank, ev, rm, vllmkvtest.Cleared())
			b, err := DecodeBatch(payload)
			if err != nil {
				t.Fatal(err)
			}
			if b.TS != 1764580000.25 || b.DPRank != tc.want || len(b.Events) != 3 {
				t.Fatalf("batch = ts %v rank %d, %d events", b.TS, b.DPRank, len(b.Events))
			}
			s := b.Events[0]
			h0, _ := toHash(normalise(tc.hash0))
			if s.Type != TypeBlockStored || len(s.BlockHashes) != 2 || s.BlockHashes[0] != h0 || s.HasParent ||
				s.BlockSize != 16 || !slices.Equal(s.TokenIDs, toks) || s.Keyed {
				t.Fatalf("stored = %+v", s)
			}
			if tc.sh != vllmkvtest.ShapeArrayNoMedium && s.Medium != MediumGPU {
				t.Fatalf("medium = %q", s.Medium)
			}
			if r := b.Events[1]; r.Type != TypeBlockRemoved || len(r.BlockHashes) != 1 || r.BlockHashes[0] != h0 {
				t.Fatalf("removed = %+v", r)
			}
			if b.Events[2].Type != TypeAllBlocksCleared {
				t.Fatalf("cleared = %+v", b.Events[2])
			}
		})
	}
}

// normalise is what the loose decoder makes of a value.
func normalise(v any) any {
	if b, ok := v.([]byte); ok {
		return string(b)
	}
	return v
}

func TestDecodeBatchOptionalFields(t *testing.T) {
	ev := vllmkvtest.Stored(uint64(5), 16, prompt(2, 16), uint64(6))
	ev.LoRAName = "sql-adapter"
	ev.GroupIdx = 2
	b, err := DecodeBatch(vllmkvtest.EncodeBatch(t, vllmkvtest.ShapeMap, 1, 0, ev))
	if err != nil {
		t.Fatal(err)
	}
	s := b.Events[0]
	if !s.HasParent || s.Parent != intHash(5) || !s.Keyed || s.Group != 2 {
		t.Fatalf("stored = %+v", s)
	}
	ev = vllmkvtest.Stored(nil, 16, prompt(2, 32), uint64(6), uint64(7))
	ev.ExtraKeys = []any{nil, "salt"}
	if b, err = DecodeBatch(vllmkvtest.EncodeBatch(t, vllmkvtest.ShapeArray, 1, 0, ev)); err != nil || !b.Events[0].Keyed {
		t.Fatalf("extra keys: %+v %v", b.Events, err)
	}
	ev.ExtraKeys = []any{nil, nil}
	if b, err = DecodeBatch(vllmkvtest.EncodeBatch(t, vllmkvtest.ShapeArray, 1, 0, ev)); err != nil || b.Events[0].Keyed {
		t.Fatalf("no extra keys: %+v %v", b.Events, err)
	}
}

func TestDecodeBatchMalformed(t *testing.T) {
	enc := func(v any) []byte {
		b, err := msgpack.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	good := vllmkvtest.Stored(nil, 16, prompt(3, 16), uint64(1))
	short := good
	short.Tokens = short.Tokens[:15]
	for _, tc := range []struct {
		name    string
		payload []byte
		want    string
	}{
		{"empty", nil, "empty payload"},
		{"not msgpack", []byte{0xc1}, "not msgpack"},
		{"trailing bytes", append(enc([]any{1.0, []any{}}), 0x01), "1 bytes after the EventBatch"},
		{"a string", enc("hello"), "EventBatch is string"},
		{"ts not a number", enc(map[string]any{"ts": "now", "events": []any{}}), "EventBatch.ts is string"},
		{"events not an array", enc([]any{1.0, "x"}), "EventBatch.events is string"},
		{"unknown event", enc([]any{1.0, []any{[]any{"BlockMoved", []any{1}}}}), `unknown event type "BlockMoved"`},
		{"untagged map event", enc([]any{1.0, []any{map[string]any{"block_hashes": []any{1}}}}), `no string "type" tag`},
		{"tokens short of the blocks", vllmkvtest.EncodeBatch(t, vllmkvtest.ShapeMap, 1, 0, short), "15 token ids for 1 blocks of 16"},
		{"negative token", enc([]any{1.0, []any{[]any{"BlockStored", []any{1}, nil, []any{-1}, 1, nil, nil}}}), "token_ids[0] is -1"},
		{"float hash", enc([]any{1.0, []any{[]any{"BlockRemoved", []any{1.5}, nil}}}), "hash is float64"},
		{"zero block size", enc([]any{1.0, []any{[]any{"BlockStored", []any{}, nil, []any{}, 0, nil, nil}}}), "block_size is 0"},
		{"bad rank", enc([]any{1.0, []any{}, "zero"}), "data_parallel_rank is zero"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := DecodeBatch(tc.payload)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want it to say %q", err, tc.want)
			}
		})
	}
}

// changes flattens a translator's output for comparison.
func kinds(cs []Change) []string {
	var out []string
	for _, c := range cs {
		out = append(out, fmt.Sprintf("%s:%d", c.Kind, len(c.Hashes)))
	}
	return out
}

func TestTranslatorMatchesPromptHashes(t *testing.T) {
	toks := prompt(4, 64) // four blocks of 16
	want := tokens.BlockHashes(toks)
	tr := NewTranslator()
	// vLLM stores a prompt's blocks as they fill: the first two in one
	// event from the root, the next two chained to the second.
	b1, err := DecodeBatch(vllmkvtest.EncodeBatch(t, vllmkvtest.ShapeMap, 1, 0, vllmkvtest.Stored(nil, 16, toks[:32], uint64(101), uint64(102))))
	if err != nil {
		t.Fatal(err)
	}
	b2, err := DecodeBatch(vllmkvtest.EncodeBatch(t, vllmkvtest.ShapeMap, 2, 0, vllmkvtest.Stored(uint64(102), 16, toks[32:], uint64(103), uint64(104))))
	if err != nil {
		t.Fatal(err)
	}
	c1, c2 := tr.Apply(b1), tr.Apply(b2)
	got := append(slices.Clone(c1[0].Hashes), c2[0].Hashes...)
	if !slices.Equal(got, want) {
		t.Fatalf("stored hashes %x, the admitter's for the prompt %x", got, want)
	}
	// Removing the tail block evicts exactly its hash.
	b3, _ := DecodeBatch(vllmkvtest.EncodeBatch(t, vllmkvtest.ShapeMap, 3, 0, vllmkvtest.Removed(uint64(104), uint64(999))))
	c3 := tr.Apply(b3)
	if len(c3) != 1 || c3[0].Kind != schemas.KVEvicted || !slices.Equal(c3[0].Hashes, want[3:]) {
		t.Fatalf("removed -> %+v", c3)
	}
	if st := tr.Stats(); st.Stored != 4 || st.Removed != 1 || st.UnknownRemoved != 1 || tr.Resident() != 3 {
		t.Fatalf("stats %+v, resident %d", st, tr.Resident())
	}
	if !slices.Equal(tr.Hashes(), slices.Sorted(slices.Values(want[:3]))) {
		t.Fatalf("snapshot %x", tr.Hashes())
	}
	b4, _ := DecodeBatch(vllmkvtest.EncodeBatch(t, vllmkvtest.ShapeMap, 4, 0, vllmkvtest.Cleared(), vllmkvtest.Stored(nil, 16, toks[:16], uint64(101))))
	if got := kinds(tr.Apply(b4)); !slices.Equal(got, []string{"cleared:0", "stored:1"}) {
		t.Fatalf("cleared then stored -> %v", got)
	}
}

func TestTranslatorRules(t *testing.T) {
	toks := prompt(5, 64)
	want := tokens.BlockHashes(toks)
	apply := func(tr *Translator, evs ...vllmkvtest.Event) []Change {
		t.Helper()
		b, err := DecodeBatch(vllmkvtest.EncodeBatch(t, vllmkvtest.ShapeMap, 1, 0, evs...))
		if err != nil {
			t.Fatal(err)
		}
		return tr.Apply(b)
	}
	t.Run("engine block of 32 tokens is two of ours", func(t *testing.T) {
		tr := NewTranslator()
		cs := apply(tr, vllmkvtest.Stored(nil, 32, toks, bytesHash(1), bytesHash(2)))
		if len(cs) != 1 || !slices.Equal(cs[0].Hashes, want) {
			t.Fatalf("-> %+v, want %x", cs, want)
		}
		cs = apply(tr, vllmkvtest.Removed(bytesHash(2)))
		if len(cs) != 1 || !slices.Equal(cs[0].Hashes, want[2:]) {
			t.Fatalf("removed -> %+v", cs)
		}
	})
	t.Run("unknown parent is not chained", func(t *testing.T) {
		tr := NewTranslator()
		if cs := apply(tr, vllmkvtest.Stored(uint64(77), 16, toks[16:32], uint64(2))); len(cs) != 0 {
			t.Fatalf("-> %+v", cs)
		}
		// Nor are its children, whose engine hashes chain from it.
		if cs := apply(tr, vllmkvtest.Stored(uint64(2), 16, toks[32:48], uint64(3))); len(cs) != 0 {
			t.Fatalf("child -> %+v", cs)
		}
		if st := tr.Stats(); st.Unchained != 1 {
			t.Fatalf("stats %+v", st)
		}
		if cs := apply(tr, vllmkvtest.Removed(uint64(3), uint64(2))); len(cs) != 0 || tr.Stats().UnknownRemoved != 0 {
			t.Fatalf("removing unmapped blocks -> %+v %+v", cs, tr.Stats())
		}
	})
	t.Run("LoRA and extra keys are not plain prefixes", func(t *testing.T) {
		tr := NewTranslator()
		ev := vllmkvtest.Stored(nil, 16, toks[:16], uint64(1))
		ev.LoRAName = "adapter"
		ev2 := vllmkvtest.Stored(nil, 16, toks[:16], uint64(2))
		ev2.ExtraKeys = []any{"mm-hash"}
		if cs := apply(tr, ev, ev2); len(cs) != 0 || tr.Stats().Keyed != 2 {
			t.Fatalf("-> %+v %+v", cs, tr.Stats())
		}
	})
	t.Run("CPU tier is not GPU residency", func(t *testing.T) {
		tr := NewTranslator()
		ev := vllmkvtest.Stored(nil, 16, toks[:16], uint64(1))
		ev.Medium = "CPU"
		if cs := apply(tr, ev); len(cs) != 0 || tr.Stats().OtherMedium != 1 {
			t.Fatalf("-> %+v", cs)
		}
	})
	t.Run("a block in two groups is evicted with the last copy", func(t *testing.T) {
		tr := NewTranslator()
		g0, g1 := vllmkvtest.Stored(nil, 16, toks[:16], uint64(1)), vllmkvtest.Stored(nil, 16, toks[:16], uint64(1))
		g0.GroupIdx, g1.GroupIdx = 0, 1
		if got := kinds(apply(tr, g0, g1)); !slices.Equal(got, []string{"stored:1"}) {
			t.Fatalf("stored twice -> %v", got)
		}
		r0 := vllmkvtest.Removed(uint64(1))
		r0.GroupIdx = 0
		if cs := apply(tr, r0); len(cs) != 0 {
			t.Fatalf("first copy removed -> %+v", cs)
		}
		r0.GroupIdx = 1
		if got := kinds(apply(tr, r0)); !slices.Equal(got, []string{"evicted:1"}) {
			t.Fatalf("last copy removed -> %v", got)
		}
	})
	t.Run("block size not a multiple of ours", func(t *testing.T) {
		tr := NewTranslator()
		if cs := apply(tr, vllmkvtest.Stored(nil, 8, toks[:8], uint64(1))); len(cs) != 0 || tr.Stats().BadBlockSize != 1 {
			t.Fatalf("-> %+v %+v", cs, tr.Stats())
		}
	})
}

func TestOffsetEndpoint(t *testing.T) {
	for _, tc := range []struct {
		ep   string
		rank int
		want string
		err  string
	}{
		{"tcp://10.0.0.7:5557", 0, "tcp://10.0.0.7:5557", ""},
		{"tcp://10.0.0.7:5557", 3, "tcp://10.0.0.7:5560", ""},
		{"tcp://[::1]:5558", 1, "tcp://[::1]:5559", ""},
		{"inproc://cache", 2, "inproc://cache_dp2", ""},
		{"", 2, "", ""},
		{"ipc:///tmp/kv", 1, "", "need tcp or inproc"},
		{"tcp://host:65535", 1, "", "past 65535"},
		{"tcp://host:port", 1, "", "not a number"},
		{"tcp://host:5557", -1, "", "negative"},
	} {
		got, err := OffsetEndpoint(tc.ep, tc.rank)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("OffsetEndpoint(%q, %d) err = %v, want %q", tc.ep, tc.rank, err, tc.err)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("OffsetEndpoint(%q, %d) = %q, %v; want %q", tc.ep, tc.rank, got, err, tc.want)
		}
	}
	for _, bad := range []string{"tcp://*:5557", "tcp://:5557", "udp://host:1", "tcp://host"} {
		if _, err := New(Config{Endpoint: bad}); err == nil {
			t.Errorf("New(%q) accepted it", bad)
		}
	}
}

// recorder is a Handler that keeps what it was told, applying batches to a
// Translator as the worker does.
type recorder struct {
	mu        sync.Mutex
	seqs      []uint64
	resyncs   []string
	malformed []error
	tr        *Translator
	changes   []Change
	notify    chan struct{}
	held      bool // the test goroutine holds mu (waitFor)
}

func newRecorder() *recorder {
	return &recorder{tr: NewTranslator(), notify: make(chan struct{}, 1)}
}

func (r *recorder) poke() {
	select {
	case r.notify <- struct{}{}:
	default:
	}
}

func (r *recorder) Batch(seq uint64, b Batch) {
	r.mu.Lock()
	r.seqs = append(r.seqs, seq)
	r.changes = append(r.changes, r.tr.Apply(b)...)
	r.mu.Unlock()
	r.poke()
}

func (r *recorder) Resync(reason string) {
	r.mu.Lock()
	r.resyncs = append(r.resyncs, reason)
	r.changes = append(r.changes, r.tr.Reset())
	r.mu.Unlock()
	r.poke()
}

func (r *recorder) Malformed(err error) {
	r.mu.Lock()
	r.malformed = append(r.malformed, err)
	r.mu.Unlock()
	r.poke()
}

// waitFor polls cond (under the recorder's lock) until it holds, and
// returns with the lock held, so the test reads a state the subscriber is
// not changing; the next waitFor, warmUp or the test's end releases it.
func (r *recorder) waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	r.release()
	deadline := time.After(10 * time.Second)
	for {
		r.mu.Lock()
		if cond() {
			r.held = true
			return
		}
		r.mu.Unlock()
		select {
		case <-r.notify:
		case <-time.After(20 * time.Millisecond):
		case <-deadline:
			r.mu.Lock()
			defer r.mu.Unlock()
			t.Fatalf("timed out waiting for %s: seqs %v resyncs %q malformed %v", what, r.seqs, r.resyncs, r.malformed)
		}
	}
}

// release gives the lock back after waitFor; only the test goroutine calls
// it.
func (r *recorder) release() {
	if r.held {
		r.held = false
		r.mu.Unlock()
	}
}

func (r *recorder) sawSeq(s uint64) bool { return slices.Contains(r.seqs, s) }

// follow runs a Subscriber on cfg until the test ends.
func follow(t *testing.T, cfg Config) *recorder {
	t.Helper()
	s, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	rec := newRecorder()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx, rec) }()
	t.Cleanup(func() {
		rec.release()
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	return rec
}

// warmUp publishes empty batches until the subscriber has received one:
// a PUB socket drops what it sends before a subscriber is connected.
func warmUp(t *testing.T, p *vllmkvtest.Publisher, rec *recorder) { warmUpRank(t, p, rec, 0) }

func TestSubscriberFollowsStoredRemovedCleared(t *testing.T) {
	p := vllmkvtest.Start(t, "tcp://127.0.0.1:0", "tcp://127.0.0.1:0", 10_000)
	pub, replay := p.Endpoints()
	rec := follow(t, Config{Endpoint: pub, Replay: replay})
	warmUp(t, p, rec)

	toks := prompt(6, 48)
	want := tokens.BlockHashes(toks)
	p.Publish(vllmkvtest.EncodeBatch(t, vllmkvtest.ShapeMap, 2, 0, vllmkvtest.Stored(nil, 16, toks, uint64(1), uint64(2), uint64(3))), false)
	p.Publish(vllmkvtest.EncodeBatch(t, vllmkvtest.ShapeMap, 3, 0, vllmkvtest.Removed(uint64(3))), false)
	rec.waitFor(t, "stored and removed", func() bool { return rec.tr.Resident() == 2 && rec.tr.Stats().Removed == 1 })
	if !slices.Equal(rec.tr.Hashes(), slices.Sorted(slices.Values(want[:2]))) {
		t.Fatalf("resident %x, want %x", rec.tr.Hashes(), want[:2])
	}
	last := p.Publish(vllmkvtest.EncodeBatch(t, vllmkvtest.ShapeMap, 4, 0, vllmkvtest.Cleared()), false)
	rec.waitFor(t, "cleared", func() bool { return rec.sawSeq(last) })
	if rec.tr.Resident() != 0 || len(rec.resyncs) != 0 || len(rec.malformed) != 0 {
		t.Fatalf("resident %d, resyncs %q, malformed %v", rec.tr.Resident(), rec.resyncs, rec.malformed)
	}
	if !isSorted(rec.seqs) {
		t.Fatalf("batches out of order: %v", rec.seqs)
	}
}

func isSorted(s []uint64) bool {
	for i := 1; i < len(s); i++ {
		if s[i] != s[i-1]+1 {
			return false
		}
	}
	return true
}

func TestSubscriberJoinsLateThroughReplay(t *testing.T) {
	// The engine stored a prefix before this side started: the startup
	// replay brings it in, so the first prompt is already known.
	p := vllmkvtest.Start(t, "tcp://127.0.0.1:0", "tcp://127.0.0.1:0", 10_000)
	toks := prompt(7, 32)
	p.Publish(vllmkvtest.EncodeBatch(t, vllmkvtest.ShapeArray, 1, 0, vllmkvtest.Stored(nil, 16, toks, uint64(1), uint64(2))), false)
	pub, replay := p.Endpoints()
	rec := follow(t, Config{Endpoint: pub, Replay: replay})
	warmUp(t, p, rec)
	rec.waitFor(t, "replayed history", func() bool { return rec.sawSeq(0) })
	if !isSorted(rec.seqs) || rec.seqs[0] != 0 || len(rec.resyncs) != 0 {
		t.Fatalf("seqs %v resyncs %q", rec.seqs, rec.resyncs)
	}
	if !slices.Equal(rec.tr.Hashes(), slices.Sorted(slices.Values(tokens.BlockHashes(toks)))) {
		t.Fatalf("resident %x", rec.tr.Hashes())
	}
}

func TestSubscriberRecoversGapThroughReplay(t *testing.T) {
	p := vllmkvtest.Start(t, "tcp://127.0.0.1:0", "tcp://127.0.0.1:0", 10_000)
	pub, replay := p.Endpoints()
	rec := follow(t, Config{Endpoint: pub, Replay: replay})
	warmUp(t, p, rec)
	before := p.Replays()

	toks := prompt(8, 48)
	want := tokens.BlockHashes(toks)
	// Two batches lost on the PUB socket (still in the replay buffer): the
	// next one reveals the gap, and replay fills it in order.
	p.Publish(vllmkvtest.EncodeBatch(t, vllmkvtest.ShapeMap, 2, 0, vllmkvtest.Stored(nil, 16, toks[:16], uint64(1))), true)
	p.Publish(vllmkvtest.EncodeBatch(t, vllmkvtest.ShapeMap, 3, 0, vllmkvtest.Stored(uint64(1), 16, toks[16:], uint64(2), uint64(3))), true)
	last := p.Publish(vllmkvtest.EncodeBatch(t, vllmkvtest.ShapeMap, 4, 0, vllmkvtest.Removed(uint64(1))), false)
	rec.waitFor(t, "the gap replayed", func() bool { return rec.sawSeq(last) })
	if !isSorted(rec.seqs) || len(rec.resyncs) != 0 || len(rec.malformed) != 0 {
		t.Fatalf("seqs %v resyncs %q malformed %v", rec.seqs, rec.resyncs, rec.malformed)
	}
	if p.Replays() != before+1 {
		t.Fatalf("replays %d, want %d", p.Replays(), before+1)
	}
	if !slices.Equal(rec.tr.Hashes(), slices.Sorted(slices.Values(want[1:]))) {
		t.Fatalf("resident %x, want %x", rec.tr.Hashes(), want[1:])
	}
}

func TestSubscriberResyncsWhatReplayCannotRecover(t *testing.T) {
	t.Run("no replay socket", func(t *testing.T) {
		p := vllmkvtest.Start(t, "tcp://127.0.0.1:0", "", 10_000)
		pub, _ := p.Endpoints()
		rec := follow(t, Config{Endpoint: pub})
		warmUp(t, p, rec)
		p.Publish(vllmkvtest.EncodeBatch(t, vllmkvtest.ShapeMap, 2, 0, vllmkvtest.Stored(nil, 16, prompt(9, 16), uint64(1))), false)
		p.Publish(vllmkvtest.EncodeBatch(t, vllmkvtest.ShapeMap, 3, 0, vllmkvtest.Removed(uint64(1))), true)
		last := p.Publish(vllmkvtest.EncodeBatch(t, vllmkvtest.ShapeMap, 4, 0, vllmkvtest.Stored(nil, 16, prompt(10, 16), uint64(2))), false)
		rec.waitFor(t, "the batch after the gap", func() bool { return rec.sawSeq(last) })
		if len(rec.resyncs) != 1 || !strings.Contains(rec.resyncs[0], "no replay socket") {
			t.Fatalf("resyncs %q", rec.resyncs)
		}
		// The resync dropped the block whose removal was lost; what came
		// after it stands.
		if want := tokens.BlockHashes(prompt(10, 16)); !slices.Equal(rec.tr.Hashes(), want) {
			t.Fatalf("resident %x, want %x", rec.tr.Hashes(), want)
		}
	})
	t.Run("beyond the replay buffer", func(t *testing.T) {
		p := vllmkvtest.Start(t, "tcp://127.0.0.1:0", "tcp://127.0.0.1:0", 2)
		pub, replay := p.Endpoints()
		rec := follow(t, Config{Endpoint: pub, Replay: replay})
		warmUp(t, p, rec)
		for range 3 {
			p.Publish(vllmkvtest.EncodeBatch(t, vllmkvtest.ShapeMap, 2, 0), true)
		}
		last := p.Publish(vllmkvtest.EncodeBatch(t, vllmkvtest.ShapeMap, 3, 0), false)
		rec.waitFor(t, "the batch after the gap", func() bool { return rec.sawSeq(last) })
		if len(rec.resyncs) != 1 || !strings.Contains(rec.resyncs[0], "replay buffer") {
			t.Fatalf("resyncs %q", rec.resyncs)
		}
		if !slices.Contains(rec.seqs, last-1) {
			t.Fatalf("the replay's buffered batch was not applied: %v", rec.seqs)
		}
	})
	t.Run("engine restart", func(t *testing.T) {
		p := vllmkvtest.Start(t, "tcp://127.0.0.1:0", "tcp://127.0.0.1:0", 10_000)
		pub, replay := p.Endpoints()
		rec := follow(t, Config{Endpoint: pub, Replay: replay})
		warmUp(t, p, rec)
		p.Publish(vllmkvtest.EncodeBatch(t, vllmkvtest.ShapeMap, 2, 0), false)
		p.Publish(vllmkvtest.EncodeBatch(t, vllmkvtest.ShapeMap, 2, 0), false)
		rec.waitFor(t, "two batches", func() bool { return len(rec.seqs) >= 3 })
		p.Restart()
		p.Publish(vllmkvtest.EncodeBatch(t, vllmkvtest.ShapeMap, 3, 0, vllmkvtest.Stored(nil, 16, prompt(11, 16), uint64(1))), false)
		rec.waitFor(t, "the restart", func() bool { return len(rec.resyncs) == 1 && rec.tr.Resident() == 1 })
		if !strings.Contains(rec.resyncs[0], "restarted") {
			t.Fatalf("resyncs %q", rec.resyncs)
		}
	})
}

func TestSubscriberDataParallelRankPort(t *testing.T) {
	// Rank 2 of an engine configured with tcp://*:BASE and replay
	// tcp://*:BASE+10 publishes on BASE+2 and replays on BASE+12.
	base := freePortPair(t, 2, 12)
	p := vllmkvtest.Start(t, fmt.Sprintf("tcp://127.0.0.1:%d", base+2), fmt.Sprintf("tcp://127.0.0.1:%d", base+12), 10_000)
	toks := prompt(12, 16)
	p.Publish(vllmkvtest.EncodeBatch(t, vllmkvtest.ShapeMap, 1, 2, vllmkvtest.Stored(nil, 16, toks, uint64(1))), false)
	rec := follow(t, Config{Endpoint: fmt.Sprintf("tcp://127.0.0.1:%d", base), Replay: fmt.Sprintf("tcp://127.0.0.1:%d", base+10), DPRank: 2})
	warmUpRank(t, p, rec, 2)
	rec.waitFor(t, "rank 2's history", func() bool { return rec.tr.Resident() == 1 })
	if len(rec.malformed) != 0 {
		t.Fatalf("malformed %v", rec.malformed)
	}
	// A batch stamped with another rank means the ports are crossed.
	last := p.Publish(vllmkvtest.EncodeBatch(t, vllmkvtest.ShapeMap, 2, 0), false)
	rec.waitFor(t, "the foreign batch refused", func() bool { return len(rec.malformed) == 1 })
	if rec.sawSeq(last) {
		t.Fatal("a batch from another rank was applied")
	}
	if !strings.Contains(rec.malformed[0].Error(), "rank 0 on rank 2's port") {
		t.Fatalf("malformed %v", rec.malformed)
	}
}

func warmUpRank(t *testing.T, p *vllmkvtest.Publisher, rec *recorder, rank int) {
	t.Helper()
	rec.release()
	deadline := time.Now().Add(10 * time.Second)
	for {
		seq := p.Publish(vllmkvtest.EncodeBatch(t, vllmkvtest.ShapeMap, 1, rank), false)
		rec.mu.Lock()
		n := len(rec.seqs)
		rec.mu.Unlock()
		if n > 0 {
			rec.waitFor(t, "warm-up", func() bool { return rec.sawSeq(seq) })
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("subscriber never connected")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// freePortPair finds a base port such that base+a and base+b are free.
func freePortPair(t *testing.T, a, b int) int {
	t.Helper()
	for range 50 {
		p, err := freeport.Port()
		if err != nil {
			t.Fatal(err)
		}
		base := p - a
		if base <= 0 || base+b > 65535 {
			continue
		}
		l2, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", base+b))
		if err != nil {
			continue
		}
		l2.Close()
		return base
	}
	t.Fatal("no free port pair")
	return 0
}

func TestSubscriberMalformedFrames(t *testing.T) {
	p := vllmkvtest.Start(t, "tcp://127.0.0.1:0", "tcp://127.0.0.1:0", 10_000)
	pub, replay := p.Endpoints()
	rec := follow(t, Config{Endpoint: pub, Replay: replay})
	warmUp(t, p, rec)

	p.Send(zmq4.NewMsgFrom([]byte{}, []byte("no payload")))          // two frames
	p.Send(zmq4.NewMsgFrom([]byte{}, []byte{1, 2, 3}, []byte{0x90})) // a 3-byte sequence number
	bad := p.Publish([]byte("{\"ts\": 1, \"events\": []}"), false)   // JSON, not msgpack
	toks := prompt(13, 16)
	last := p.Publish(vllmkvtest.EncodeBatch(t, vllmkvtest.ShapeMap, 2, 0, vllmkvtest.Stored(nil, 16, toks, uint64(1))), false)
	rec.waitFor(t, "the good batch after the bad ones", func() bool { return rec.sawSeq(last) })
	if len(rec.malformed) != 3 {
		t.Fatalf("malformed %v", rec.malformed)
	}
	for i, want := range []string{"has 2 frames, want 3", "has 3 bytes, want 8", fmt.Sprintf("batch %d: vllmkv: 22 bytes after the EventBatch", bad)} {
		if !strings.Contains(rec.malformed[i].Error(), want) {
			t.Errorf("malformed[%d] = %v, want %q", i, rec.malformed[i], want)
		}
	}
	// The unreadable batch may have removed blocks: everything before it is
	// dropped, and what follows is applied.
	if len(rec.resyncs) != 1 || rec.tr.Resident() != 1 {
		t.Fatalf("resyncs %q resident %d", rec.resyncs, rec.tr.Resident())
	}
}

// tcpFront listens on addr and forwards each connection to target, so a
// test can end a publisher the way an exiting engine process does: the
// listener and every connection gone at once. (The Go ZeroMQ library's
// own Close closes connections before its listener, and a subscriber that
// redials in between is left on a dead socket; libzmq publishers, like
// vLLM's, end with their process.)
type tcpFront struct {
	l      net.Listener
	target string
	mu     sync.Mutex
	conns  []net.Conn
	done   bool
}

func startFront(t *testing.T, addr, target string) *tcpFront {
	t.Helper()
	l, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	f := &tcpFront{l: l, target: target}
	t.Cleanup(f.close)
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			up, err := net.Dial("tcp", target)
			if err != nil {
				c.Close()
				continue
			}
			f.mu.Lock()
			if f.done {
				f.mu.Unlock()
				c.Close()
				up.Close()
				return
			}
			f.conns = append(f.conns, c, up)
			f.mu.Unlock()
			go func() { io.Copy(up, c); up.Close() }()
			go func() { io.Copy(c, up); c.Close() }()
		}
	}()
	return f
}

func (f *tcpFront) close() {
	f.l.Close()
	f.mu.Lock()
	defer f.mu.Unlock()
	f.done = true
	for _, c := range f.conns {
		c.Close()
	}
	f.conns = nil
}

func hostPort(ep string) string { return strings.TrimPrefix(ep, "tcp://") }

func TestSubscriberFollowsAnEngineThatRestartsOnItsPort(t *testing.T) {
	// The engine process exits and a new one binds the same ports: the
	// subscriber reconnects and, whatever the new engine's numbers, resyncs
	// and follows it — with a replay socket because the new engine's buffer
	// does not hold the last batch applied, without one because a
	// reconnection leaves the engine's state unknown.
	for _, tc := range []struct {
		name   string
		replay bool
		want   string
	}{
		{"with replay", true, "restarted"},
		{"without replay", false, "without a replay socket"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			base := freePortPair(t, 0, 1)
			pubAddr, replayAddr := fmt.Sprintf("127.0.0.1:%d", base), fmt.Sprintf("127.0.0.1:%d", base+1)
			engine := func() (*vllmkvtest.Publisher, func()) {
				p := vllmkvtest.Start(t, "tcp://127.0.0.1:0", "tcp://127.0.0.1:0", 10_000)
				pub, replay := p.Endpoints()
				fp, fr := startFront(t, pubAddr, hostPort(pub)), startFront(t, replayAddr, hostPort(replay))
				return p, func() { fp.close(); fr.close(); p.Close() }
			}
			cfg := Config{Endpoint: "tcp://" + pubAddr}
			if tc.replay {
				cfg.Replay = "tcp://" + replayAddr
			}
			p, exit := engine()
			rec := follow(t, cfg)
			warmUp(t, p, rec)
			for range 3 {
				p.Publish(vllmkvtest.EncodeBatch(t, vllmkvtest.ShapeMap, 2, 0, vllmkvtest.Stored(nil, 16, prompt(40, 16), uint64(1))), false)
			}
			rec.waitFor(t, "the first engine's blocks", func() bool { return rec.tr.Resident() == 1 && len(rec.seqs) >= 4 })
			rec.release()
			exit()

			p2, _ := engine()
			toks := prompt(41, 16)
			deadline := time.Now().Add(20 * time.Second)
			for {
				p2.Publish(vllmkvtest.EncodeBatch(t, vllmkvtest.ShapeMap, 3, 0, vllmkvtest.Stored(nil, 16, toks, uint64(2))), false)
				rec.mu.Lock()
				ok := len(rec.resyncs) == 1 && slices.Equal(rec.tr.Hashes(), tokens.BlockHashes(toks))
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
			if !strings.Contains(rec.resyncs[0], tc.want) || len(rec.malformed) != 0 {
				t.Fatalf("resyncs %q malformed %v", rec.resyncs, rec.malformed)
			}
		})
	}
}
