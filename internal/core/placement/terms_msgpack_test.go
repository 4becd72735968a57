package placement

import (
	"bytes"
	"math"
	"reflect"
	"testing"

	"github.com/vmihailenco/msgpack/v5"
)

// reflectedTerms is Terms without its EncodeMsgpack: what msgpack's
// reflective encoder writes for it.
type reflectedTerms Terms

// TestTermsMsgpackMatchesReflection: Terms' own encoder writes the bytes
// the reflective encoder writes, with the json tags, for terms with and
// without the omitempty fields, infinities, negative and huge values —
// alone and inside a slice and a map, as placement events carry them — so
// no reader of events can tell which encoder wrote them. A Terms field
// added without its line in EncodeMsgpack fails here.
func TestTermsMsgpackMatchesReflection(t *testing.T) {
	full := Terms{}
	// Every field non-zero, by reflection over the field list, so a new
	// field is covered without editing this test.
	fillTerms(&full)
	cases := []struct {
		name string
		t    Terms
	}{
		{"zero", Terms{}},
		{"every field set", full},
		{"typical", Terms{QueueSeconds: 0.1, PrefillSeconds: 0.02, DecodeSeconds: 0.01, CompletionSeconds: 0.13, SlackSeconds: math.Inf(1),
			ValueOfTime: 0.001, WorkflowFactor: 1, PMiss: 0.01, TimeUSD: 1e-4, GPUUSD: 2e-5, TotalUSD: 1.3e-4, Blocks: 1}},
		{"reclaim only", Terms{ReclaimBlocks: 7, ReclaimSeconds: 0.5, ReclaimUSD: 1e-9, CachedTokens: -3, Blocks: 1 << 40}},
		{"one omitempty set", Terms{ReclaimSeconds: -0.25}},
		{"transfer only", Terms{TransferSeconds: 0.3}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			for _, shape := range []struct {
				name      string
				own, slow any
			}{
				{"alone", tc.t, reflectedTerms(tc.t)},
				{"in a slice", []Terms{tc.t, {}}, []reflectedTerms{reflectedTerms(tc.t), {}}},
				{"in a map", map[string]any{"terms": tc.t}, map[string]any{"terms": reflectedTerms(tc.t)}},
			} {
				own, slow := encodeJSONTags(t, shape.own), encodeJSONTags(t, shape.slow)
				if !bytes.Equal(own, slow) {
					t.Fatalf("%s: EncodeMsgpack wrote\n%x\nreflection writes\n%x", shape.name, own, slow)
				}
			}
		})
	}
}

func encodeJSONTags(t *testing.T, v any) []byte {
	t.Helper()
	var buf bytes.Buffer
	enc := msgpack.NewEncoder(&buf)
	enc.SetCustomStructTag("json")
	if err := enc.Encode(v); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func BenchmarkTermsMsgpack(b *testing.B) {
	var tm Terms
	fillTerms(&tm)
	for _, bc := range []struct {
		name string
		v    any
	}{{"own", tm}, {"reflection", reflectedTerms(tm)}} {
		b.Run(bc.name, func(b *testing.B) {
			var buf bytes.Buffer
			enc := msgpack.NewEncoder(&buf)
			enc.SetCustomStructTag("json")
			b.ReportAllocs()
			for b.Loop() {
				buf.Reset()
				if err := enc.Encode(bc.v); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// fillTerms sets every field of t to a distinct non-zero value.
func fillTerms(t *Terms) {
	v := reflect.ValueOf(t).Elem()
	for i := 0; i < v.NumField(); i++ {
		switch f := v.Field(i); f.Kind() {
		case reflect.Float64:
			f.SetFloat(float64(i) + 0.5)
		case reflect.Int:
			f.SetInt(int64(i) + 1)
		default:
			panic("fillTerms: a Terms field of kind " + f.Kind().String() + ": teach EncodeMsgpack and this helper about it")
		}
	}
}
