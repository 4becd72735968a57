package faulttest

import (
	"context"
	"strings"
	"testing"
	"time"
)

// TestNATSNodeKill: the system on a three-node JetStream cluster, every
// stream, KV bucket and consumer R3, every service given all three URLs.
// SIGKILL one node mid-load and nothing acknowledged is lost: no request
// lost, none answered twice. Two victims: a follower (of the non-leaders,
// the node with the fewest of the system's client connections, so the
// test measures the streams' failover rather than the clients'
// reconnects), and the JetStream meta leader itself, whose death also
// stalls every stream and consumer create or update until the two
// survivors elect a new one.
func TestNATSNodeKill(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the system as separate processes")
	}
	cases := []struct {
		name       string
		metaLeader bool
	}{
		{name: "follower"},
		{name: "meta leader", metaLeader: true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 150*time.Second)
			defer cancel()
			s := launch(ctx, t, sysConfig{natsNodes: 3, admitters: 1, routers: 1, workers: 3})
			_, js := s.observer()
			// A node's death moves every stream leader it held; on a loaded
			// 2-core machine those elections can stall the pipeline longer
			// than a request's deadline + 5 s. What this test proves is that
			// nothing acknowledged is lost, so answers are awaited well past
			// the deadline.
			lg := s.loadgen(10, 10*time.Second, "--past-deadline", "35s")
			time.Sleep(3 * time.Second)
			meta := s.nodes[0].metaLeader()
			victim := pickNATSVictim(t, s.nodes, meta, tc.metaLeader)
			if victim == nil {
				t.Fatalf("no node to kill (meta leader %q)", meta)
			}
			victim.Kill()
			t.Logf("SIGKILL NATS node %s (meta leader %s)", victim.name, meta)
			sum := summary(ctx, t, lg)
			if sum.Lost != 0 || sum.Duplicates != 0 || !sum.Check() || sum.Completed == 0 {
				t.Fatalf("after a NATS node kill: %+v; want lost 0, duplicates 0, completed > 0, counts adding up", sum)
			}
			for _, p := range append(append(append([]*Proc{}, s.admitters...), s.routers...), s.workers...) {
				if p.Exited() {
					t.Errorf("%s exited after the node kill:\n%s", p.Name, p.Tail(10))
				}
			}
			if tc.metaLeader {
				var after string
				for _, nd := range s.nodes {
					if nd != victim {
						after = nd.metaLeader()
						break
					}
				}
				if after == "" || after == victim.name {
					t.Errorf("meta leader after the kill: %q; want one of the survivors", after)
				}
				t.Logf("meta leader moved %s -> %s", meta, after)
			}
			rec := s.recorded(ctx, js)
			if n := rec.streamDuplicates(); n != 0 {
				t.Fatalf("%d request ids have more than one result on the RESULTS stream", n)
			}
			t.Logf("results on the stream: %d for %d submitted; errors by code: %v", len(rec.results), sum.Submitted, sum.ErrorsByCode)
			if lg.Contains("never acknowledged") {
				// Only acknowledged submissions are owed an answer; the client
				// saw these fail and would resubmit them (same id, deduped).
				t.Logf("loadgen: %s", lastMatching(lg, "never acknowledged"))
			}
		})
	}
}

// pickNATSVictim is the meta leader when metaLeader is set; otherwise the
// non-leader with the fewest service and loadgen connections.
func pickNATSVictim(t *testing.T, nodes []*natsNode, meta string, metaLeader bool) *natsNode {
	t.Helper()
	var victim *natsNode
	best := 1 << 30
	for _, nd := range nodes {
		n := 0
		for _, c := range nd.clients() {
			if !strings.HasPrefix(c, "faulttest") {
				n++
			}
		}
		t.Logf("node %s: %d service/loadgen connections%s", nd.name, n, map[bool]string{true: ", meta leader"}[nd.name == meta])
		if metaLeader {
			if nd.name == meta {
				return nd
			}
			continue
		}
		score := n
		if nd.name == meta {
			score += 1000
		}
		if score < best {
			best, victim = score, nd
		}
	}
	return victim
}

// lastMatching is the last log line of p holding s.
func lastMatching(p *Proc, s string) string {
	lines := strings.Split(p.Tail(50), "\n")
	for i := len(lines) - 1; i >= 0; i-- {
		if strings.Contains(lines[i], s) {
			return lines[i]
		}
	}
	return ""
}
