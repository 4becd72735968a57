package faulttest

import (
	"context"
	"testing"
	"time"
)

// TestAdmitterKill: two admitters share one durable SUBMIT consumer;
// SIGKILL one mid-load. What it held unacked is redelivered to the other
// after the consumer's AckWait; nothing is lost or answered twice.
func TestAdmitterKill(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the system as separate processes")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	s := launch(ctx, t, sysConfig{natsNodes: 1, admitters: 2, routers: 1, workers: 3})
	_, js := s.observer()
	lg := s.loadgen(12, 8*time.Second)
	time.Sleep(3 * time.Second)
	victim, survivor := s.admitters[0], s.admitters[1]
	victim.Kill()
	t.Logf("SIGKILL %s 3s into the load", victim.Name)
	sum := summary(ctx, t, lg)
	if sum.Lost != 0 || sum.Duplicates != 0 || !sum.Check() || sum.Completed == 0 {
		t.Fatalf("after an admitter kill: %+v; want lost 0, duplicates 0, completed > 0, counts adding up", sum)
	}
	if survivor.Exited() {
		t.Fatalf("the surviving admitter exited:\n%s", survivor.Tail(20))
	}
	rec := s.recorded(ctx, js)
	if n := rec.streamDuplicates(); n != 0 {
		t.Fatalf("%d request ids have more than one result on the RESULTS stream", n)
	}
	t.Logf("errors by code: %v", sum.ErrorsByCode)
}
