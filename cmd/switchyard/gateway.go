package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"time"

	gw "github.com/switchyard-ai/switchyard/internal/adapter/gateway"
	"github.com/switchyard-ai/switchyard/services/gateway"
)

// runGateway serves the OpenAI-compatible HTTP API against --nats URL.
// It keeps no state of its own, so run as many as the HTTP load needs
// behind any load balancer.
func runGateway(ctx context.Context, args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("gateway", flag.ContinueOnError)
	var f serviceFlags
	f.register(fs, hostID("gateway"))
	listen := fs.String("listen", "127.0.0.1:8080", "HTTP listen address (loopback by default; 0.0.0.0:8080 to serve other hosts)")
	tenants := fs.String("tenants", "", "tenant config JSON; its api_keys object {key: tenant} authenticates requests (required)")
	maxTokens := fs.Int("max-tokens", gw.DefaultMaxTokens, "max_tokens for requests that set none")
	maxWait := fs.Duration("max-wait", 10*time.Minute, "longest wait for a result when a request sets no deadline")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *tenants == "" {
		return errors.New("--tenants FILE is required: the gateway maps API keys to tenants through its api_keys object")
	}
	keys, err := gw.LoadKeys(*tenants)
	if err != nil {
		return err
	}
	if keys.Len() == 0 {
		return fmt.Errorf("%s has no api_keys: every request would be refused", *tenants)
	}
	sh, cat, err := f.connect(ctx, "gateway")
	if err != nil {
		return err
	}
	defer sh.NC.Drain()
	srv, err := gateway.New(ctx, gateway.Config{
		NC: sh.NC, Keys: keys, Models: cat.Models(), Logger: sh.Log,
		DefaultMaxTokens: *maxTokens, MaxWait: *maxWait, Metrics: sh.Metrics,
	})
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		return fmt.Errorf("gateway listen: %w", err)
	}
	hs := &http.Server{Handler: srv.Handler(), ReadHeaderTimeout: 10 * time.Second}
	fmt.Fprintf(stdout, "gateway: OpenAI-compatible API on http://%s/v1 (%d API keys, NATS %s)\n", ln.Addr(), keys.Len(), f.natsURL)
	errc := make(chan error, 1)
	go func() { errc <- hs.Serve(ln) }()
	select {
	case err := <-errc:
		return fmt.Errorf("gateway serve: %w", err)
	case <-ctx.Done():
	}
	// Let in-flight answers finish; a stream still open when this times
	// out is cut, and its request is cancelled on the bus by the handler.
	sctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	if err := hs.Shutdown(sctx); err != nil {
		return fmt.Errorf("gateway shutdown: %w", err)
	}
	return nil
}
