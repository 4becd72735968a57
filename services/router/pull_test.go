package router

import (
	"context"
	"testing"
	"time"
)

// TestPacerSpacesPulls: a pull rate spaces messages at least 1/rate apart
// (an idle spell banks no burst), no rate never waits, and a cancelled
// context ends a wait.
func TestPacerSpacesPulls(t *testing.T) {
	ctx := context.Background()
	p := newPacer(100) // 10 ms apart
	start := time.Now()
	for range 6 {
		p.wait(ctx)
	}
	if took := time.Since(start); took < 50*time.Millisecond {
		t.Fatalf("six pulls at 100 a second took %s, want at least 50 ms (five intervals)", took)
	}
	time.Sleep(50 * time.Millisecond) // idle: no credit banked
	start = time.Now()
	p.wait(ctx)
	p.wait(ctx)
	if took := time.Since(start); took < 10*time.Millisecond {
		t.Fatalf("two pulls after an idle spell took %s, want at least one interval", took)
	}
	var none *pacer = newPacer(0)
	if none != nil {
		t.Fatal("a zero rate should not cap")
	}
	none.wait(ctx) // returns at once
	slow := newPacer(MinPullRate)
	slow.wait(ctx)
	cctx, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
	defer cancel()
	start = time.Now()
	slow.wait(cctx)
	if took := time.Since(start); took > 900*time.Millisecond {
		t.Fatalf("a cancelled wait took %s", took)
	}
}
