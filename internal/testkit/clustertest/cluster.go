// Package clustertest owns Switchyard's NATS durability tests and the small
// harness they use: an in-process JetStream cluster of real nats-server
// nodes on loopback (distinct store dirs, cluster routes, R3 streams from
// subjects.Streams), and single-node restarts on the same store. The tests
// show that nothing JetStream acknowledged is lost when a node — the stream
// leader included — dies, or when a single server restarts.
package clustertest

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/switchyard-ai/switchyard/internal/adapter/freeport"
)

// Cluster is a JetStream cluster of in-process servers on loopback.
type Cluster struct {
	Nodes []*server.Server
}

// freePorts picks n distinct loopback ports outside the ephemeral range
// (see freeport); another explicit bind could still take one before the
// servers bind them.
func freePorts(n int) ([]int, error) {
	ports := make([]int, 0, n)
	seen := map[int]bool{}
	for len(ports) < n {
		p, err := freeport.Port()
		if err != nil {
			return nil, fmt.Errorf("reserve port: %w", err)
		}
		if !seen[p] {
			seen[p] = true
			ports = append(ports, p)
		}
	}
	return ports, nil
}

// StartCluster starts n JetStream servers routed to each other, each with
// its own store under dir, and waits until the cluster has a meta leader.
func StartCluster(ctx context.Context, n int, dir string) (*Cluster, error) {
	ports, err := freePorts(n)
	if err != nil {
		return nil, err
	}
	var routes []string
	for _, p := range ports {
		routes = append(routes, fmt.Sprintf("nats://127.0.0.1:%d", p))
	}
	c := &Cluster{}
	for i := 0; i < n; i++ {
		opts := &server.Options{
			ServerName: fmt.Sprintf("sy-n%d", i),
			Host:       "127.0.0.1",
			Port:       server.RANDOM_PORT,
			NoSigs:     true,
			NoLog:      true,
			JetStream:  true,
			StoreDir:   filepath.Join(dir, fmt.Sprintf("n%d", i)),
			// Bounded so three nodes fit a CI runner's disk and memory.
			JetStreamMaxStore:  1 << 30,
			JetStreamMaxMemory: 256 << 20,
			Cluster: server.ClusterOpts{
				Name: "switchyard",
				Host: "127.0.0.1",
				Port: ports[i],
			},
			Routes: server.RoutesFromStr(strings.Join(routes, ",")),
		}
		s, err := server.NewServer(opts)
		if err != nil {
			c.Shutdown()
			return nil, fmt.Errorf("node %d: %w", i, err)
		}
		go s.Start()
		c.Nodes = append(c.Nodes, s)
	}
	for i, s := range c.Nodes {
		if !s.ReadyForConnections(20 * time.Second) {
			c.Shutdown()
			return nil, fmt.Errorf("node %d not ready", i)
		}
	}
	for {
		if c.Leader() != nil {
			return c, nil
		}
		select {
		case <-ctx.Done():
			c.Shutdown()
			return nil, fmt.Errorf("no JetStream meta leader: %w", ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// Leader returns the running node that is JetStream meta leader, or nil.
func (c *Cluster) Leader() *server.Server {
	for _, s := range c.Nodes {
		if s != nil && s.Running() && s.JetStreamIsLeader() {
			return s
		}
	}
	return nil
}

// StreamLeader returns the index of the running node leading stream (in
// the global account), or -1.
func (c *Cluster) StreamLeader(stream string) int {
	for i, s := range c.Nodes {
		if s != nil && s.Running() && s.JetStreamIsStreamLeader(server.DEFAULT_GLOBAL_ACCOUNT, stream) {
			return i
		}
	}
	return -1
}

// URLs are the client URLs of the running nodes, comma-separated, for
// nats.Connect.
func (c *Cluster) URLs() string {
	var urls []string
	for _, s := range c.Nodes {
		if s != nil && s.Running() {
			urls = append(urls, s.ClientURL())
		}
	}
	return strings.Join(urls, ",")
}

// Connect dials every node; the client fails over between them.
func (c *Cluster) Connect(name string) (*nats.Conn, error) {
	nc, err := nats.Connect(c.URLs(), nats.Name(name), nats.MaxReconnects(-1), nats.ReconnectWait(100*time.Millisecond))
	if err != nil {
		return nil, fmt.Errorf("connect %s: %w", name, err)
	}
	return nc, nil
}

// Kill shuts node i down (its store stays on disk).
func (c *Cluster) Kill(i int) {
	if s := c.Nodes[i]; s != nil {
		s.Shutdown()
		s.WaitForShutdown()
		c.Nodes[i] = nil
	}
}

// Shutdown stops every node.
func (c *Cluster) Shutdown() {
	for i := range c.Nodes {
		c.Kill(i)
	}
}
