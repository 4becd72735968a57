// Package trail reads back, from the streams, everything stored about a
// set of requests: the submission, the admission, every dispatch attempt
// and which worker it went to, the decision events and the final result,
// in stream order. It is the first question of an incident ("where did
// request X stop?") and what the chaos drill prints for a request it
// would call lost.
//
// It scans stored messages only — the durable record, not what any
// service holds in memory — so a request that is in no stream was never
// acknowledged by anyone, and a request whose trail stops after a
// dispatch is with that worker (or its consumer's redelivery).
package trail

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/switchyard-ai/switchyard/internal/adapter/bus"
	"github.com/switchyard-ai/switchyard/schemas"
	"github.com/switchyard-ai/switchyard/subjects"
)

// Step is one stored message about a request.
type Step struct {
	Stream  string    `json:"stream"`
	Seq     uint64    `json:"seq"`
	At      time.Time `json:"at"`
	Subject string    `json:"subject"`
	// What says what the message records, in a few words: "submitted",
	// "admitted", "dispatched to w1, attempt 0", "event placed (…)",
	// "result ok".
	What string `json:"what"`
	// Acked, for a SUBMIT, ADMITTED or DISPATCH message, says how far the
	// durable consumer that reads it has got: "yes" (at or below its ack
	// floor), "pending" (delivered, above the ack floor: not acked, or
	// acked out of order while an older message is still out) or "not yet
	// delivered"; empty where no durable consumer reads its subject.
	Acked string `json:"acked,omitempty"`
}

// Options bound a scan.
type Options struct {
	// Since skips messages stored before it (zero: the whole stream).
	Since time.Time
	// MaxPerStream stops a stream's scan after this many messages
	// (0: 1,000,000), so a look-up on a long-lived stream ends.
	MaxPerStream int
}

// scanned are the streams a request leaves messages in, in the order a
// request passes through them. JOURNAL records inputs by reference and
// TOKENS only chunks; neither is scanned.
var scanned = []string{
	subjects.StreamSubmit, subjects.StreamAdmitted, subjects.StreamDispatch, subjects.StreamHandoffs,
	subjects.StreamEvents, subjects.StreamResults, subjects.StreamDLQ,
}

// Find returns each id's steps, every stream's in sequence order and the
// streams in a request's order. An id with no stored message has an
// empty trail. A stream that does not exist is skipped.
func Find(ctx context.Context, js jetstream.JetStream, ids []string, o Options) (map[string][]Step, error) {
	if o.MaxPerStream <= 0 {
		o.MaxPerStream = 1_000_000
	}
	want := make(map[string]bool, len(ids))
	out := make(map[string][]Step, len(ids))
	for _, id := range ids {
		want[id] = true
		out[id] = nil
	}
	for _, name := range scanned {
		st, err := js.Stream(ctx, name)
		if errors.Is(err, jetstream.ErrStreamNotFound) {
			continue
		}
		if err != nil {
			return out, fmt.Errorf("trail: stream %s: %w", name, err)
		}
		acked, err := ackState(ctx, st)
		if err != nil {
			return out, fmt.Errorf("trail: stream %s consumers: %w", name, err)
		}
		if err := scan(ctx, st, name, want, o, acked, out); err != nil {
			return out, err
		}
	}
	return out, nil
}

// ackFloors maps a stream subject to the ack state of the durable
// consumer that reads it; one func per consumer, tried in turn.
type ackFloors []func(subject string, seq uint64) string

func (a ackFloors) state(subject string, seq uint64) string {
	for _, f := range a {
		if s := f(subject, seq); s != "" {
			return s
		}
	}
	return ""
}

// ackState reads the stream's durable consumers once, so each step can
// say whether its reader acknowledged it.
func ackState(ctx context.Context, st jetstream.Stream) (ackFloors, error) {
	var floors ackFloors
	lister := st.ListConsumers(ctx)
	for ci := range lister.Info() {
		if ci.Config.Durable == "" {
			continue
		}
		filters := ci.Config.FilterSubjects
		if ci.Config.FilterSubject != "" {
			filters = append(filters, ci.Config.FilterSubject)
		}
		floor, delivered := ci.AckFloor.Stream, ci.Delivered.Stream
		floors = append(floors, func(subject string, seq uint64) string {
			if !matchesAny(filters, subject) {
				return ""
			}
			switch {
			case seq <= floor:
				return "yes"
			case seq <= delivered:
				return "pending"
			default:
				return "not yet delivered"
			}
		})
	}
	if err := lister.Err(); err != nil && !errors.Is(err, jetstream.ErrEndOfData) {
		return nil, err
	}
	return floors, nil
}

func scan(ctx context.Context, st jetstream.Stream, name string, want map[string]bool, o Options, acked ackFloors, out map[string][]Step) error {
	cfg := jetstream.OrderedConsumerConfig{DeliverPolicy: jetstream.DeliverAllPolicy}
	if !o.Since.IsZero() {
		cfg.DeliverPolicy = jetstream.DeliverByStartTimePolicy
		since := o.Since
		cfg.OptStartTime = &since
	}
	err := bus.ReadStored(ctx, st, cfg, o.MaxPerStream, time.Second, func(m jetstream.Msg, md *jetstream.MsgMetadata) {
		seq := md.Sequence.Stream
		for _, s := range match(name, m, want) {
			s.Stream, s.Seq, s.At, s.Subject = name, seq, md.Timestamp, m.Subject()
			if name != subjects.StreamEvents && name != subjects.StreamResults {
				s.Acked = acked.state(m.Subject(), seq)
			}
			out[s.id] = append(out[s.id], s.Step)
		}
	})
	if err != nil {
		return fmt.Errorf("trail: stream %s: %w", name, err)
	}
	return nil
}

type idStep struct {
	id string
	Step
}

// match says which wanted requests one stored message is about, reading
// the message the way its stream stores it.
func match(stream string, m jetstream.Msg, want map[string]bool) []idStep {
	h := m.Headers()
	msgID := h.Get(schemas.HeaderMsgID)
	switch stream {
	case subjects.StreamSubmit:
		if want[msgID] {
			return []idStep{{id: msgID, Step: Step{What: "submitted"}}}
		}
	case subjects.StreamAdmitted:
		if want[msgID] {
			what := "admitted"
			if subjectMatches(subjects.ScheduleAll, m.Subject()) {
				what = "admitted, deferred by a scheduled message"
			}
			return []idStep{{id: msgID, Step: Step{What: what}}}
		}
	case subjects.StreamDispatch:
		return matchDispatch(m, msgID, want)
	case subjects.StreamHandoffs:
		return matchHandoff(m, want)
	case subjects.StreamResults:
		return matchResult(m, want)
	case subjects.StreamEvents:
		return matchEvents(m, want)
	case subjects.StreamDLQ:
		return matchDeadLetter(m, msgID, want)
	}
	return nil
}

// matchDispatch reads a dispatch: to which worker, which attempt, and for
// a split request's leg, where its other half runs.
func matchDispatch(m jetstream.Msg, msgID string, want map[string]bool) []idStep {
	// A dispatch's msg id is "<request id>-a<attempt>", with "-p" or
	// "-d" after it for a split request's prefill or decode leg.
	id, attempt, leg, ok := parseDispatchMsgID(msgID)
	if !ok || !want[id] {
		return nil
	}
	worker, _ := subjects.ParseDispatch(m.Subject())
	what := fmt.Sprintf("dispatched to %s, attempt %s", worker, attempt)
	if leg != "" {
		what = fmt.Sprintf("%s leg dispatched to %s, attempt %s", leg, worker, attempt)
		var d schemas.Dispatch
		if err := decodeAny(m.Headers(), m.Data(), &d); err == nil {
			switch {
			case leg == schemas.PhasePrefill && d.DecodeWorker != "":
				what += ", decode planned on " + d.DecodeWorker
			case leg == schemas.PhaseDecode && d.Handoff != nil:
				what += fmt.Sprintf(", KV from %s (transfer %.3f s)", d.Handoff.Worker, d.TransferSeconds)
			}
		}
	}
	return []idStep{{id: id, Step: Step{What: what}}}
}

// matchHandoff reads a KV handle between a prefill and a decode worker,
// or the decode side's report that pulling it failed.
func matchHandoff(m jetstream.Msg, want map[string]bool) []idStep {
	id, ok := handoffID(m.Subject())
	if !ok || !want[id] {
		return nil
	}
	what := "KV handle"
	var kv schemas.KVHandle
	if err := decodeAny(m.Headers(), m.Data(), &kv); err == nil {
		if kv.Failed != nil {
			what = fmt.Sprintf("KV pull failed on %s, attempt %d: %s", kv.DecodeWorker, kv.Attempt, kv.Failed.Message)
		} else {
			what = fmt.Sprintf("KV handle from %s for %s, attempt %d: %d blocks, %d prompt tokens (%d cached), held until %s",
				kv.Worker, kv.DecodeWorker, kv.Attempt, kv.Blocks, kv.PromptTokens, kv.CachedTokens, kv.ExpiresAt.UTC().Format("15:04:05.000"))
		}
	}
	return []idStep{{id: id, Step: Step{What: what}}}
}

// matchResult reads a result: its status, its error and the worker that
// sent it.
func matchResult(m jetstream.Msg, want map[string]bool) []idStep {
	_, id, err := subjects.ParseResult(m.Subject())
	if err != nil || !want[id] {
		return nil
	}
	what := "result"
	if r, err := bus.DecodeResult(m.Headers(), m.Data()); err == nil {
		what = "result " + r.Status
		if r.Error != nil {
			what += " (" + r.Error.Code + ": " + r.Error.Message + ")"
		}
		if r.WorkerID != "" {
			what += " from " + r.WorkerID
		}
	}
	return []idStep{{id: id, Step: Step{What: what}}}
}

// matchEvents reads a batch of events, which may be about several wanted
// requests.
func matchEvents(m jetstream.Msg, want map[string]bool) []idStep {
	evs, err := bus.DecodeEvents(m.Headers(), m.Data())
	if err != nil {
		return nil
	}
	var out []idStep
	for _, e := range evs {
		if !want[e.RequestID] {
			continue
		}
		what := fmt.Sprintf("event %s.%s", e.Service, e.Kind)
		if e.WorkerID != "" {
			what += " on " + e.WorkerID
		}
		if e.Reason != "" {
			what += ": " + e.Reason
		}
		out = append(out, idStep{id: e.RequestID, Step: Step{What: what}})
	}
	return out
}

// matchDeadLetter reads a dead-lettered message, which carries the
// original's msg id or mentions the request in its body.
func matchDeadLetter(m jetstream.Msg, msgID string, want map[string]bool) []idStep {
	data := string(m.Data())
	for id := range want {
		if id != "" && (msgID == id || strings.Contains(data, id)) {
			return []idStep{{id: id, Step: Step{What: "dead-lettered: " + m.Headers().Get(subjects.HeaderDLQReason)}}}
		}
	}
	return nil
}

// parseDispatchMsgID splits a dispatch's Nats-Msg-Id,
// "<id>-a<attempt>[-p|-d]", into the request id, the attempt and the leg
// (schemas.PhasePrefill, PhaseDecode, or "" for a whole request).
func parseDispatchMsgID(msgID string) (id, attempt, leg string, ok bool) {
	switch {
	case strings.HasSuffix(msgID, "-p"):
		leg, msgID = schemas.PhasePrefill, strings.TrimSuffix(msgID, "-p")
	case strings.HasSuffix(msgID, "-d"):
		leg, msgID = schemas.PhaseDecode, strings.TrimSuffix(msgID, "-d")
	}
	i := strings.LastIndex(msgID, "-a")
	if i <= 0 {
		return "", "", "", false
	}
	return msgID[:i], msgID[i+2:], leg, true
}

// handoffID is the request id of sy.handoff.<tenant>.<id>.
func handoffID(subject string) (string, bool) {
	t := strings.Split(subject, ".")
	if len(t) != 4 || t[0] != subjects.Prefix || t[1] != "handoff" {
		return "", false
	}
	return t[3], true
}

// decodeAny decodes a message body by its Content-Type.
func decodeAny(h nats.Header, data []byte, v any) error {
	f, err := schemas.FormatFromContentType(h.Get(schemas.HeaderContentType))
	if err != nil {
		return err
	}
	return schemas.Unmarshal(f, data, v)
}

// matchesAny reports whether subject matches one of the NATS filter
// subjects (with * and > wildcards); no filters match everything.
func matchesAny(filters []string, subject string) bool {
	if len(filters) == 0 {
		return true
	}
	for _, f := range filters {
		if subjectMatches(f, subject) {
			return true
		}
	}
	return false
}

func subjectMatches(filter, subject string) bool {
	ft, st := strings.Split(filter, "."), strings.Split(subject, ".")
	for i, t := range ft {
		if t == ">" {
			return len(st) > i
		}
		if i >= len(st) || (t != "*" && t != st[i]) {
			return false
		}
	}
	return len(ft) == len(st)
}

// Format writes one id's trail as lines a person reads, oldest first
// within each stream.
func Format(id string, steps []Step) string {
	var b strings.Builder
	if len(steps) == 0 {
		fmt.Fprintf(&b, "%s: no stored message names it (never acknowledged by the SUBMIT stream, or aged out)\n", id)
		return b.String()
	}
	sorted := append([]Step(nil), steps...)
	sort.SliceStable(sorted, func(i, j int) bool { return sorted[i].At.Before(sorted[j].At) })
	fmt.Fprintf(&b, "%s:\n", id)
	for _, s := range sorted {
		ack := ""
		if s.Acked != "" {
			ack = " [acked: " + s.Acked + "]"
		}
		fmt.Fprintf(&b, "  %s  %-8s #%-7d %s%s\n", s.At.UTC().Format("15:04:05.000"), s.Stream, s.Seq, s.What, ack)
	}
	return b.String()
}
