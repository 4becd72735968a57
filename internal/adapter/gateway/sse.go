package gateway

import (
	"encoding/json"
	"fmt"
)

// SSEDone is the event that ends every OpenAI stream.
const SSEDone = "data: [DONE]\n\n"

// SSEEvent frames v as one server-sent event. JSON never contains a raw
// newline, so one data line is always enough.
func SSEEvent(v any) ([]byte, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("sse event %T: %w", v, err)
	}
	out := make([]byte, 0, len(b)+8)
	out = append(out, "data: "...)
	out = append(out, b...)
	return append(out, '\n', '\n'), nil
}
