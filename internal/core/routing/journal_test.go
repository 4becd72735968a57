package routing

import (
	"reflect"
	"testing"
	"time"

	"github.com/switchyard-ai/switchyard/schemas"
)

func TestJournalRoundTrip(t *testing.T) {
	at := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	adm := &schemas.Admitted{Request: schemas.Request{ID: "r1", Model: model, Prompt: "a long prompt"}, Tenant: "acme",
		Priority: schemas.PriorityInteractive, Model: model, SubmittedAt: at, Deadline: at.Add(time.Second), BlockHashes: []uint64{1, 2}}
	tests := []struct {
		name string
		in   Input
		seq  uint64
		want JournalEntry
	}{
		{"admitted by reference", Input{Kind: InAdmitted, At: at, Admitted: adm}, 42,
			JournalEntry{Input: Input{Kind: InAdmitted, At: at}, AdmittedSeq: 42}},
		{"admitted without a sequence keeps its copy", Input{Kind: InAdmitted, At: at, Admitted: adm}, 0,
			JournalEntry{Input: Input{Kind: InAdmitted, At: at, Admitted: adm}}},
		{"a failed dispatch keeps its copy", Input{Kind: InDispatchFailed, At: at, ID: "r1", Admitted: adm}, 7,
			JournalEntry{Input: Input{Kind: InDispatchFailed, At: at, ID: "r1", Admitted: adm}}},
		{"release", Input{Kind: InReleased, At: at, ID: "r1", Result: &ResultSummary{Status: schemas.StatusOK, WorkerID: "w1", WorkMs: 3}}, 0,
			JournalEntry{Input: Input{Kind: InReleased, At: at, ID: "r1", Result: &ResultSummary{Status: schemas.StatusOK, WorkerID: "w1", WorkMs: 3}}}},
	}
	j := NewJournal()
	for _, tc := range tests {
		if err := j.Add(tc.in, tc.seq); err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
	}
	if j.Len() != len(tests) || j.Size() == 0 {
		t.Fatalf("journal holds %d entries in %d bytes, want %d", j.Len(), j.Size(), len(tests))
	}
	got, err := DecodeJournal(j.Take())
	if err != nil {
		t.Fatal(err)
	}
	if j.Len() != 0 || j.Size() != 0 {
		t.Fatalf("Take left %d entries", j.Len())
	}
	if len(got) != len(tests) {
		t.Fatalf("decoded %d entries, want %d", len(got), len(tests))
	}
	for i, tc := range tests {
		g := got[i]
		// msgpack decodes times in the local zone: compare the instant.
		if !g.At.Equal(tc.want.At) {
			t.Errorf("%s: at %v, want %v", tc.name, g.At, tc.want.At)
		}
		g.At = tc.want.At
		if g.Admitted != nil {
			a := *g.Admitted
			a.SubmittedAt, a.Deadline = adm.SubmittedAt, adm.Deadline
			g.Admitted = &a
		}
		if !reflect.DeepEqual(g, tc.want) {
			t.Errorf("%s:\n got %+v\nwant %+v", tc.name, g, tc.want)
		}
	}
}

// A journal written one Input per message, before batching, reads back.
func TestDecodeJournalReadsOneInputMessages(t *testing.T) {
	in := Input{Kind: InTick, At: time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)}
	b, err := schemas.Marshal(schemas.Msgpack, in)
	if err != nil {
		t.Fatal(err)
	}
	got, err := DecodeJournal(b)
	if err != nil || len(got) != 1 || got[0].Kind != InTick || got[0].AdmittedSeq != 0 {
		t.Fatalf("old-format message decoded as %+v, %v", got, err)
	}
	if _, err := DecodeJournal(append(b, 0xc1)); err == nil {
		t.Fatal("a corrupt tail must be an error, not silently dropped")
	}
}
