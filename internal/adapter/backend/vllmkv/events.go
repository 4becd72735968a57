// Package vllmkv owns Switchyard's side of vLLM's KV-cache event stream:
// decoding the msgpack batches that vLLM's ZmqEventPublisher
// (vllm/distributed/kv_events.py) sends, following the stream over ZMQ with
// gap detection and recovery through the publisher's replay socket
// (Subscriber), and turning the engine's blocks into Switchyard's own chained
// block hashes (Translator), so that the router's prefix index follows a real
// vLLM engine with the hashes the admitter computes for prompts.
//
// The wire format, as vLLM publishes it:
//
//   - the PUB socket sends three frames: topic (vLLM's default is empty), an
//     8-byte big-endian sequence number counting from 0 per publisher, and
//     the msgpack payload of one EventBatch;
//   - an EventBatch is {ts, events, data_parallel_rank}; each event is a
//     msgspec tagged struct (tag field "type", tag value the class name):
//     BlockStored {block_hashes, parent_block_hash, token_ids, block_size,
//     lora_id, medium, lora_name, extra_keys, group_idx, kv_cache_spec_kind,
//     kv_cache_spec_sliding_window}, BlockRemoved {block_hashes, medium,
//     group_idx} and AllBlocksCleared {};
//   - vLLM releases before the structs dropped msgspec's array_like=True
//     encode the same structs as arrays, the tag first and trailing fields
//     equal to their default left out; both encodings are decoded here;
//   - block hashes (ExternalBlockHash) are ints or bytes, depending on the
//     release and its hash function;
//   - the ROUTER replay socket takes [identity, "", start_seq (8 bytes BE)]
//     and answers with one [identity, "", seq, payload] per buffered batch
//     from start_seq on, then [identity, "", -1 (8 bytes), ""];
//   - with data parallelism each rank publishes on the configured port plus
//     its rank (OffsetEndpoint).
//
// No vLLM runs in this repository's tests: they drive this package against a
// Go publisher that sends exactly those frames and both msgpack shapes.
package vllmkv

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math"

	"github.com/vmihailenco/msgpack/v5"
)

// Event type tags, the msgspec class names vLLM uses.
const (
	TypeBlockStored      = "BlockStored"
	TypeBlockRemoved     = "BlockRemoved"
	TypeAllBlocksCleared = "AllBlocksCleared"
)

// MediumGPU is the medium vLLM reports for blocks in GPU memory; blocks in
// other media (CPU offload tiers) are not what the router's prefix axis
// prices.
const MediumGPU = "GPU"

// Hash is an engine block hash as an opaque key: vLLM sends ints or bytes,
// and only equality matters on this side.
type Hash string

// intHash is the key of an integer block hash: a marker byte and the 8
// bytes of its two's-complement value, so it never equals a bytes hash.
func intHash(v uint64) Hash {
	var b [9]byte
	b[0] = 'i'
	binary.BigEndian.PutUint64(b[1:], v)
	return Hash(b[:])
}

// String shows the hash for logs.
func (h Hash) String() string {
	if len(h) == 9 && h[0] == 'i' {
		return fmt.Sprint(binary.BigEndian.Uint64([]byte(h[1:])))
	}
	return fmt.Sprintf("%x", string(h))
}

// Batch is one decoded EventBatch.
type Batch struct {
	// TS is the publisher's wall-clock time in seconds since the epoch.
	TS     float64
	Events []Event
	// DPRank is the data-parallel rank the publisher stamped, -1 when absent
	// (releases before data-parallel attribution).
	DPRank int
}

// Event is one KV cache event; which fields are set depends on Type.
type Event struct {
	Type        string
	BlockHashes []Hash
	// Parent is the stored run's parent block hash; HasParent is false when
	// the run starts at the root of a prompt.
	Parent    Hash
	HasParent bool
	TokenIDs  []uint32
	BlockSize int
	// Medium is empty when the engine did not say (older releases: GPU).
	Medium string
	// Keyed is true when the blocks' engine hashes cover more than the token
	// ids — a LoRA adapter (lora_id, lora_name) or extra keys (multimodal
	// inputs, cache_salt, prompt embeddings) — so they are not reusable by a
	// plain prompt with the same tokens.
	Keyed bool
	// Group is the KV cache group (hybrid models keep one per attention
	// kind); 0 when absent.
	Group int64
}

// Field orders of the array encoding (msgspec array_like), after the tag.
var (
	storedFields  = []string{"block_hashes", "parent_block_hash", "token_ids", "block_size", "lora_id", "medium", "lora_name", "extra_keys", "group_idx", "kv_cache_spec_kind", "kv_cache_spec_sliding_window"}
	removedFields = []string{"block_hashes", "medium", "group_idx"}
	batchFields   = []string{"ts", "events", "data_parallel_rank"}
)

// DecodeBatch decodes one EventBatch payload, in either of vLLM's msgpack
// shapes (maps with a "type" tag, or arrays with the tag first). An event of
// a type this package does not know is an error: silently skipping it could
// leave the index holding blocks the engine dropped.
func DecodeBatch(payload []byte) (Batch, error) {
	if len(payload) == 0 {
		return Batch{}, errors.New("vllmkv: empty payload")
	}
	r := bytes.NewReader(payload)
	d := msgpack.NewDecoder(r)
	d.UseLooseInterfaceDecoding(true)
	raw, err := d.DecodeInterfaceLoose()
	if err != nil {
		return Batch{}, fmt.Errorf("vllmkv: payload is not msgpack: %w", err)
	}
	if r.Len() > 0 {
		return Batch{}, fmt.Errorf("vllmkv: %d bytes after the EventBatch: not one msgpack value", r.Len())
	}
	fields, err := structFields(raw, batchFields, "EventBatch")
	if err != nil {
		return Batch{}, err
	}
	b := Batch{DPRank: -1}
	switch ts := fields["ts"].(type) {
	case float64:
		b.TS = ts
	case int64:
		b.TS = float64(ts)
	case uint64:
		b.TS = float64(ts)
	default:
		return Batch{}, fmt.Errorf("vllmkv: EventBatch.ts is %T, want a number", fields["ts"])
	}
	events, ok := fields["events"].([]any)
	if !ok {
		return Batch{}, fmt.Errorf("vllmkv: EventBatch.events is %T, want an array", fields["events"])
	}
	if r := fields["data_parallel_rank"]; r != nil {
		n, ok := toInt(r)
		if !ok || n < 0 || n > math.MaxInt32 {
			return Batch{}, fmt.Errorf("vllmkv: EventBatch.data_parallel_rank is %v, want a rank", r)
		}
		b.DPRank = int(n)
	}
	b.Events = make([]Event, 0, len(events))
	for i, re := range events {
		ev, err := decodeEvent(re)
		if err != nil {
			return Batch{}, fmt.Errorf("vllmkv: event %d: %w", i, err)
		}
		b.Events = append(b.Events, ev)
	}
	return b, nil
}

// structFields reads a msgspec struct encoded as a map or as an array (in
// the given field order) into one map by field name.
func structFields(raw any, order []string, what string) (map[string]any, error) {
	switch v := raw.(type) {
	case map[string]any:
		return v, nil
	case []any:
		if len(v) > len(order) {
			// A newer release appended fields: keep what we know.
			v = v[:len(order)]
		}
		m := make(map[string]any, len(v))
		for i, x := range v {
			m[order[i]] = x
		}
		return m, nil
	default:
		return nil, fmt.Errorf("vllmkv: %s is %T, want a map or an array", what, raw)
	}
}

// decodeEvent decodes one event in either shape: its tag and fields, then
// the fields its type has.
func decodeEvent(raw any) (Event, error) {
	tag, fields, err := eventFields(raw)
	if err != nil {
		return Event{}, err
	}
	switch tag {
	case TypeBlockStored:
		return decodeStored(fields)
	case TypeBlockRemoved:
		return decodeRemoved(fields)
	case TypeAllBlocksCleared:
		return Event{Type: tag}, nil
	default:
		return Event{Type: tag}, fmt.Errorf("unknown event type %q", tag)
	}
}

// eventFields reads an event's type tag and its fields by name, from a
// tagged map or from an array with the tag first (fields in the type's
// declared order).
func eventFields(raw any) (string, map[string]any, error) {
	switch v := raw.(type) {
	case map[string]any:
		t, ok := v["type"].(string)
		if !ok {
			return "", nil, fmt.Errorf("event map has no string \"type\" tag (got %T)", v["type"])
		}
		return t, v, nil
	case []any:
		if len(v) == 0 {
			return "", nil, errors.New("empty event array (no type tag)")
		}
		t, ok := v[0].(string)
		if !ok {
			return "", nil, fmt.Errorf("event array starts with %T, want the type tag", v[0])
		}
		var order []string
		switch t {
		case TypeBlockStored:
			order = storedFields
		case TypeBlockRemoved:
			order = removedFields
		}
		fields, err := structFields(v[1:], order, t)
		return t, fields, err
	default:
		return "", nil, fmt.Errorf("event is %T, want a map or an array", raw)
	}
}

// decodeStored decodes a BlockStored event's fields, checking that its
// token ids fill its blocks exactly.
func decodeStored(fields map[string]any) (Event, error) {
	ev := Event{Type: TypeBlockStored}
	var err error
	if ev.BlockHashes, err = hashList(fields["block_hashes"]); err != nil {
		return ev, fmt.Errorf("BlockStored.block_hashes: %w", err)
	}
	if p := fields["parent_block_hash"]; p != nil {
		if ev.Parent, err = toHash(p); err != nil {
			return ev, fmt.Errorf("BlockStored.parent_block_hash: %w", err)
		}
		ev.HasParent = true
	}
	if ev.TokenIDs, err = tokenIDs(fields["token_ids"]); err != nil {
		return ev, err
	}
	bs, ok := toInt(fields["block_size"])
	if !ok || bs <= 0 || bs > 1<<20 {
		return ev, fmt.Errorf("BlockStored.block_size is %v, want a positive size", fields["block_size"])
	}
	ev.BlockSize = int(bs)
	if want := len(ev.BlockHashes) * ev.BlockSize; len(ev.TokenIDs) != want {
		return ev, fmt.Errorf("BlockStored has %d token ids for %d blocks of %d", len(ev.TokenIDs), len(ev.BlockHashes), ev.BlockSize)
	}
	if ev.Medium, err = optString(fields["medium"]); err != nil {
		return ev, fmt.Errorf("BlockStored.medium: %w", err)
	}
	ev.Keyed = fields["lora_id"] != nil || fields["lora_name"] != nil || anyExtraKeys(fields["extra_keys"])
	if ev.Group, err = optInt(fields["group_idx"]); err != nil {
		return ev, fmt.Errorf("BlockStored.group_idx: %w", err)
	}
	return ev, nil
}

// tokenIDs reads BlockStored.token_ids.
func tokenIDs(raw any) ([]uint32, error) {
	toks, ok := raw.([]any)
	if !ok {
		return nil, fmt.Errorf("BlockStored.token_ids is %T, want an array", raw)
	}
	out := make([]uint32, len(toks))
	for i, t := range toks {
		n, ok := toInt(t)
		if !ok || n < 0 || n > math.MaxUint32 {
			return nil, fmt.Errorf("BlockStored.token_ids[%d] is %v, want a token id", i, t)
		}
		out[i] = uint32(n)
	}
	return out, nil
}

// decodeRemoved decodes a BlockRemoved event's fields.
func decodeRemoved(fields map[string]any) (Event, error) {
	ev := Event{Type: TypeBlockRemoved}
	var err error
	if ev.BlockHashes, err = hashList(fields["block_hashes"]); err != nil {
		return ev, fmt.Errorf("BlockRemoved.block_hashes: %w", err)
	}
	if ev.Medium, err = optString(fields["medium"]); err != nil {
		return ev, fmt.Errorf("BlockRemoved.medium: %w", err)
	}
	if ev.Group, err = optInt(fields["group_idx"]); err != nil {
		return ev, fmt.Errorf("BlockRemoved.group_idx: %w", err)
	}
	return ev, nil
}

func hashList(raw any) ([]Hash, error) {
	list, ok := raw.([]any)
	if !ok {
		return nil, fmt.Errorf("is %T, want an array", raw)
	}
	out := make([]Hash, len(list))
	for i, x := range list {
		h, err := toHash(x)
		if err != nil {
			return nil, fmt.Errorf("[%d]: %w", i, err)
		}
		out[i] = h
	}
	return out, nil
}

// toHash keys an ExternalBlockHash: an int (signed or unsigned 64-bit) or
// bytes (the loose decoder gives bin as a string).
func toHash(raw any) (Hash, error) {
	switch v := raw.(type) {
	case int64:
		return intHash(uint64(v)), nil
	case uint64:
		return intHash(v), nil
	case string:
		if v == "" {
			return "", errors.New("empty bytes hash")
		}
		return Hash("b" + v), nil
	default:
		return "", fmt.Errorf("hash is %T, want an int or bytes", raw)
	}
}

func toInt(raw any) (int64, bool) {
	switch v := raw.(type) {
	case int64:
		return v, true
	case uint64:
		if v > math.MaxInt64 {
			return 0, false
		}
		return int64(v), true
	}
	return 0, false
}

func optInt(raw any) (int64, error) {
	if raw == nil {
		return 0, nil
	}
	n, ok := toInt(raw)
	if !ok {
		return 0, fmt.Errorf("is %v (%T), want an int or nil", raw, raw)
	}
	return n, nil
}

func optString(raw any) (string, error) {
	if raw == nil {
		return "", nil
	}
	s, ok := raw.(string)
	if !ok {
		return "", fmt.Errorf("is %T, want a string or nil", raw)
	}
	return s, nil
}

// anyExtraKeys reports whether extra_keys (one entry per block, each nil or
// a tuple) keys any block on more than its tokens.
func anyExtraKeys(raw any) bool {
	list, ok := raw.([]any)
	if !ok {
		return raw != nil
	}
	for _, x := range list {
		if x == nil {
			continue
		}
		if t, ok := x.([]any); ok && len(t) == 0 {
			continue
		}
		return true
	}
	return false
}
