package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"slices"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/switchyard-ai/switchyard/internal/adapter/bus"
	gw "github.com/switchyard-ai/switchyard/internal/adapter/gateway"
	"github.com/switchyard-ai/switchyard/schemas"
	"github.com/switchyard-ai/switchyard/services/client"
	"github.com/switchyard-ai/switchyard/services/gateway"
	"github.com/switchyard-ai/switchyard/subjects"
)

// GatewayBenchResult is `switchyard bench gateway --json`'s last line.
// Overhead is the gateway's latency minus a direct NATS client's at the
// same percentile, both measured in the same run against the same
// instant backend: what HTTP, JSON mapping and the gateway's own
// subscriptions add to a request.
type GatewayBenchResult struct {
	GatewayReqPerS float64 `json:"gateway_req_per_s"`
	DirectReqPerS  float64 `json:"direct_req_per_s"`
	OverheadP50Ms  float64 `json:"overhead_p50_ms"`
	OverheadP99Ms  float64 `json:"overhead_p99_ms"`
	GatewayP50Ms   float64 `json:"gateway_p50_ms"`
	GatewayP99Ms   float64 `json:"gateway_p99_ms"`
	DirectP50Ms    float64 `json:"direct_p50_ms"`
	DirectP99Ms    float64 `json:"direct_p99_ms"`
	Concurrency    int     `json:"concurrency"`
	Stream         bool    `json:"stream"`
}

// runBenchGateway measures HTTP → bus → HTTP with an instant backend
// against a direct NATS client's submit → result round trip.
func runBenchGateway(ctx context.Context, args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("bench gateway", flag.ContinueOnError)
	duration := fs.Duration("duration", 5*time.Second, "how long each side (gateway, direct) runs")
	conc := fs.Int("concurrency", 4, "requests in flight on each side")
	stream := fs.Bool("stream", false, "gateway requests use stream: true (SSE)")
	asJSON := fs.Bool("json", false, "print the result as one JSON line last")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *conc < 1 || *duration <= 0 {
		return errors.New("--concurrency must be >= 1 and --duration > 0")
	}
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	srv, err := bus.StartServer(bus.ServerConfig{})
	if err != nil {
		return err
	}
	defer srv.Shutdown()
	conns := map[string]*nats.Conn{}
	for _, name := range []string{"bench-provision", "bench-backend", "bench-gateway", "bench-direct"} {
		nc, err := srv.Connect(name)
		if err != nil {
			return err
		}
		defer nc.Close()
		conns[name] = nc
	}
	js, err := bus.JetStream(conns["bench-provision"])
	if err != nil {
		return err
	}
	if err := subjects.Provision(ctx, js, subjects.StreamOptions{}); err != nil {
		return err
	}
	backend, err := gateway.StartInstant(conns["bench-backend"], gateway.InstantConfig{Logger: quiet})
	if err != nil {
		return err
	}
	defer backend.Stop()
	const key, tenant = "sk-bench", "bench"
	keys, err := gw.KeysFromMap(map[string]string{key: tenant})
	if err != nil {
		return err
	}
	g, err := gateway.New(ctx, gateway.Config{NC: conns["bench-gateway"], Keys: keys, Logger: quiet})
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	hs := &http.Server{Handler: g.Handler()}
	go hs.Serve(ln)
	defer hs.Close()
	url := "http://" + ln.Addr().String() + "/v1/chat/completions"
	hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: *conc, MaxConnsPerHost: *conc}}

	const prompt = "measure the gateway overhead"
	body, _ := json.Marshal(map[string]any{
		"model": "llama-3.1-8b", "max_tokens": 16, "stream": *stream,
		"messages": []map[string]string{{"role": "user", "content": prompt}},
	})
	viaGateway := func(ctx context.Context) error {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
		if err != nil {
			return err
		}
		req.Header.Set("Authorization", "Bearer "+key)
		req.Header.Set("Content-Type", "application/json")
		resp, err := hc.Do(req)
		if err != nil {
			return err
		}
		data, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			return err
		}
		if resp.StatusCode != http.StatusOK || !bytes.Contains(data, []byte("echo:")) {
			return fmt.Errorf("gateway answered %d: %.200s", resp.StatusCode, data)
		}
		return nil
	}
	dnc := conns["bench-direct"]
	cl, err := client.New(dnc, client.WithJSON())
	if err != nil {
		return err
	}
	// The direct side does what any NATS client does for one answer:
	// subscribe to the result subject, submit with an ack, wait.
	direct := func(ctx context.Context) error {
		id := client.NewID()
		ch := make(chan *nats.Msg, 1)
		sub, err := dnc.ChanSubscribe(subjects.Result(tenant, id), ch)
		if err != nil {
			return err
		}
		defer sub.Unsubscribe()
		req := schemas.Request{V: schemas.Version, ID: id, Model: "llama-3.1-8b", MaxTokens: 16,
			Messages: []schemas.Message{{Role: "user", Content: prompt}}}
		if _, err := cl.Submit(ctx, tenant, &req); err != nil {
			return err
		}
		select {
		case m := <-ch:
			res, err := client.DecodeResult(m.Header, m.Data)
			if err != nil {
				return err
			}
			if res.Status != schemas.StatusOK {
				return fmt.Errorf("direct result %s", res.Status)
			}
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}

	// A short warm-up fills connection pools and the JIT-free but
	// allocation-heavy first requests on both sides.
	if _, _, err := gwMeasure(ctx, 300*time.Millisecond, *conc, viaGateway); err != nil {
		return fmt.Errorf("gateway warm-up: %w", err)
	}
	if _, _, err := gwMeasure(ctx, 300*time.Millisecond, *conc, direct); err != nil {
		return fmt.Errorf("direct warm-up: %w", err)
	}
	dLat, dRate, err := gwMeasure(ctx, *duration, *conc, direct)
	if err != nil {
		return fmt.Errorf("direct: %w", err)
	}
	gLat, gRate, err := gwMeasure(ctx, *duration, *conc, viaGateway)
	if err != nil {
		return fmt.Errorf("gateway: %w", err)
	}
	ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
	r := GatewayBenchResult{
		GatewayReqPerS: gwRound2(gRate), DirectReqPerS: gwRound2(dRate),
		GatewayP50Ms: ms(gwPct(gLat, 50)), GatewayP99Ms: ms(gwPct(gLat, 99)),
		DirectP50Ms: ms(gwPct(dLat, 50)), DirectP99Ms: ms(gwPct(dLat, 99)),
		Concurrency: *conc, Stream: *stream,
	}
	r.OverheadP50Ms = gwRound3(r.GatewayP50Ms - r.DirectP50Ms)
	r.OverheadP99Ms = gwRound3(r.GatewayP99Ms - r.DirectP99Ms)
	fmt.Fprintf(stdout, "gateway bench: %s per side, %d in flight, instant backend, embedded NATS, stream=%v\n", *duration, *conc, *stream)
	fmt.Fprintf(stdout, "  %-8s %10s %10s %10s %10s\n", "path", "req/s", "p50 ms", "p99 ms", "requests")
	fmt.Fprintf(stdout, "  %-8s %10.0f %10.3f %10.3f %10d\n", "direct", dRate, r.DirectP50Ms, r.DirectP99Ms, len(dLat))
	fmt.Fprintf(stdout, "  %-8s %10.0f %10.3f %10.3f %10d\n", "gateway", gRate, r.GatewayP50Ms, r.GatewayP99Ms, len(gLat))
	fmt.Fprintf(stdout, "  overhead p50 %.3f ms, p99 %.3f ms\n", r.OverheadP50Ms, r.OverheadP99Ms)
	if *asJSON {
		b, _ := json.Marshal(r)
		fmt.Fprintln(stdout, string(b))
	}
	return nil
}

// gwMeasure runs fn from conc goroutines for d and returns each call's
// latency and the completed rate.
func gwMeasure(ctx context.Context, d time.Duration, conc int, fn func(context.Context) error) ([]time.Duration, float64, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		mu       sync.Mutex
		lats     []time.Duration
		firstErr error
		wg       sync.WaitGroup
	)
	start := time.Now()
	end := start.Add(d)
	for range conc {
		wg.Add(1)
		go func() {
			defer wg.Done()
			local := make([]time.Duration, 0, 4096)
			for time.Now().Before(end) && ctx.Err() == nil {
				t0 := time.Now()
				rctx, rcancel := context.WithTimeout(ctx, 10*time.Second)
				err := fn(rctx)
				rcancel()
				if err != nil {
					mu.Lock()
					if firstErr == nil {
						firstErr = err
					}
					mu.Unlock()
					cancel()
					return
				}
				local = append(local, time.Since(t0))
			}
			mu.Lock()
			lats = append(lats, local...)
			mu.Unlock()
		}()
	}
	wg.Wait()
	if firstErr != nil {
		return nil, 0, firstErr
	}
	elapsed := time.Since(start)
	slices.Sort(lats)
	return lats, float64(len(lats)) / elapsed.Seconds(), nil
}

func gwPct(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(float64(len(sorted)-1) * p / 100)
	return sorted[i]
}

func gwRound2(f float64) float64 { return float64(int64(f*100+0.5)) / 100 }
func gwRound3(f float64) float64 {
	if f < 0 {
		return -gwRound3(-f)
	}
	return float64(int64(f*1000+0.5)) / 1000
}
