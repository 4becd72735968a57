package svc

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/VictoriaMetrics/metrics"
)

// Registry collects the metric sets of the services running in one process
// so that one /metrics endpoint serves them all.
type Registry struct {
	mu   sync.Mutex
	sets []*metrics.Set
}

// Add registers a set.
func (r *Registry) Add(s *metrics.Set) {
	r.mu.Lock()
	r.sets = append(r.sets, s)
	r.mu.Unlock()
}

// WritePrometheus writes every set in the Prometheus text format, plus the
// Go process metrics.
func (r *Registry) WritePrometheus(w io.Writer) {
	r.mu.Lock()
	sets := append([]*metrics.Set(nil), r.sets...)
	r.mu.Unlock()
	for _, s := range sets {
		s.WritePrometheus(w)
	}
	metrics.WriteProcessMetrics(w)
}

// Serve serves /metrics and /healthz on addr until ctx ends. It returns the
// bound address (useful with ":0").
func (r *Registry) Serve(ctx context.Context, addr string) (string, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return "", fmt.Errorf("metrics listen %s: %w", addr, err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/metrics", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; version=0.0.4")
		r.WritePrometheus(w)
	})
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "ok\n") })
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() {
		<-ctx.Done()
		shutdownCtx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		srv.Shutdown(shutdownCtx)
	}()
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			fmt.Println("metrics server:", err)
		}
	}()
	return ln.Addr().String(), nil
}
