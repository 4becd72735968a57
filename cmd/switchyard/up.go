package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"strconv"
	"strings"
	"syscall"

	"github.com/switchyard-ai/switchyard/internal/adapter/bus"
	"github.com/switchyard-ai/switchyard/internal/adapter/config"
	"github.com/switchyard-ai/switchyard/internal/core/catalog"
	"github.com/switchyard-ai/switchyard/internal/driver/sim"
	"github.com/switchyard-ai/switchyard/schemas"
	"github.com/switchyard-ai/switchyard/services/stack"
	"github.com/switchyard-ai/switchyard/services/svc"
	"github.com/switchyard-ai/switchyard/subjects"
)

func runNATS(ctx context.Context, args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("nats", flag.ContinueOnError)
	listen := fs.String("listen", "127.0.0.1:4222", "client listen address")
	store := fs.String("store", "", "JetStream store directory (default: a temp dir removed on exit)")
	conf := fs.String("config", "", "nats-server config file (e.g. from `switchyard auth`)")
	httpPort := fs.Int("http", 0, "monitoring port for /jsz and /varz (0 = off)")
	name := fs.String("name", "", "server name (required for clusters)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if err := checkListen("nats", "--listen", *listen); err != nil {
		return err
	}
	srv, err := bus.StartServer(bus.ServerConfig{Listen: *listen, StoreDir: *store, ConfigFile: *conf, HTTPPort: *httpPort, ServerName: *name})
	if err != nil {
		return err
	}
	defer srv.Shutdown()
	fmt.Fprintf(stdout, "nats: JetStream listening on %s\n", srv.ClientURL())
	<-ctx.Done()
	return nil
}

// checkListen fails at once, naming the cause, when addr cannot be bound:
// the embedded server would otherwise only report, seconds later, that it
// never became ready.
func checkListen(what, flagName, addr string) error {
	if addr == "" {
		return nil
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		if errors.Is(err, syscall.EADDRINUSE) {
			return fmt.Errorf("%s listen %s: address in use (another server is running there; stop it or pass %s with another port)", what, addr, flagName)
		}
		return fmt.Errorf("%s listen %s: %w", what, addr, err)
	}
	return ln.Close()
}

// parseFleet parses "h100:2,a100-80g:1" into worker specs for model; an
// entry may name its own model (h100:2=qwen2.5-7b), for a fleet serving
// several models (up/demo --shift-models).
func parseFleet(s, model, dtype string) ([]stack.WorkerSpec, error) {
	var out []stack.WorkerSpec
	if s == "" {
		return nil, nil
	}
	// A role fixes a pool's phases (h100:1@prefill,a100-80g:2@decode);
	// such workers get the link disaggregated deployments run over, and
	// so do the role-both workers beside them, so any may take a leg.
	roles := strings.Contains(s, "@")
	for _, part := range strings.Split(s, ",") {
		part, role, _ := strings.Cut(strings.TrimSpace(part), "@")
		if !schemas.ValidRole(role) {
			return nil, fmt.Errorf("fleet entry %q: role %q, want prefill, decode or both", part, role)
		}
		part, entryModel, named := strings.Cut(part, "=")
		if named && strings.TrimSpace(entryModel) == "" {
			return nil, fmt.Errorf("fleet entry %q: an empty model after '=', want gpu:count[=model][@role]", part+"=")
		}
		m := model
		if named {
			m = strings.TrimSpace(entryModel)
		}
		gpu, n := part, 1
		if i := strings.IndexByte(part, ':'); i >= 0 {
			gpu = part[:i]
			v, err := strconv.Atoi(part[i+1:])
			if err != nil || v < 0 {
				return nil, fmt.Errorf("fleet entry %q: want gpu:count[@role]", part)
			}
			n = v
		}
		link := ""
		if roles {
			link = sim.DefaultRoleLink
		}
		for i := 0; i < n; i++ {
			out = append(out, stack.WorkerSpec{GPU: strings.TrimSpace(gpu), Model: m, Dtype: dtype, TP: 1, Role: role, Link: link})
		}
	}
	return out, nil
}

func runUp(ctx context.Context, args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("up", flag.ContinueOnError)
	listen := fs.String("listen", "127.0.0.1:4222", "NATS address for outside clients")
	store := fs.String("store", "", "JetStream store directory (default: temp)")
	workers := fs.Int("workers", 3, "number of simulated workers (default GPU h100)")
	fleetFlag := fs.String("fleet", "", "fleet as gpu:count[=model][@role],... (overrides --workers), e.g. h100:2,a100-80g:2, or h100:1@prefill,a100-80g:2@decode to split prompts from decodes, or h100:2,h100:1=qwen2.5-7b for a fleet of two models (--shift-models)")
	model := fs.String("model", "llama-3.1-8b", "model the workers serve")
	metricsAddr := fs.String("metrics", "127.0.0.1:9100", "Prometheus /metrics address (empty = off)")
	speed := fs.Float64("speedup", 1, "simulated GPU speed-up over real time")
	verbose := fs.Bool("v", false, "debug logging")
	tenants := fs.String("tenants", "", "tenant profiles JSON (config/tenants.example.json): quotas, allowed priorities and models, budgets; default: every tenant may use every class and model")
	scale := addAutoscaleFlags(fs, "run the controller and a local scaler: workers are started and drained as the controller decides")
	backend := fs.String("backend", "sim", "sim (simulated GPUs) or openai: front running engines at --openai-url (up_engine.go)")
	openaiURL := fs.String("openai-url", "", "openai backend: the engines' root URLs, comma-separated, one worker each")
	engineGPU := fs.String("gpu", "h100", "openai backend: the hardware the engines run on (catalog name; cpu for a CPU engine)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	fleet, err := parseFleet(*fleetFlag, *model, "bf16")
	if err != nil {
		return err
	}
	var cat *catalog.Catalog
	if *backend != "sim" {
		if fleet, cat, err = engineFleet(ctx, *backend, *openaiURL, *engineGPU, *model); err != nil {
			return err
		}
	}
	if fleet == nil {
		for i := 0; i < *workers; i++ {
			fleet = append(fleet, stack.WorkerSpec{GPU: "h100", Model: *model, Dtype: "bf16", TP: 1})
		}
	}
	if *tenants != "" {
		// Read now, so a bad file is reported before anything starts.
		if _, err := config.LoadTenants(*tenants); err != nil {
			return err
		}
	}
	if err := checkListen("nats", "--listen", *listen); err != nil {
		return err
	}
	if err := checkListen("metrics", "--metrics", *metricsAddr); err != nil {
		return err
	}
	logger := newLogger(*verbose)
	cfg := stack.Config{Listen: *listen, StoreDir: *store, Fleet: fleet, MetricsAddr: *metricsAddr, SpeedUp: *speed, Logger: logger, Tenants: *tenants, Catalog: cat}
	st, err := scale.start(ctx, cfg)
	if err != nil {
		return err
	}
	defer st.Close()
	// The embedded server has no exporter beside it: the consumers'
	// backlog (the dashboard's lag panel, KEDA's signal) is exported with
	// the services' own series.
	exp, err := st.Connect("metrics-exporter")
	if err != nil {
		return err
	}
	expJS, err := bus.JetStream(exp)
	if err != nil {
		return err
	}
	st.Registry.AddCollector(svc.JetStreamCollector(expJS, subjects.StreamSubmit, subjects.StreamAdmitted, subjects.StreamDispatch, subjects.StreamResults))
	// --autoscale-from-zero started (start refuses it without --autoscale),
	// so the stack has a controller.
	if *backend == "sim" && *scale.fromZero {
		fmt.Fprintf(stdout, "switchyard up: NATS %s, no workers yet: %d pools scale from zero as requests arrive (simulated GPUs; no real GPU)\n", st.URL, len(st.Controller().Desired()))
	} else if *backend == "sim" {
		fmt.Fprintf(stdout, "switchyard up: NATS %s, %d simulated workers (GPU timings from the roofline model; no real GPU)\n", st.URL, len(fleet))
	} else {
		fmt.Fprintf(stdout, "switchyard up: NATS %s, %d workers fronting real engines at %s, serving %s (not simulated)\n", st.URL, len(fleet), *openaiURL, *model)
	}
	if st.MetricsAddr != "" {
		fmt.Fprintf(stdout, "metrics: http://%s/metrics\n", st.MetricsAddr)
	}
	if *tenants != "" {
		fmt.Fprintf(stdout, "tenant profiles: %s\n", *tenants)
	}
	fmt.Fprintf(stdout, "try, subscribing first: nats --server %s sub 'sy.result.acme.>'\n", st.URL)
	fmt.Fprintf(stdout, "then: nats --server %s pub sy.submit.acme '{\"model\":%q,\"prompt\":\"hello\",\"max_tokens\":16}' -H Nats-Msg-Id:req1\n", st.URL, *model)
	<-ctx.Done()
	slog.Info("shutting down: workers drain first")
	_ = os.Stdout.Sync()
	return nil
}
