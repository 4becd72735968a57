package freeport

import (
	"net"
	"strconv"
	"testing"
)

// TestPortIsBelowTheEphemeralRangeAndBindable: the port is outside the
// range outgoing connections draw from, and a server can bind it.
func TestPortIsBelowTheEphemeralRangeAndBindable(t *testing.T) {
	top := ephemeralStart()
	for range 20 {
		addr, err := Addr()
		if err != nil {
			t.Fatal(err)
		}
		_, portStr, _ := net.SplitHostPort(addr)
		p, _ := strconv.Atoi(portStr)
		if p < lowest || p >= top {
			t.Fatalf("port %d outside [%d, %d)", p, lowest, top)
		}
		l, err := net.Listen("tcp", addr)
		if err != nil {
			t.Fatalf("bind %s: %v", addr, err)
		}
		l.Close()
	}
}

// TestPortSkipsABoundPort: a port someone listens on is never handed out.
func TestPortSkipsABoundPort(t *testing.T) {
	var held []net.Listener
	defer func() {
		for _, l := range held {
			l.Close()
		}
	}()
	taken := map[int]bool{}
	for range 50 {
		p, err := Port()
		if err != nil {
			t.Fatal(err)
		}
		if taken[p] {
			t.Fatalf("port %d handed out while a listener holds it", p)
		}
		l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p)))
		if err != nil {
			t.Fatalf("bind %d: %v", p, err)
		}
		held = append(held, l)
		taken[p] = true
	}
}
