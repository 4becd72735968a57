package admitter

import (
	"log/slog"
	"testing"
	"time"

	"github.com/switchyard-ai/switchyard/internal/adapter/bus"
	"github.com/switchyard-ai/switchyard/internal/core/admission"
	"github.com/switchyard-ai/switchyard/internal/core/control"
	"github.com/switchyard-ai/switchyard/internal/testkit/waitfor"
	"github.com/switchyard-ai/switchyard/schemas"
	"github.com/switchyard-ai/switchyard/services/svc"
)

// TestShedMarginsFollowController publishes the controller's margins on
// the real server and checks they overlay the configured shedder's, class
// by class, and change what the shedder decides.
func TestShedMarginsFollowController(t *testing.T) {
	srv, err := bus.StartServer(bus.ServerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Shutdown()
	nc, err := srv.Connect("shed-test")
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	var s shedControl
	stop, err := s.follow(nc, slog.Default())
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	base := admission.Shedder{Margin: map[string]float64{schemas.PriorityBatch: 1.5, schemas.PriorityStandard: 1.2}}
	if got := s.shedder(base); got.Margin[schemas.PriorityBatch] != 1.5 {
		t.Fatalf("before any control message: batch margin %v", got.Margin[schemas.PriorityBatch])
	}
	for _, c := range []control.ShedMsg{
		{Class: schemas.PriorityBatch, Margin: 2.5, Reason: "test: tighten"},
		{Class: "", Margin: 9},                       // no class: ignored
		{Class: schemas.PriorityStandard, Margin: 0}, // no margin: ignored
	} {
		m, err := svc.Encode(control.ShedSubject(firstNonEmpty(c.Class, "x")), schemas.Msgpack, c, "")
		if err != nil {
			t.Fatal(err)
		}
		if err := nc.PublishMsg(m); err != nil {
			t.Fatal(err)
		}
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	waitfor.True(t, "the batch margin to follow the controller", 10*time.Second, func() bool { return s.shedder(base).Margin[schemas.PriorityBatch] == 2.5 })
	got := s.shedder(base)
	if got.Margin[schemas.PriorityStandard] != 1.2 || len(got.Margin) != 2 {
		t.Fatalf("margins %v: want standard kept at 1.2 and nothing else added", got.Margin)
	}
	if base.Margin[schemas.PriorityBatch] != 1.5 {
		t.Fatal("the configured margins were modified in place")
	}
	// A request whose predicted wait+service is 1.8 s against a 4 s budget
	// passes at 1.5× and is shed at 2.5×.
	now := time.Now()
	load := admission.Load{RequestsPerSec: 10}
	if v := base.Check(schemas.PriorityBatch, now, now.Add(4*time.Second), 1800*time.Millisecond, load); v.Shed {
		t.Fatalf("base shedder shed: %s", v.Reason)
	}
	if v := got.Check(schemas.PriorityBatch, now, now.Add(4*time.Second), 1800*time.Millisecond, load); !v.Shed {
		t.Fatal("controller's margin did not shed")
	}
}

func firstNonEmpty(a, b string) string {
	if a != "" {
		return a
	}
	return b
}
