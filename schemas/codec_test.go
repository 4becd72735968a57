package schemas

import (
	"bytes"
	"sync"
	"testing"
	"time"
)

// TestPooledDecoderCarriesNothingOver: msgpack decoders are pooled, so a
// decode must not see anything of the one before it — an error halfway
// through a message, another type, another goroutine.
func TestPooledDecoderCarriesNothingOver(t *testing.T) {
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	want := Admitted{V: Version, Tenant: "acme", Priority: PriorityCritical, Model: "m", SubmittedAt: at,
		Request: Request{V: Version, ID: "r1", Model: "m", Prompt: "hello", MaxTokens: 8}}
	good := MustMarshal(Msgpack, want)
	ev := MustMarshal(Msgpack, Event{Service: "router", Kind: "placed", RequestID: "r1"})
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 200 {
				switch (g + i) % 3 {
				case 0:
					var got Admitted
					if err := Unmarshal(Msgpack, good[:len(good)/2], &got); err == nil {
						t.Error("a truncated message decoded without an error")
						return
					}
				case 1:
					var got Event
					if err := Unmarshal(Msgpack, ev, &got); err != nil || got.Kind != "placed" || got.RequestID != "r1" {
						t.Errorf("event: %v %+v", err, got)
						return
					}
				default:
					var got Admitted
					// Compared re-encoded: msgpack gives times back in Local.
					if err := Unmarshal(Msgpack, good, &got); err != nil || !bytes.Equal(MustMarshal(Msgpack, got), good) || !got.SubmittedAt.Equal(at) {
						t.Errorf("admitted: %v\n got %+v\nwant %+v", err, got, want)
						return
					}
				}
			}
		}()
	}
	wg.Wait()
}

func BenchmarkUnmarshalAdmitted(b *testing.B) {
	data := MustMarshal(Msgpack, Admitted{V: Version, Tenant: "acme", Priority: PriorityCritical, Model: "m",
		Request: Request{V: Version, ID: "r1", Model: "m", Prompt: "hello world", MaxTokens: 8}})
	b.ReportAllocs()
	for b.Loop() {
		var got Admitted
		if err := Unmarshal(Msgpack, data, &got); err != nil {
			b.Fatal(err)
		}
	}
}
