package routing

import (
	"bytes"
	"errors"
	"fmt"
	"io"

	"github.com/vmihailenco/msgpack/v5"
)

// HeaderJournalInputs counts the entries in one journal message. It is for
// people reading the stream; DecodeJournal does not need it.
const HeaderJournalInputs = "Sy-Journal-Inputs"

// JournalEntry is one journaled Input. For an admitted request the router
// applied straight from the ADMITTED stream, AdmittedSeq is that message's
// stream sequence and Admitted is left out: the request is already stored
// there, so the journal keeps a reference rather than a second copy of
// every prompt. Replay resolves the reference (internal/core/replay) before the
// Input reaches a Core.
type JournalEntry struct {
	Input
	AdmittedSeq uint64 `json:"admitted_seq,omitempty"`
}

// Journal accumulates entries for one journal message: msgpack values back
// to back, in the order they were applied. One stored message per batch
// rather than per input keeps the journal off the per-request path of the
// bus (each stored message costs the server a file-store write whatever
// its size). A message holding one entry is a message of the older
// one-Input-per-message format, so old journals decode.
type Journal struct {
	buf bytes.Buffer
	enc *msgpack.Encoder
	n   int
}

// NewJournal returns an empty journal batch.
func NewJournal() *Journal {
	j := &Journal{}
	j.enc = msgpack.NewEncoder(&j.buf)
	// The json tags, as schemas.Marshal, so every tool that reads the
	// project's msgpack reads journals; but only fields tagged omitempty
	// are left out (as in JSON): msgpack's omit-every-empty-field mode
	// allocates a field list per struct written, which doubles the cost
	// of journaling an admitted request.
	j.enc.SetCustomStructTag("json")
	return j
}

// Add appends one Input. A non-zero admittedSeq replaces the admitted
// request's copy with a reference to its ADMITTED stream sequence.
func (j *Journal) Add(in Input, admittedSeq uint64) error {
	e := JournalEntry{Input: in}
	if admittedSeq != 0 && in.Kind == InAdmitted {
		e.Admitted, e.AdmittedSeq = nil, admittedSeq
	}
	// By value: msgpack tests each omitempty field with reflect's Interface,
	// which copies an addressable field (one reached through a pointer) onto
	// the heap; a value's fields are read in place. One allocation for the
	// copy instead of about a dozen per entry.
	if err := j.enc.Encode(e); err != nil {
		return fmt.Errorf("journal %s input: %w", in.Kind, err)
	}
	j.n++
	return nil
}

// Len is the number of entries held.
func (j *Journal) Len() int { return j.n }

// Size is the encoded size in bytes.
func (j *Journal) Size() int { return j.buf.Len() }

// Take returns the encoded batch and empties the journal for the next
// one; the bytes are the caller's (an async publish keeps them).
func (j *Journal) Take() []byte {
	out := bytes.Clone(j.buf.Bytes())
	j.buf.Reset()
	j.n = 0
	return out
}

// DecodeJournal reads every entry of one journal message, in order.
func DecodeJournal(data []byte) ([]JournalEntry, error) {
	dec := msgpack.NewDecoder(bytes.NewReader(data))
	dec.SetCustomStructTag("json")
	var out []JournalEntry
	for {
		var e JournalEntry
		err := dec.Decode(&e)
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return out, fmt.Errorf("journal entry %d: %w", len(out), err)
		}
		out = append(out, e)
	}
}
