package router

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/switchyard-ai/switchyard/internal/core/catalog"
	"github.com/switchyard-ai/switchyard/internal/core/perf"
	"github.com/switchyard-ai/switchyard/internal/core/routing"
	"github.com/switchyard-ai/switchyard/internal/testkit/bustest"
	"github.com/switchyard-ai/switchyard/schemas"
	"github.com/switchyard-ai/switchyard/services/svc"
)

// fakeMsg is one delivery of an admitted message.
type fakeMsg struct {
	stream   string
	seq, dc  uint64
	acked    bool
	progress int
}

func (m *fakeMsg) Metadata() (*jetstream.MsgMetadata, error) {
	return &jetstream.MsgMetadata{Stream: m.stream, Sequence: jetstream.SequencePair{Stream: m.seq}, NumDelivered: m.dc}, nil
}
func (m *fakeMsg) Data() []byte                     { return nil }
func (m *fakeMsg) Headers() nats.Header             { return nil }
func (m *fakeMsg) Subject() string                  { return "" }
func (m *fakeMsg) Reply() string                    { return "" }
func (m *fakeMsg) Ack() error                       { m.acked = true; return nil }
func (m *fakeMsg) DoubleAck(context.Context) error  { m.acked = true; return nil }
func (m *fakeMsg) Nak() error                       { return nil }
func (m *fakeMsg) NakWithDelay(time.Duration) error { return nil }
func (m *fakeMsg) InProgress() error                { m.progress++; return nil }
func (m *fakeMsg) Term() error                      { return nil }
func (m *fakeMsg) TermWithReason(string) error      { return nil }

// A request the router holds unplaced lives only in its memory until it is
// dispatched: a redelivery of its admitted message must not be acked (a
// crash would lose it), only a second stream message for the same id is.
func TestDuplicateDeliveryOfAHeldRequest(t *testing.T) {
	env := bustest.Start(t)
	sh, err := svc.New("router", "r1", env.NC, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name          string
		dup           *fakeMsg
		wantDupAcked  bool
		wantHeldIsDup bool
	}{
		{"a redelivery of the held message", &fakeMsg{stream: "ADMITTED", seq: 7, dc: 2}, false, true},
		{"another message with the same id", &fakeMsg{stream: "ADMITTED", seq: 9, dc: 1}, true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := New(sh, Config{Cost: perf.NewPredictor(catalog.Default())})
			held := &fakeMsg{stream: "ADMITTED", seq: 7, dc: 1}
			adm := schemas.Admitted{Tenant: "acme", Model: "no-such-model", Priority: schemas.PriorityStandard,
				Request: schemas.Request{ID: "req-1", MaxTokens: 8}, SubmittedAt: time.Now(), Deadline: time.Now().Add(time.Minute)}
			// The first delivery is held (no worker serves the model yet),
			// the second is a duplicate of it.
			r.apply(context.Background(), routing.Input{Kind: routing.InAdmitted, Admitted: &adm}, held)
			r.apply(context.Background(), routing.Input{Kind: routing.InAdmitted, Admitted: &adm}, tc.dup)
			var dupAct *routing.Action
			for i := range r.effects {
				if e := r.effects[i]; e.act.Kind == routing.ActDuplicate {
					dupAct = &e.act
					r.do(context.Background(), e.in, e.act)
				}
			}
			if dupAct == nil {
				t.Fatalf("no duplicate action among %+v", r.effects)
			}
			if held.acked {
				t.Fatal("the held delivery was acked")
			}
			if tc.dup.acked != tc.wantDupAcked {
				t.Fatalf("duplicate acked = %v, want %v", tc.dup.acked, tc.wantDupAcked)
			}
			var h *routing.Held
			r.core.Each(func(x *routing.Held) { h = x })
			if h == nil {
				t.Fatal("the request is no longer held")
			}
			if got := h.Handle.(jetstream.Msg) == jetstream.Msg(tc.dup); got != tc.wantHeldIsDup {
				t.Fatalf("held handle is the duplicate = %v, want %v", got, tc.wantHeldIsDup)
			}
		})
	}
}
