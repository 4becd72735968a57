package bus

import (
	"bytes"
	"errors"
	"fmt"
	"io"

	"github.com/nats-io/nats.go"
	"github.com/vmihailenco/msgpack/v5"

	"github.com/switchyard-ai/switchyard/schemas"
)

// DecodeEvents reads every event in one message from sy.event.>: one
// (JSON, or a single msgpack value), or a batch of msgpack values back to
// back (subjects.HeaderEvents counts them). It lives with the bus rather
// than with the services that publish events so that adapters under
// internal/ (the batch deferral watcher) can read events without
// importing services/.
func DecodeEvents(h nats.Header, data []byte) ([]schemas.Event, error) {
	f, err := schemas.FormatFromContentType(h.Get(schemas.HeaderContentType))
	if err != nil {
		return nil, err
	}
	if f != schemas.Msgpack {
		var ev schemas.Event
		if err := schemas.Unmarshal(f, data, &ev); err != nil {
			return nil, err
		}
		return []schemas.Event{ev}, nil
	}
	dec := msgpack.GetDecoder()
	defer msgpack.PutDecoder(dec)
	dec.Reset(bytes.NewReader(data))
	dec.SetCustomStructTag("json")
	var out []schemas.Event
	for {
		var ev schemas.Event
		err := dec.Decode(&ev)
		if errors.Is(err, io.EOF) {
			if len(out) == 0 {
				return nil, errors.New("event message is empty")
			}
			return out, nil
		}
		if err != nil {
			return out, fmt.Errorf("event %d: %w", len(out), err)
		}
		out = append(out, ev)
	}
}

// DecodeResult decodes a result message body by its Content-Type.
func DecodeResult(h nats.Header, data []byte) (schemas.Result, error) {
	f, err := schemas.FormatFromContentType(h.Get(schemas.HeaderContentType))
	if err != nil {
		return schemas.Result{}, err
	}
	var r schemas.Result
	if err := schemas.Unmarshal(f, data, &r); err != nil {
		return schemas.Result{}, err
	}
	return r, nil
}
