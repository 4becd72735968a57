package gateway

import (
	"testing"

	"github.com/switchyard-ai/switchyard/internal/core/routing"
)

// TestDeadlineGraceOutwaitsTheRouter: by default the gateway waits past a
// deadline longer than the router takes to answer an overdue request
// itself, so an HTTP client gets the system's deadline_exceeded result
// rather than the gateway's own 504 before it.
func TestDeadlineGraceOutwaitsTheRouter(t *testing.T) {
	if g := (Config{}).withDefaults().DeadlineGrace; g <= routing.OverdueGrace {
		t.Fatalf("gateway deadline grace %v, router overdue grace %v: the gateway gives up first", g, routing.OverdueGrace)
	}
}
