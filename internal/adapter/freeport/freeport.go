// Package freeport owns how the tests and the chaos drill pick loopback
// ports for servers they start later, often in another process.
//
// A port from listening on ":0" comes from the kernel's ephemeral range,
// the same range every outgoing connection takes its local port from, so
// between the test closing its probe listener and the server binding, a
// NATS client or HTTP request anywhere on the host can take it ("bind:
// address already in use", seen on CI). Ports here are drawn below the
// ephemeral range, where only another explicit bind can collide, and
// checked free before they are handed out.
package freeport

import (
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
)

// lowest is the bottom of the range ports are drawn from: above the
// registered services most hosts run.
const lowest = 20000

// Port returns a loopback TCP port that is free now and outside the
// ephemeral range.
func Port() (int, error) {
	top := ephemeralStart()
	for range 200 {
		p := lowest + rand.IntN(top-lowest)
		l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p)))
		if err != nil {
			continue
		}
		l.Close()
		return p, nil
	}
	return 0, fmt.Errorf("freeport: no free port in [%d, %d) after 200 tries", lowest, top)
}

// Addr is Port as "127.0.0.1:port".
func Addr() (string, error) {
	p, err := Port()
	if err != nil {
		return "", err
	}
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(p)), nil
}

// ephemeralStart is the first port of the kernel's ephemeral range, read
// once: Linux publishes it; where it cannot be read (or is implausibly
// low) Linux's default, 32768, is assumed, which is also below the IANA
// range other systems use.
var ephemeralStart = sync.OnceValue(func() int {
	const linuxDefault = 32768
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return linuxDefault
	}
	fields := strings.Fields(string(b))
	if len(fields) == 0 {
		return linuxDefault
	}
	start, err := strconv.Atoi(fields[0])
	if err != nil || start <= lowest+1000 {
		return linuxDefault
	}
	return start
})
