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
