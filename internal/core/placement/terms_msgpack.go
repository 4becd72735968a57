package placement

import (
	"bytes"
	"encoding/binary"
	"math"

	"github.com/vmihailenco/msgpack/v5"
	"github.com/vmihailenco/msgpack/v5/msgpcode"
)

// EncodeMsgpack writes Terms exactly as msgpack's reflective encoder does
// with the json tags (the same keys, in field order, the omitempty ones
// left out when zero, the same number encodings) — byte for byte, which
// TestTermsMsgpackMatchesReflection checks — only without reflection. Every
// placement event carries the chosen worker's terms and each candidate's:
// up to nine of these 22-field structs per request, which made the
// router's placement event its most expensive encoding.
func (t Terms) EncodeMsgpack(e *msgpack.Encoder) error {
	n := 19
	if t.ReclaimBlocks != 0 {
		n++
	}
	if t.ReclaimSeconds != 0 {
		n++
	}
	if t.ReclaimUSD != 0 {
		n++
	}
	for _, v := range t.sloFloats() {
		if v.v != 0 {
			n++
		}
	}
	if err := e.EncodeMapLen(n); err != nil {
		return err
	}
	// The 17 float terms go out in one write: a fixstr key and a float64
	// (0xcb, eight big-endian bytes) each, as EncodeString and
	// EncodeFloat64 write them. (An encoder set to UseCompactFloats would
	// have written integral floats as ints; the project's encoders are not.)
	var buf [17 * (1 + 23 + 9)]byte
	b := buf[:0]
	for _, f := range [...]struct {
		key string
		v   float64
	}{
		{"queue_s", t.QueueSeconds}, {"delay_s", t.DelaySeconds}, {"load_s", t.LoadSeconds}, {"prefill_s", t.PrefillSeconds},
		{"saved_s", t.SavedSeconds}, {"decode_s", t.DecodeSeconds}, {"preempt_s", t.PreemptSeconds},
		{"completion_s", t.CompletionSeconds}, {"slack_s", t.SlackSeconds}, {"value_of_time_usd_per_s", t.ValueOfTime},
		{"delay_value_usd_per_s", t.DelayValue}, {"workflow_factor", t.WorkflowFactor}, {"p_miss", t.PMiss},
		{"time_usd", t.TimeUSD}, {"gpu_usd", t.GPUUSD}, {"miss_usd", t.MissUSD}, {"total_usd", t.TotalUSD},
	} {
		b = append(b, msgpcode.FixedStrLow|byte(len(f.key)))
		b = append(b, f.key...)
		b = append(b, msgpcode.Double)
		b = binary.BigEndian.AppendUint64(b, math.Float64bits(f.v))
	}
	// Every project encoder writes into a bytes.Buffer; writing to it as
	// that concrete type keeps buf on the stack (through the io.Writer
	// interface it would escape: an allocation per Terms).
	if w, ok := e.Writer().(*bytes.Buffer); ok {
		w.Write(b)
	} else if _, err := e.Writer().Write(bytes.Clone(b)); err != nil {
		return err
	}
	if err := encodeKeyInt(e, "cached_tokens", t.CachedTokens); err != nil {
		return err
	}
	if err := encodeKeyInt(e, "blocks", t.Blocks); err != nil {
		return err
	}
	if t.ReclaimBlocks != 0 {
		if err := encodeKeyInt(e, "reclaim_blocks", t.ReclaimBlocks); err != nil {
			return err
		}
	}
	if t.ReclaimSeconds != 0 {
		if err := encodeKeyFloat(e, "reclaim_s", t.ReclaimSeconds); err != nil {
			return err
		}
	}
	if t.ReclaimUSD != 0 {
		if err := encodeKeyFloat(e, "reclaim_usd", t.ReclaimUSD); err != nil {
			return err
		}
	}
	for _, f := range t.sloFloats() {
		if f.v != 0 {
			if err := encodeKeyFloat(e, f.key, f.v); err != nil {
				return err
			}
		}
	}
	return nil
}

type keyFloat struct {
	key string
	v   float64
}

// sloFloats are the omitempty float terms after reclaim_usd, in field
// order: the latency targets', the interference axis's and the phase
// axis's.
func (t *Terms) sloFloats() [8]keyFloat {
	return [8]keyFloat{
		{"ttft_s", t.TTFTSeconds}, {"ttft_slack_s", t.TTFTSlackSeconds}, {"ttft_p_miss", t.TTFTPMiss},
		{"tpot_s", t.TPOTSeconds}, {"tpot_p_miss", t.TPOTPMiss},
		{"itl_delta_s", t.ITLDeltaSeconds}, {"interference_usd", t.InterferenceUSD},
		{"transfer_s", t.TransferSeconds},
	}
}

func encodeKeyFloat(e *msgpack.Encoder, key string, v float64) error {
	if err := e.EncodeString(key); err != nil {
		return err
	}
	return e.EncodeFloat64(v)
}

func encodeKeyInt(e *msgpack.Encoder, key string, v int) error {
	if err := e.EncodeString(key); err != nil {
		return err
	}
	return e.EncodeInt(int64(v))
}
