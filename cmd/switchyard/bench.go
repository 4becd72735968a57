package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"github.com/switchyard-ai/switchyard/internal/core/stats"
	"io"
	"math"
	"os"
	"runtime"
	"runtime/pprof"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/switchyard-ai/switchyard/internal/adapter/bus"
	"github.com/switchyard-ai/switchyard/schemas"
	"github.com/switchyard-ai/switchyard/services/client"
	"github.com/switchyard-ai/switchyard/services/stack"
	"github.com/switchyard-ai/switchyard/subjects"
)

// runBench dispatches `switchyard bench <what>`.
func runBench(ctx context.Context, args []string, stdout io.Writer) error {
	benches := map[string]func(context.Context, []string, io.Writer) error{
		"bus":       runBenchBus,
		"placement": runBenchPlacement,
		"gateway":   runBenchGateway,
		"engine":    runBenchEngine,
	}
	if len(args) == 0 {
		names := make([]string, 0, len(benches))
		for n := range benches {
			names = append(names, n)
		}
		sort.Strings(names)
		return fmt.Errorf("usage: switchyard bench <%v> [flags]", names)
	}
	fn, ok := benches[args[0]]
	if !ok {
		return fmt.Errorf("unknown bench %q", args[0])
	}
	return fn(ctx, args[1:], stdout)
}

// BusResult is `switchyard bench bus --json`'s last line.
type BusResult struct {
	RawJSPublishPerS float64 `json:"raw_js_publish_per_s"`
	PipelinePerS     float64 `json:"pipeline_req_per_s"`
	Ratio            float64 `json:"ratio"`
	OverheadP50Ms    float64 `json:"overhead_p50_ms"`
	OverheadP99Ms    float64 `json:"overhead_p99_ms"`
	Requests         int     `json:"requests"`
	Workers          int     `json:"workers"`
	// Routers is how many routers placed: one leased router, or that many
	// active-active peers.
	Routers int `json:"routers"`
	// Rate is --rate, the requests per second offered (0: closed loop).
	Rate float64 `json:"rate"`
	// The process's CPU time (user + system: server, services and client
	// are all in it) per pipeline request and per raw publish. On a shared
	// machine they move less than the rates do, and the pipeline is
	// CPU-bound here: cpu_ratio = raw CPU per message / pipeline CPU per
	// request is what the throughput ratio tends to when both halves get
	// the same cores.
	// MaxResultGapMs is the longest the measured half went without a
	// result: a stalled consumer shows here before it shows as a timeout.
	MaxResultGapMs      float64 `json:"max_result_gap_ms"`
	PipelineCPUUsPerReq float64 `json:"pipeline_cpu_us_per_req"`
	RawCPUUsPerMsg      float64 `json:"raw_cpu_us_per_msg"`
	CPURatio            float64 `json:"cpu_ratio"`
	// StoredPerReq is the messages the pipeline half stored per request,
	// each stream's share in StoredByStream (its last sequence's advance,
	// so a stream's limits cannot hide a write); ProtocolMsgsPerReq is the
	// server's messages in and out per request, stored or not: publishes,
	// deliveries, acks, pulls, heartbeats and peer bookings alike.
	StoredPerReq       float64            `json:"stored_msgs_per_req"`
	StoredByStream     map[string]float64 `json:"stored_by_stream"`
	ProtocolMsgsPerReq float64            `json:"protocol_msgs_per_req"`
	// IdleCPUMsPerS is the CPU the stack spent per second with nothing in
	// flight, measured just before the pipeline half: heartbeats, ticks,
	// pulls, membership. It is in pipeline_cpu_us_per_req too, and weighs
	// the more there the fewer requests a loaded machine lets through;
	// BusyCPUUsPerReq is the CPU per request with it taken out.
	IdleCPUMsPerS   float64 `json:"idle_cpu_ms_per_s"`
	BusyCPUUsPerReq float64 `json:"busy_cpu_us_per_req"`
	// ProtocolByConn (with --by-conn) splits protocol_msgs_per_req by the
	// client connection that sent ("<name> in") or received ("<name> out")
	// them, per request: which service's traffic a cut would remove.
	ProtocolByConn map[string]float64 `json:"protocol_msgs_by_conn,omitempty"`
}

// runBenchBus measures, on one embedded server in one run, the raw
// JetStream async publish rate (the baseline) and the whole pipeline —
// submit → admit → place → dispatch → result — with instant workers, so
// the ratio isolates the control plane's own cost.
func runBenchBus(ctx context.Context, args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("bench bus", flag.ContinueOnError)
	duration := fs.Duration("duration", 10*time.Second, "measurement time for each half")
	workers := fs.Int("workers", 4, "instant workers")
	routers := fs.Int("routers", 1, "routers: 1 (one leased router) or more active-active peers, each with its own connection")
	inflight := fs.Int("inflight", 256, "requests in flight in the pipeline half")
	rate := fs.Float64("rate", 0, "submit at most this many requests per second (0: as fast as results return); a fixed rate compares builds and router counts at the same load, where a closed loop gives each the throughput its share of a busy machine allows")
	jsonOut := fs.Bool("json", false, "end with one JSON line")
	cpuProfile := fs.String("cpuprofile", "", "write a CPU profile of the pipeline half here")
	memProfile := fs.String("memprofile", "", "write a heap profile here whose alloc_space/alloc_objects cover the pipeline half only")
	byConn := fs.Bool("by-conn", false, "also split the server's messages per request by client connection (protocol_msgs_by_conn)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *routers < 1 {
		return fmt.Errorf("bench bus: --routers %d: want 1 or more", *routers)
	}
	if *rate < 0 || math.IsNaN(*rate) || math.IsInf(*rate, 0) {
		return fmt.Errorf("bench bus: --rate %v: want a finite rate >= 0", *rate)
	}
	if *inflight < 1 {
		return fmt.Errorf("bench bus: --inflight %d: want 1 or more", *inflight)
	}
	st, cl, err := benchStack(ctx, stack.Config{Workers: *workers, InstantWorkers: true, Logger: newLogger(false), Routers: *routers}, "bench-client")
	if err != nil {
		return err
	}
	defer st.Close()
	var mu sync.Mutex
	sent := map[string]time.Time{}
	var lat []float64
	var lastResult time.Time
	var maxGap time.Duration
	done := make(chan struct{}, *inflight)
	rctx, stop := context.WithCancel(ctx)
	defer stop()
	go cl.Results(rctx, "bench", func(r schemas.Result) {
		mu.Lock()
		now := time.Now()
		if t0, ok := sent[r.ID]; ok {
			lat = append(lat, float64(now.Sub(t0).Microseconds())/1000)
			delete(sent, r.ID)
		}
		if !lastResult.IsZero() && len(sent) > 0 {
			maxGap = max(maxGap, now.Sub(lastResult))
		}
		lastResult = now
		mu.Unlock()
		done <- struct{}{}
	})
	idle0, idleStart := processCPU(), time.Now()
	time.Sleep(2 * time.Second)
	idlePerS := float64((processCPU() - idle0).Microseconds()) / 1000 / time.Since(idleStart).Seconds()
	for i := 0; i < *inflight; i++ {
		done <- struct{}{}
	}
	if *cpuProfile != "" {
		f, err := os.Create(*cpuProfile)
		if err != nil {
			return err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
		defer pprof.StopCPUProfile()
	}
	if *memProfile != "" {
		// Every allocation is sampled while the pipeline runs, and the
		// rate goes back to the default before the baseline, so the
		// profile's alloc_* totals are the pipeline's: allocations per
		// request are what GC pressure is made of.
		runtime.MemProfileRate = 4096
	}
	seq0, err := streamSeqs(ctx, st)
	if err != nil {
		return err
	}
	msgs0 := serverMsgs(st)
	var conns0 map[string][2]int64
	if *byConn {
		conns0 = connMsgs(st)
	}
	start := time.Now()
	cpu0 := processCPU()
	n := 0
	// One stall timer, reset per request: a time.After per request was
	// the bench client's own allocation and timer in the pipeline's CPU.
	const stallAfter = 10 * time.Second
	stall := time.NewTimer(stallAfter)
	defer stall.Stop()
	for time.Since(start) < *duration {
		if *rate > 0 {
			// Open loop at the given rate (still bounded by --inflight).
			if wait := time.Until(start.Add(time.Duration(float64(n) / *rate * float64(time.Second)))); wait > 0 {
				time.Sleep(wait)
			}
		}
		stall.Reset(stallAfter)
		select {
		case <-done:
		case <-ctx.Done():
			return ctx.Err()
		case <-stall.C:
			mu.Lock()
			waiting := len(sent)
			mu.Unlock()
			return fmt.Errorf("pipeline stalled after %d requests, %d without a result: %s", n, waiting, pipelineState(ctx, st))
		}
		req := schemas.Request{ID: client.NewID(), Model: "llama-3.1-8b", Prompt: "ping", MaxTokens: 1, Priority: schemas.PriorityInteractive}
		mu.Lock()
		sent[req.ID] = time.Now()
		mu.Unlock()
		if _, err := cl.SubmitAsync("bench", &req); err != nil {
			return err
		}
		n++
	}
	// Wait for the tail so every measured request is counted.
	tail := time.Now().Add(10 * time.Second)
	for time.Now().Before(tail) {
		mu.Lock()
		left := len(sent)
		mu.Unlock()
		if left == 0 {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	elapsed := time.Since(start)
	pipeCPU := processCPU() - cpu0
	msgs := serverMsgs(st) - msgs0
	var conns1 map[string][2]int64
	if *byConn {
		conns1 = connMsgs(st)
	}
	stop()
	// The profile covers the pipeline half only: the baseline's publishes
	// would otherwise dilute it.
	if *cpuProfile != "" {
		pprof.StopCPUProfile()
	}
	if *memProfile != "" {
		if err := writeHeapProfile(*memProfile); err != nil {
			return err
		}
		runtime.MemProfileRate = 512 * 1024
	}
	seq1, err := streamSeqs(ctx, st)
	if err != nil {
		return err
	}
	// The baseline runs after the pipeline so its million stored messages
	// cannot slow the pipeline half down.
	raw, rawMsgs, rawCPU, err := rawPublishRate(ctx, st, *duration/2)
	if err != nil {
		return err
	}
	mu.Lock()
	sort.Float64s(lat)
	res := BusResult{RawJSPublishPerS: raw, PipelinePerS: float64(len(lat)) / elapsed.Seconds(), Requests: len(lat), Workers: *workers, Routers: *routers, Rate: *rate,
		MaxResultGapMs: float64(maxGap.Microseconds()) / 1000}
	if len(lat) > 0 && rawMsgs > 0 {
		res.PipelineCPUUsPerReq = float64(pipeCPU.Microseconds()) / float64(len(lat))
		res.RawCPUUsPerMsg = float64(rawCPU.Microseconds()) / float64(rawMsgs)
		res.CPURatio = res.RawCPUUsPerMsg / res.PipelineCPUUsPerReq
		res.IdleCPUMsPerS = idlePerS
		res.BusyCPUUsPerReq = (float64(pipeCPU.Microseconds()) - idlePerS*1000*elapsed.Seconds()) / float64(len(lat))
	}
	if len(lat) > 0 {
		res.StoredByStream = map[string]float64{}
		for name, s1 := range seq1 {
			per := float64(s1-seq0[name]) / float64(len(lat))
			res.StoredByStream[name] = per
			res.StoredPerReq += per
		}
		res.ProtocolMsgsPerReq = float64(msgs) / float64(len(lat))
		if *byConn {
			res.ProtocolByConn = map[string]float64{}
			for name, c1 := range conns1 {
				c0 := conns0[name]
				if d := c1[0] - c0[0]; d > 0 {
					res.ProtocolByConn[name+" in"] = float64(d) / float64(len(lat))
				}
				if d := c1[1] - c0[1]; d > 0 {
					res.ProtocolByConn[name+" out"] = float64(d) / float64(len(lat))
				}
			}
		}
		res.OverheadP50Ms = stats.Quantile(lat, 0.5)
		res.OverheadP99Ms = stats.Quantile(lat, 0.99)
	}
	mu.Unlock()
	if raw > 0 {
		res.Ratio = res.PipelinePerS / raw
	}
	fmt.Fprintf(stdout, "raw JetStream async publish: %.0f msg/s\npipeline (submit→admit→place→dispatch→result, instant workers): %.0f req/s\nratio %.4f   overhead p50 %.2f ms  p99 %.2f ms  (%d requests)\n",
		res.RawJSPublishPerS, res.PipelinePerS, res.Ratio, res.OverheadP50Ms, res.OverheadP99Ms, res.Requests)
	fmt.Fprintf(stdout, "stored messages per request %.2f %v; server messages in and out per request %.1f\n",
		res.StoredPerReq, res.StoredByStream, res.ProtocolMsgsPerReq)
	fmt.Fprintf(stdout, "CPU: %.1f µs per pipeline request, %.2f µs per raw publish (cpu ratio %.4f); longest wait for a result %.0f ms\n",
		res.PipelineCPUUsPerReq, res.RawCPUUsPerMsg, res.CPURatio, res.MaxResultGapMs)
	fmt.Fprintf(stdout, "idle stack %.1f ms of CPU per second; %.1f µs per request without it\n", res.IdleCPUMsPerS, res.BusyCPUUsPerReq)
	if *byConn {
		names := make([]string, 0, len(res.ProtocolByConn))
		for name := range res.ProtocolByConn {
			names = append(names, name)
		}
		sort.Strings(names)
		for _, name := range names {
			fmt.Fprintf(stdout, "  %-40s %.2f msgs/request\n", name, res.ProtocolByConn[name])
		}
	}
	if *jsonOut {
		b, _ := json.Marshal(res)
		fmt.Fprintln(stdout, string(b))
	}
	return nil
}

// pipelineState describes where a stalled pipeline's requests are: each
// stream's message count and each consumer's backlog.
func pipelineState(ctx context.Context, st *stack.Stack) string {
	nc, err := st.Connect("bench-diagnose")
	if err != nil {
		return err.Error()
	}
	defer nc.Close()
	js, err := bus.JetStream(nc)
	if err != nil {
		return err.Error()
	}
	var b strings.Builder
	for _, name := range []string{subjects.StreamSubmit, subjects.StreamAdmitted, subjects.StreamDispatch, subjects.StreamResults} {
		s, err := js.Stream(ctx, name)
		if err != nil {
			fmt.Fprintf(&b, "%s: %v; ", name, err)
			continue
		}
		info, err := s.Info(ctx)
		if err != nil {
			fmt.Fprintf(&b, "%s: %v; ", name, err)
			continue
		}
		fmt.Fprintf(&b, "%s %d msgs", name, info.State.Msgs)
		for ci := range s.ListConsumers(ctx).Info() {
			fmt.Fprintf(&b, " [%s pending %d ack-pending %d redelivered %d waiting %d]", ci.Name, ci.NumPending, ci.NumAckPending, ci.NumRedelivered, ci.NumWaiting)
		}
		b.WriteString("; ")
	}
	return b.String()
}

// benchStreams are the streams a request's path writes to.
var benchStreams = []string{subjects.StreamSubmit, subjects.StreamAdmitted, subjects.StreamDispatch, subjects.StreamResults,
	subjects.StreamJournal, subjects.StreamEvents}

// streamSeqs is each of benchStreams' last sequence.
func streamSeqs(ctx context.Context, st *stack.Stack) (map[string]uint64, error) {
	nc, err := st.Connect("bench-count")
	if err != nil {
		return nil, err
	}
	defer nc.Close()
	js, err := bus.JetStream(nc)
	if err != nil {
		return nil, err
	}
	out := map[string]uint64{}
	for _, name := range benchStreams {
		s, err := js.Stream(ctx, name)
		if err != nil {
			return nil, fmt.Errorf("stream %s: %w", name, err)
		}
		info, err := s.Info(ctx)
		if err != nil {
			return nil, fmt.Errorf("stream %s info: %w", name, err)
		}
		out[name] = info.State.LastSeq
	}
	return out, nil
}

// serverMsgs is the embedded server's messages in plus out so far.
func serverMsgs(st *stack.Stack) int64 {
	v, err := st.Server.NS.Varz(nil)
	if err != nil {
		return 0
	}
	return v.InMsgs + v.OutMsgs
}

// connMsgs is each open client connection's messages in (sent by the
// client) and out (delivered to it) so far, summed by connection name.
func connMsgs(st *stack.Stack) map[string][2]int64 {
	cz, err := st.Server.NS.Connz(&server.ConnzOptions{Limit: 1 << 16})
	if err != nil {
		return nil
	}
	out := map[string][2]int64{}
	for _, c := range cz.Conns {
		v := out[c.Name]
		v[0] += c.InMsgs
		v[1] += c.OutMsgs
		out[c.Name] = v
	}
	return out
}

// rawPublishRate is the baseline: bounded async publishes of a small
// message into a limits stream on the same server. It returns the rate,
// the messages sent and the process CPU time they took.
func rawPublishRate(ctx context.Context, st *stack.Stack, d time.Duration) (float64, int, time.Duration, error) {
	nc, err := st.Connect("bench-raw")
	if err != nil {
		return 0, 0, 0, err
	}
	defer nc.Close()
	js, err := bus.JetStream(nc)
	if err != nil {
		return 0, 0, 0, err
	}
	if _, err := js.CreateOrUpdateStream(ctx, jetstream.StreamConfig{Name: "BENCHRAW", Subjects: []string{"bench.raw"}, MaxMsgs: 1_000_000}); err != nil {
		return 0, 0, 0, err
	}
	defer js.DeleteStream(context.Background(), "BENCHRAW")
	payload := make([]byte, 128)
	start := time.Now()
	cpu0 := processCPU()
	n := 0
	for time.Since(start) < d {
		for i := 0; i < 1000; i++ {
			_, err := js.PublishAsync("bench.raw", payload)
			if errors.Is(err, jetstream.ErrTooManyStalledMsgs) {
				// The server is behind (a loaded machine): let it catch
				// up, as any publisher would, instead of failing the run.
				select {
				case <-js.PublishAsyncComplete():
				case <-time.After(10 * time.Second):
				}
				continue
			}
			if err != nil {
				return 0, 0, 0, err
			}
			n++
		}
	}
	select {
	case <-js.PublishAsyncComplete():
	case <-time.After(30 * time.Second):
		return 0, 0, 0, fmt.Errorf("raw publishes not acked")
	}
	return float64(n) / time.Since(start).Seconds(), n, processCPU() - cpu0, nil
}

// writeHeapProfile writes the heap profile (with its allocation totals
// since the rate was raised) to path.
func writeHeapProfile(path string) error {
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("bench bus: memprofile: %w", err)
	}
	runtime.GC() // the in-use figures are as of the last GC
	if err := pprof.WriteHeapProfile(f); err != nil {
		f.Close()
		return fmt.Errorf("bench bus: memprofile: %w", err)
	}
	return f.Close()
}

// processCPU is the CPU time this process has used, user plus system.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// benchStack starts the in-process system a bench measures and a client
// on it; the stack is closed again if the client cannot be made.
func benchStack(ctx context.Context, cfg stack.Config, clientName string) (*stack.Stack, *client.Client, error) {
	st, err := stack.Start(ctx, cfg)
	if err != nil {
		return nil, nil, err
	}
	nc, err := st.Connect(clientName)
	if err == nil {
		var cl *client.Client
		if cl, err = client.New(nc); err == nil {
			return st, cl, nil
		}
	}
	st.Close()
	return nil, nil, err
}
