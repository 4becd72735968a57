package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/switchyard-ai/switchyard/internal/adapter/bus"
	"github.com/switchyard-ai/switchyard/internal/adapter/cachestore"
	"github.com/switchyard-ai/switchyard/internal/adapter/config"
	"github.com/switchyard-ai/switchyard/internal/adapter/fleetlearn"
	"github.com/switchyard-ai/switchyard/internal/adapter/workflowstore"
	"github.com/switchyard-ai/switchyard/internal/core/admission"
	"github.com/switchyard-ai/switchyard/internal/core/baselines"
	"github.com/switchyard-ai/switchyard/internal/core/catalog"
	"github.com/switchyard-ai/switchyard/internal/core/control"
	"github.com/switchyard-ai/switchyard/internal/core/perf"
	"github.com/switchyard-ai/switchyard/internal/core/routing"
	"github.com/switchyard-ai/switchyard/schemas"
	"github.com/switchyard-ai/switchyard/services/admitter"
	"github.com/switchyard-ai/switchyard/services/router"
	"github.com/switchyard-ai/switchyard/services/svc"
	"github.com/switchyard-ai/switchyard/services/worker"
	"github.com/switchyard-ai/switchyard/subjects"
)

// serviceFlags are the flags every standalone service takes.
type serviceFlags struct {
	natsURL     string
	metrics     string
	id          string
	catalogPath string
	replicas    int
	verbose     bool
}

func (f *serviceFlags) register(fs *flag.FlagSet, defaultID string) {
	fs.StringVar(&f.natsURL, "nats", bus.DefaultURL, "NATS server or cluster URL(s), comma-separated")
	fs.StringVar(&f.metrics, "metrics", "", "serve Prometheus /metrics on this address (e.g. :9100)")
	fs.StringVar(&f.id, "id", defaultID, "instance id (a subject token)")
	fs.StringVar(&f.catalogPath, "catalog", "", "GPU/model catalog JSON merged over the built-in one")
	fs.IntVar(&f.replicas, "stream-replicas", 1, "replicas for the streams this service provisions (3 on a cluster)")
	fs.BoolVar(&f.verbose, "v", false, "debug logging")
}

// connect dials NATS, provisions the streams (idempotent) and builds the
// service shell, serving metrics when asked.
func (f *serviceFlags) connect(ctx context.Context, service string) (*svc.Shell, *catalog.Catalog, error) {
	logger := newLogger(f.verbose)
	cat, err := config.LoadCatalog(f.catalogPath)
	if err != nil {
		return nil, nil, err
	}
	nc, err := bus.Dial(ctx, f.natsURL, service+"-"+f.id, 30*time.Second)
	if err != nil {
		return nil, nil, err
	}
	sh, err := svc.New(service, f.id, nc, logger)
	if err != nil {
		return nil, nil, err
	}
	if err := subjects.Provision(ctx, sh.JS, subjects.StreamOptions{Replicas: f.replicas}); err != nil {
		return nil, nil, err
	}
	if err := sh.UseLedger(); err != nil {
		return nil, nil, err
	}
	if f.metrics != "" {
		reg := &svc.Registry{}
		reg.Add(sh.Metrics)
		reg.AddHealth(svc.ConnHealth(nc))
		addr, err := reg.Serve(ctx, f.metrics)
		if err != nil {
			return nil, nil, err
		}
		logger.Info("metrics", "addr", "http://"+addr+"/metrics")
	}
	return sh, cat, nil
}

func newLogger(verbose bool) *slog.Logger {
	lvl := slog.LevelInfo
	if verbose {
		lvl = slog.LevelDebug
	}
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: lvl}))
}

func hostID(prefix string) string {
	h, _ := os.Hostname()
	if h == "" {
		h = "local"
	}
	return fmt.Sprintf("%s-%s-%d", prefix, sanitize(h), os.Getpid())
}

func sanitize(s string) string {
	b := []byte(s)
	for i, c := range b {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
			b[i] = '-'
		}
	}
	return string(b)
}

func runAdmitter(ctx context.Context, args []string, _ io.Writer) error {
	fs := flag.NewFlagSet("admitter", flag.ContinueOnError)
	var f serviceFlags
	f.register(fs, hostID("admitter"))
	tenantsFile := fs.String("tenants", "", "tenant profiles JSON (see config/tenants.example.json); default: every tenant may use every class and model, no quotas, no cache")
	var tokenizerSpecs []string
	fs.Func("tokenizer", "a model's own tokenizer, MODEL=path/to/tokenizer.json or MODEL=http://vllm-host:port (that server's /tokenize); repeat per model. Its prompts' block hashes then meet the engine's KV events; other models keep the built-in approximate tokenizer",
		func(v string) error { tokenizerSpecs = append(tokenizerSpecs, v); return nil })
	var embed cacheEmbedFlags
	embed.register(fs)
	if err := fs.Parse(args); err != nil {
		return err
	}
	embedder, err := embed.embedder(os.Getenv)
	if err != nil {
		return err
	}
	tokenizers, err := admitter.LoadTokenizers(tokenizerSpecs)
	if err != nil {
		return err
	}
	var tenants *admission.Tenants
	if *tenantsFile != "" {
		if tenants, err = config.LoadTenants(*tenantsFile); err != nil {
			return err
		}
	}
	sh, cat, err := f.connect(ctx, "admitter")
	if err != nil {
		return err
	}
	defer sh.NC.Drain()
	// A model a live worker serves is known even if the catalog is not.
	known := func(m string) bool { _, ok := cat.Model(m); return ok }
	cat = cat.Learning()
	served, err := fleetlearn.Follow(sh.NC, fleetlearn.Options{Catalog: cat, Log: sh.Log})
	if err != nil {
		return err
	}
	defer served.Stop()
	return admitter.New(sh, admitter.Config{ModelKnown: served.KnownOrServed(known),
		Tenants: tenants, Catalog: cat, Cache: cachestore.Config{Replicas: f.replicas, Embedder: embedder},
		Workflow: workflowstore.Config{Replicas: f.replicas}, Tokenizers: tokenizers}).Run(ctx)
}

func runRouter(ctx context.Context, args []string, _ io.Writer) error {
	fs := flag.NewFlagSet("router", flag.ContinueOnError)
	var f serviceFlags
	f.register(fs, hostID("router"))
	lease := fs.Bool("lease", true, "elect one active router through a KV lease (replicas stand by)")
	activeActive := fs.Bool("active-active", false, "place alongside every other active-active router (shared consumers, shared bookings, adoption of a dead peer's work); overrides --lease")
	weights := fs.String("queue-weights", "", "class weights of the router's queue, e.g. interactive=4,standard=1 (default critical=8,interactive=4,standard=2,batch=1)")
	pullBatch := fs.Int("pull-batch", 0, "admitted messages asked for per pull (default 64); peers pulling with different batches take different shares of the work")
	pullRate := fs.Float64("pull-rate", 0, "most admitted messages a second this router pulls, over its classes (default no cap; at least 1): a capped peer takes a smaller share of the work")
	policy := fs.String("policy", "switchyard", "placement policy: switchyard or a baseline ("+strings.Join(baselines.Names(), ", ")+")")
	classes := fs.String("classes", "", "classes this router pulls, e.g. standard,batch (default every class)")
	fairShare := fs.Bool("fair-share", true, "with --active-active: class weights and tenant shares count every peer's placements, not only this router's")
	if err := fs.Parse(args); err != nil {
		return err
	}
	pulled, err := parseClasses(*classes)
	if err != nil {
		return err
	}
	sh, cat, err := f.connect(ctx, "router")
	if err != nil {
		return err
	}
	defer sh.NC.Drain()
	// The cost model covers the models workers describe, not only the
	// catalog's: the router's core teaches this catalog what each
	// heartbeat describes, as an input it journals (routing.Config.Catalog).
	cat = cat.Learning()
	cost := perf.NewPredictor(cat)
	pol, err := routing.PolicyNamed(*policy, cat, cost)
	if err != nil {
		return err
	}
	if *pullBatch < 0 {
		return fmt.Errorf("router: --pull-batch %d: want 0 (default) or more", *pullBatch)
	}
	if *pullRate != 0 && !(*pullRate >= router.MinPullRate) {
		return fmt.Errorf("router: --pull-rate %g: want 0 (no cap) or at least %g a second", *pullRate, router.MinPullRate)
	}
	qw, err := parseQueueWeights(*weights)
	if err != nil {
		return err
	}
	return router.New(sh, router.Config{Cost: cost, Policy: pol, Catalog: cat, Lease: *lease, LeaseReplicas: f.replicas,
		ActiveActive: *activeActive, PullBatch: *pullBatch, PullRate: *pullRate, QueueWeights: qw, Classes: pulled, NoFairShare: !*fairShare}).Run(ctx)
}

// parseClasses reads --classes: a comma-separated list of classes, each
// one of schemas.Priorities; nil for "".
func parseClasses(s string) ([]string, error) {
	if s == "" {
		return nil, nil
	}
	var out []string
	for _, c := range strings.Split(s, ",") {
		c = strings.TrimSpace(c)
		if !slices.Contains(schemas.Priorities, c) {
			return nil, fmt.Errorf("router: --classes %q: %q is not a class (want some of %v)", s, c, schemas.Priorities)
		}
		if !slices.Contains(out, c) {
			out = append(out, c)
		}
	}
	return out, nil
}

// parseQueueWeights reads --queue-weights: class=weight pairs, each class
// one of schemas.Priorities and each weight a positive integer; nil for "".
func parseQueueWeights(s string) (map[string]int, error) {
	if s == "" {
		return nil, nil
	}
	out := map[string]int{}
	for _, kv := range strings.Split(s, ",") {
		class, n, ok := strings.Cut(strings.TrimSpace(kv), "=")
		if !ok || !slices.Contains(schemas.Priorities, class) {
			return nil, fmt.Errorf("router: --queue-weights %q: %q is not class=weight with class one of %v", s, kv, schemas.Priorities)
		}
		w, err := strconv.Atoi(n)
		if err != nil || w <= 0 {
			return nil, fmt.Errorf("router: --queue-weights %q: weight %q of %s is not a positive integer", s, n, class)
		}
		out[class] = w
	}
	return out, nil
}

// stallOrOff maps the flag's 0 (off) to the worker's negative: its zero is
// the default.
func stallOrOff(d time.Duration) time.Duration {
	if d <= 0 {
		return -1
	}
	return d
}

func runWorker(ctx context.Context, args []string, _ io.Writer) error {
	fs := flag.NewFlagSet("worker", flag.ContinueOnError)
	var f serviceFlags
	f.register(fs, hostID("worker"))
	gpu := fs.String("gpu", "h100", "GPU generation (catalog name)")
	model := fs.String("model", "llama-3.1-8b", "model served")
	dtype := fs.String("dtype", "bf16", "weights dtype: bf16, fp16 or fp8")
	tp := fs.Int("tp", 1, "tensor-parallel degree")
	backend := fs.String("backend", "sim", "backend: sim (simulated GPU) or openai (a real OpenAI-compatible server)")
	openaiURL := fs.String("openai-url", "", "openai backend: the server's root URL, e.g. http://127.0.0.1:8000")
	openaiModel := fs.String("openai-model", "", "openai backend: the served model name (default --model)")
	maxConc := fs.Int("max-concurrent", 64, "openai backend: requests in flight")
	stallAfter := fs.Duration("engine-stall-after", worker.DefaultEngineStallAfter,
		"openai backend: take the engine out of rotation when generations wait this long with no byte from it (it answers, but serves nothing); 0 turns the watchdog off")
	drainTimeout := fs.Duration("drain-timeout", worker.DefaultDrainTimeout,
		"on SIGTERM or scale-down, wait this long for the work held (simulated or at the engine), then hand what still runs back for re-placement")
	ackWait := fs.Duration("ack-wait", worker.DefaultAckWait,
		"the dispatch consumer's ack wait: how long a dead worker's unacked dispatch waits before it may be delivered again; longer work is kept alive with in-progress acks")
	var vkv worker.VLLMKVConfig
	fs.StringVar(&vkv.Endpoint, "vllm-kv-endpoint", "", "openai backend: follow the vLLM engine's KV events on its ZMQ PUB socket, e.g. tcp://127.0.0.1:5557 (docs/engines.md)")
	fs.StringVar(&vkv.Replay, "vllm-kv-replay", "", "openai backend: the vLLM engine's KV event replay socket, e.g. tcp://127.0.0.1:5558")
	fs.IntVar(&vkv.DPRank, "vllm-dp-rank", 0, "openai backend: the vLLM engine's data-parallel rank (vLLM offsets both KV event ports by it)")
	pool := fs.String("pool", "", "pool name (default: the GPU name)")
	role := fs.String("role", schemas.RoleBoth, "which legs of a disaggregated request this worker takes: prefill, decode or both (whole requests too)")
	link := fs.String("link", "", "the worker's network link for KV transfers, a catalog link name (e.g. ib-ndr, nvlink4, roce-400); none: it takes no split leg")
	kvHold := fs.Duration("kv-hold", worker.DefaultKVHold, "how long a finished prefill's KV is held for its decode worker's pull")
	speed := fs.Float64("speedup", 1, "run the simulated GPU this many times faster than real time")
	park := fs.String("park", "", "simulated backend, GPUs that change model (controller --shift-models): other models' weights staged on this worker, so the controller can switch it to one: MODEL[@TIER][,...], TIER host (asleep in host memory; the default), page_cache, disk or remote")
	var fault worker.Fault // fault injection, for fault tests only (services/worker/fault.go)
	fs.Float64Var(&fault.Slowdown, "fault-slowdown", 0, "FAULT INJECTION (tests): stretch every engine step by this factor")
	fs.Float64Var(&fault.ErrorRate, "fault-error-rate", 0, "FAULT INJECTION (tests): answer this share of requests with backend_error")
	fs.Uint64Var(&fault.Seed, "fault-seed", 1, "FAULT INJECTION (tests): seed picking which requests fail")
	if err := fs.Parse(args); err != nil {
		return err
	}
	parks, err := parsePark(*park, *backend)
	if err != nil {
		return err
	}
	sh, cat, err := f.connect(ctx, "worker")
	if err != nil {
		return err
	}
	defer sh.NC.Drain()
	if err := fault.Validate(); err != nil {
		return err
	}
	if !schemas.ValidRole(*role) {
		return fmt.Errorf("worker: --role %q: want prefill, decode or both", *role)
	}
	if *link != "" {
		if _, ok := cat.Link(*link); !ok {
			return fmt.Errorf("worker: --link %q: not a catalog link (%s)", *link, strings.Join(cat.LinkNames(), ", "))
		}
	}
	// A real engine may serve a model the catalog lacks: ask it what it is.
	if cat, err = worker.LearnServedModel(ctx, cat, worker.Config{ID: f.id, Model: *model, Backend: *backend, OpenAIURL: *openaiURL, OpenAIModel: *openaiModel}); err != nil {
		return err
	}
	w, err := worker.New(sh, worker.Config{ID: f.id, Pool: *pool, GPU: *gpu, Model: *model, Dtype: *dtype, TP: *tp, SpeedUp: *speed, Catalog: cat,
		Backend: *backend, OpenAIURL: *openaiURL, OpenAIModel: *openaiModel, MaxConcurrent: *maxConc, Fault: fault,
		VLLMKV: vkv, EngineStallAfter: stallOrOff(*stallAfter), DrainTimeout: *drainTimeout, AckWait: *ackWait,
		Role: *role, Link: *link, KVHold: *kvHold})
	if err != nil {
		return err
	}
	for _, p := range parks {
		if err := w.Park(p.model, p.tier); err != nil {
			return fmt.Errorf("worker: --park: %w", err)
		}
	}
	if len(parks) > 0 {
		sh.Log.Info("models parked", "park", parks)
	}
	if fault.Active() {
		sh.Log.Warn(fault.String())
	}
	return w.Run(ctx)
}

// parkSpec is one --park entry: a model whose weights a worker keeps
// staged at a tier while it serves another.
type parkSpec struct{ model, tier string }

func (p parkSpec) String() string { return p.model + "@" + p.tier }

// parsePark reads --park MODEL[@TIER][,...] (tier host when left out, as
// --parked-tier in up and demo; control.ParkedTier). Only the simulated
// engine stages weights. Which models can run here, and that a model is
// neither the worker's own nor named twice, Worker.Park checks.
func parsePark(s, backend string) ([]parkSpec, error) {
	var out []parkSpec
	for _, part := range strings.Split(s, ",") {
		if part = strings.TrimSpace(part); part == "" {
			continue
		}
		model, tier, _ := strings.Cut(part, "@")
		if model = strings.TrimSpace(model); model == "" {
			return nil, fmt.Errorf("worker: --park %q: want MODEL[@TIER]", part)
		}
		tier, err := control.ParkedTier(strings.TrimSpace(tier))
		if err != nil {
			return nil, fmt.Errorf("worker: --park %s: %w", part, err)
		}
		out = append(out, parkSpec{model: model, tier: tier})
	}
	if len(out) > 0 && backend != "sim" {
		return nil, fmt.Errorf("worker: --park with --backend %s: --park stages weights on the simulated engine; a real engine offers what it holds itself (Ollama: every model it has pulled, switchable by the controller; vLLM and SGLang: one model per process)", backend)
	}
	return out, nil
}
