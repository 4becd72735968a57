package schemas

import (
	"math"
	"regexp"
	"strings"
	"time"
)

// Limits bound what a single request may ask for. The zero value applies
// DefaultLimits.
type Limits struct {
	MaxPromptBytes int
	MaxMaxTokens   int
	MaxDeadline    time.Duration
	MaxMessages    int
}

// DefaultLimits are generous enough for long-context agentic prompts and
// tight enough that a runaway client cannot wedge a service. 4 MiB of
// prompt is a 1M-token context at about four bytes a token; with its
// envelope and block hashes it fits the bus's 8 MiB messages
// (MaxPayload).
var DefaultLimits = Limits{
	MaxPromptBytes: 4 << 20,
	MaxMaxTokens:   32768,
	MaxDeadline:    24 * time.Hour,
	MaxMessages:    1024,
}

// MaxPayload is the largest message Switchyard's embedded NATS server
// carries (its max_payload; NATS's default is 1 MiB), and the size an
// external server must allow for long prompts to flow. A prompt travels
// inline — in the submission, the admitted envelope and the dispatch to a
// worker — so the largest message is the longest prompt plus its block
// hashes and envelope: a 1M-token context is about 4 MiB of text and
// 0.6 MiB of hashes, and JSON escaping can add more. 8 MiB is also the
// largest payload nats-server accepts without warning that it may hurt
// latency for everyone on the connection.
const MaxPayload = 8 << 20

func (l Limits) orDefault() Limits {
	d := DefaultLimits
	if l.MaxPromptBytes > 0 {
		d.MaxPromptBytes = l.MaxPromptBytes
	}
	if l.MaxMaxTokens > 0 {
		d.MaxMaxTokens = l.MaxMaxTokens
	}
	if l.MaxDeadline > 0 {
		d.MaxDeadline = l.MaxDeadline
	}
	if l.MaxMessages > 0 {
		d.MaxMessages = l.MaxMessages
	}
	return d
}

// MaxStop is the most stop sequences a request may set, OpenAI's limit.
const MaxStop = 4

var idPattern = regexp.MustCompile(`^[A-Za-z0-9_\-]{1,128}$`)

// ValidID reports whether id can be used as a subject token and a
// Nats-Msg-Id: letters, digits, '-' and '_', at most 128 characters.
func ValidID(id string) bool { return idPattern.MatchString(id) }

// ModelLookup reports whether a model name is known; "auto" is handled by the
// caller before lookup.
type ModelLookup func(name string) bool

// Validate checks a decoded request for everything that can be judged
// without tenant policy or fleet state. now is the admission time. The
// checks run in a fixed order, so a request with several faults always
// gets the same first one back.
func (r *Request) Validate(now time.Time, known ModelLookup, lim Limits) *Error {
	lim = lim.orDefault()
	if err := r.validateIdentity(known); err != nil {
		return err
	}
	if err := r.validatePrompt(lim); err != nil {
		return err
	}
	if err := r.validateGeneration(lim); err != nil {
		return err
	}
	if err := r.validateScheduling(now, lim); err != nil {
		return err
	}
	return r.validateWorkflow()
}

// validateIdentity checks what names the request: its wire version, its id
// and its model.
func (r *Request) validateIdentity(known ModelLookup) *Error {
	if r.V > Version {
		return Errf(CodeMalformed, "v", "wire version %d is newer than this server's %d", r.V, Version)
	}
	if r.ID != "" && !ValidID(r.ID) {
		return Errf(CodeInvalidID, "id", "id %q must be 1-128 characters of [A-Za-z0-9_-]", truncate(r.ID, 40))
	}
	if strings.TrimSpace(r.Model) == "" {
		return Errf(CodeMissingModel, "model", "model is required (a catalog name or \"auto\")")
	}
	if r.Model != "auto" && known != nil && !known(r.Model) {
		return Errf(CodeUnknownModel, "model", "unknown model %q: not in the catalog, and no live worker serves it", truncate(r.Model, 64))
	}
	return nil
}

// validatePrompt checks the input text: exactly one of prompt and
// messages, known message roles, and the total size against the limits.
func (r *Request) validatePrompt(lim Limits) *Error {
	switch {
	case r.Prompt == "" && len(r.Messages) == 0:
		return Errf(CodeMissingPrompt, "prompt", "either prompt or messages is required")
	case r.Prompt != "" && len(r.Messages) > 0:
		return Errf(CodeAmbiguousPrompt, "prompt", "set prompt or messages, not both")
	}
	if len(r.Messages) > lim.MaxMessages {
		return Errf(CodeOversized, "messages", "%d messages exceed the limit of %d", len(r.Messages), lim.MaxMessages)
	}
	size := len(r.Prompt)
	for i, m := range r.Messages {
		switch m.Role {
		case "system", "user", "assistant", "tool", "developer":
		default:
			return Errf(CodeInvalidMessage, "messages", "message %d has unknown role %q", i, truncate(m.Role, 32))
		}
		size += len(m.Content)
	}
	if size > lim.MaxPromptBytes {
		// The field the client sent, so a chat client is pointed at its
		// messages, not at a prompt it never set.
		field := "prompt"
		if len(r.Messages) > 0 {
			field = "messages"
		}
		return Errf(CodePromptTooLarge, field, "prompt is %d bytes, limit %d", size, lim.MaxPromptBytes)
	}
	return nil
}

// validateGeneration checks the sampling parameters: max_tokens,
// temperature, top_p and stop sequences.
func (r *Request) validateGeneration(lim Limits) *Error {
	if r.MaxTokens <= 0 {
		return Errf(CodeInvalidMaxTokens, "max_tokens", "max_tokens must be > 0, got %d", r.MaxTokens)
	}
	if r.MaxTokens > lim.MaxMaxTokens {
		return Errf(CodeInvalidMaxTokens, "max_tokens", "max_tokens %d exceeds the limit of %d", r.MaxTokens, lim.MaxMaxTokens)
	}
	if r.Temperature != nil && (*r.Temperature < 0 || *r.Temperature > 2) {
		return Errf(CodeInvalidTemperature, "temperature", "temperature must be in [0, 2], got %g", *r.Temperature)
	}
	if r.TopP != nil && (*r.TopP <= 0 || *r.TopP > 1 || math.IsNaN(*r.TopP)) {
		return Errf(CodeInvalidTopP, "top_p", "top_p must be in (0, 1], got %g", *r.TopP)
	}
	if len(r.Stop) > MaxStop {
		return Errf(CodeOversized, "stop", "%d stop sequences exceed the limit of %d", len(r.Stop), MaxStop)
	}
	return nil
}

// validateScheduling checks what the scheduler orders and times the request
// by: its priority, its deadlines and its latency targets.
func (r *Request) validateScheduling(now time.Time, lim Limits) *Error {
	if r.Priority != "" && PriorityRank(r.Priority) < 0 {
		return Errf(CodeInvalidPriority, "priority", "unknown priority %q; use one of %s", truncate(r.Priority, 32), strings.Join(Priorities, ", "))
	}
	if r.DeadlineMs < 0 {
		return Errf(CodeInvalidDeadline, "deadline_ms", "deadline_ms must be >= 0, got %d", r.DeadlineMs)
	}
	if time.Duration(r.DeadlineMs)*time.Millisecond > lim.MaxDeadline {
		return Errf(CodeInvalidDeadline, "deadline_ms", "deadline_ms %d exceeds the limit of %s", r.DeadlineMs, lim.MaxDeadline)
	}
	for _, t := range []struct {
		field string
		ms    float64
	}{{"ttft_target_ms", r.TTFTTargetMs}, {"tpot_target_ms", r.TPOTTargetMs}} {
		if t.ms < 0 || math.IsNaN(t.ms) || math.IsInf(t.ms, 0) || time.Duration(t.ms*float64(time.Millisecond)) > lim.MaxDeadline {
			return Errf(CodeInvalidDeadline, t.field, "%s must be a number of milliseconds in [0, %d], got %g", t.field, lim.MaxDeadline.Milliseconds(), t.ms)
		}
	}
	if r.Deadline != nil {
		if !r.Deadline.After(now) {
			return Errf(CodeInvalidDeadline, "deadline", "deadline %s is already past", r.Deadline.Format(time.RFC3339Nano))
		}
		if r.Deadline.Sub(now) > lim.MaxDeadline {
			return Errf(CodeInvalidDeadline, "deadline", "deadline is more than %s away", lim.MaxDeadline)
		}
	}
	return nil
}

// validateWorkflow checks the workflow a step belongs to, when it names one.
func (r *Request) validateWorkflow() *Error {
	w := r.Workflow
	if w == nil {
		return nil
	}
	switch {
	case w.ID == "" || !ValidID(w.ID):
		return Errf(CodeInvalidWorkflow, "workflow.id", "workflow id must be 1-128 characters of [A-Za-z0-9_-]")
	case w.Step < 1:
		return Errf(CodeInvalidWorkflow, "workflow.step", "workflow step is 1-based, got %d", w.Step)
	case w.Of < 0 || (w.Of > 0 && w.Step > w.Of):
		return Errf(CodeInvalidWorkflow, "workflow.of", "workflow step %d of %d is inconsistent", w.Step, w.Of)
	case w.DeadlineMs < 0:
		return Errf(CodeInvalidWorkflow, "workflow.deadline_ms", "workflow deadline_ms must be >= 0")
	}
	return nil
}

// PromptText flattens the prompt or messages into the text the tokenizer
// sees, in a stable order so that equal conversations hash equally.
func (r *Request) PromptText() string {
	if r.Prompt != "" {
		return r.Prompt
	}
	var b strings.Builder
	for _, m := range r.Messages {
		b.WriteString("<|")
		b.WriteString(m.Role)
		b.WriteString("|>")
		b.WriteString(m.Content)
		b.WriteByte('\n')
	}
	return b.String()
}

// EffectiveDeadline returns the request's deadline: the earlier of an
// absolute deadline and submitted+DeadlineMs, or submitted+fallback when the
// request sets neither.
func (r *Request) EffectiveDeadline(submitted time.Time, fallback time.Duration) time.Time {
	var d time.Time
	if r.DeadlineMs > 0 {
		d = submitted.Add(time.Duration(r.DeadlineMs) * time.Millisecond)
	}
	if r.Deadline != nil && (d.IsZero() || r.Deadline.Before(d)) {
		d = *r.Deadline
	}
	if d.IsZero() {
		d = submitted.Add(fallback)
	}
	return d
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
