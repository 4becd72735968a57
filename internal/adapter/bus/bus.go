// Package bus owns Switchyard's connection to NATS: an embedded JetStream
// server for the one-machine default and for tests, or an external server
// or cluster by URL, and the JetStream handle every service uses.
package bus

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"strconv"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/switchyard-ai/switchyard/schemas"
)

// DefaultURL is where the CLI looks for a running system by default: the
// address `switchyard up` and `switchyard nats` listen on.
const DefaultURL = "nats://127.0.0.1:4222"

// ServerConfig configures an embedded server.
type ServerConfig struct {
	// Listen is host:port for outside clients; empty means no TCP listener
	// (in-process connections only), ":0"-style ports pick a free port.
	Listen string
	// StoreDir is JetStream's file store; empty means a fresh temp dir that
	// is removed on Shutdown.
	StoreDir string
	// Memory selects memory storage limits suitable for tests.
	MaxMemory int64
	MaxStore  int64
	// HTTPPort enables the monitoring endpoint (/jsz, /varz) when > 0.
	HTTPPort   int
	ServerName string
	// ConfigFile, when set, is loaded as a nats-server config file first.
	ConfigFile string
	Logger     *slog.Logger
}

// Server is an embedded NATS server with JetStream.
type Server struct {
	NS      *server.Server
	tempDir string
}

// StartServer starts an embedded JetStream server and waits until it is
// ready for connections.
func StartServer(cfg ServerConfig) (*Server, error) {
	opts := &server.Options{}
	if cfg.ConfigFile != "" {
		o, err := server.ProcessConfigFile(cfg.ConfigFile)
		if err != nil {
			return nil, fmt.Errorf("nats config %s: %w", cfg.ConfigFile, err)
		}
		opts = o
	}
	opts.JetStream = true
	opts.NoSigs = true
	if opts.MaxPayload == 0 {
		opts.MaxPayload = schemas.MaxPayload // long prompts travel inline
	}
	if cfg.ServerName != "" {
		opts.ServerName = cfg.ServerName
	}
	if cfg.Listen == "" {
		opts.DontListen = true
	} else {
		host, port, err := net.SplitHostPort(cfg.Listen)
		if err != nil {
			return nil, fmt.Errorf("listen address %q: %w", cfg.Listen, err)
		}
		p, err := strconv.Atoi(port)
		if err != nil {
			return nil, fmt.Errorf("listen port %q: %w", port, err)
		}
		if p == 0 {
			p = server.RANDOM_PORT
		}
		opts.Host, opts.Port = host, p
	}
	if cfg.HTTPPort > 0 {
		opts.HTTPPort = cfg.HTTPPort
		opts.HTTPHost = "127.0.0.1"
	}
	s := &Server{}
	if cfg.StoreDir == "" && opts.StoreDir == "" {
		dir, err := os.MkdirTemp("", "switchyard-js-")
		if err != nil {
			return nil, fmt.Errorf("temp store dir: %w", err)
		}
		s.tempDir = dir
		opts.StoreDir = dir
	} else if cfg.StoreDir != "" {
		opts.StoreDir = cfg.StoreDir
	}
	if cfg.MaxMemory > 0 {
		opts.JetStreamMaxMemory = cfg.MaxMemory
	}
	if cfg.MaxStore > 0 {
		opts.JetStreamMaxStore = cfg.MaxStore
	}
	ns, err := server.NewServer(opts)
	if err != nil {
		s.cleanup()
		return nil, fmt.Errorf("new nats server: %w", err)
	}
	if cfg.Logger != nil && cfg.Logger.Enabled(context.Background(), slog.LevelDebug) {
		ns.ConfigureLogger()
	}
	go ns.Start()
	if !ns.ReadyForConnections(readyWithin) {
		ns.Shutdown()
		s.cleanup()
		return nil, fmt.Errorf("nats server not ready within %s", readyWithin)
	}
	s.NS = ns
	return s, nil
}

// readyWithin bounds a server's start. A cluster node on a loaded 2-core
// machine has taken more than 10 s (the faulttest suite's three-node
// cluster beside the rest of the suite and a busy core).
const readyWithin = 30 * time.Second

// ClientURL is the URL outside clients use; empty when not listening.
func (s *Server) ClientURL() string {
	if s.NS.Addr() == nil {
		return ""
	}
	return s.NS.ClientURL()
}

// Connect opens a client connection: in-process when the server does not
// listen, over TCP otherwise.
func (s *Server) Connect(name string, extra ...nats.Option) (*nats.Conn, error) {
	opts := append([]nats.Option{nats.Name(name), nats.InProcessServer(s.NS), nats.MaxReconnects(-1), nats.ErrorHandler(AsyncErrorLogger(slog.Default(), name))}, extra...)
	nc, err := nats.Connect("", opts...)
	if err != nil {
		return nil, fmt.Errorf("in-process connect %s: %w", name, err)
	}
	return nc, nil
}

// Shutdown stops the server and removes a temp store dir.
func (s *Server) Shutdown() {
	if s.NS != nil {
		s.NS.Shutdown()
		s.NS.WaitForShutdown()
	}
	s.cleanup()
}

func (s *Server) cleanup() {
	if s.tempDir != "" {
		os.RemoveAll(s.tempDir)
		s.tempDir = ""
	}
}

// Dial connects to an external server or cluster. It retries the first
// connection for up to wait so services can start before NATS does.
func Dial(ctx context.Context, url, name string, wait time.Duration, extra ...nats.Option) (*nats.Conn, error) {
	opts := append([]nats.Option{
		nats.Name(name),
		nats.MaxReconnects(-1),
		nats.ReconnectWait(250 * time.Millisecond),
		nats.RetryOnFailedConnect(false),
		nats.ErrorHandler(AsyncErrorLogger(slog.Default(), name)),
	}, extra...)
	deadline := time.Now().Add(wait)
	for {
		nc, err := nats.Connect(url, opts...)
		if err == nil {
			return nc, nil
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("connect %s to %s: %w", name, url, err)
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// AsyncErrorLogger logs the errors NATS reports out of band on a
// connection, which nats.go otherwise prints nowhere: above all a slow
// consumer — a subscription whose handler fell behind past its pending
// limits (nats.go's 512Ki messages / 64 MiB by default) has messages
// dropped, which for a core subscription (heartbeats, results, tokens) is
// data lost silently. nats.go reports a slow consumer once until it
// catches up, so each episode is one line. A later option replaces it
// (tests that collect permission violations pass their own).
func AsyncErrorLogger(log *slog.Logger, conn string) nats.ErrHandler {
	return func(_ *nats.Conn, sub *nats.Subscription, err error) {
		if sub == nil {
			log.Warn("nats async error", "conn", conn, "err", err)
			return
		}
		msgs, bytes, _ := sub.Pending()
		dropped, _ := sub.Dropped()
		if errors.Is(err, nats.ErrSlowConsumer) {
			log.Warn("slow consumer: the subscription's handler fell behind and NATS dropped messages",
				"conn", conn, "subject", sub.Subject, "pending_msgs", msgs, "pending_bytes", bytes, "dropped", dropped)
			return
		}
		log.Warn("nats async error", "conn", conn, "subject", sub.Subject, "err", err)
	}
}

// JetStream wraps nc with a bounded async-publish window: the NATS field
// lesson is that a publisher outrunning acks starves consumers.
func JetStream(nc *nats.Conn) (jetstream.JetStream, error) {
	js, err := jetstream.New(nc, jetstream.WithPublishAsyncMaxPending(1024))
	if err != nil {
		return nil, fmt.Errorf("jetstream: %w", err)
	}
	return js, nil
}
