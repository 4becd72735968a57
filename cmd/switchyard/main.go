// Command switchyard is the one binary of Switchyard: every service, the
// demo, the simulator and the operator tools are its subcommands.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"sort"
	"syscall"

	"github.com/VictoriaMetrics/metrics"
)

// Every /metrics this binary serves carries a # HELP and # TYPE line per
// metric family, as Prometheus's text format expects and as promtool and
// metadata-aware tools (Grafana's metric browser, VictoriaMetrics) read;
// svc's merge of several services' sets keeps each line once.
func init() { metrics.ExposeMetadata(true) }

// command is one subcommand. run gets the arguments after the command name
// and writes human output to stdout; --json output's last line is one
// object.
type command struct {
	summary string
	run     func(ctx context.Context, args []string, stdout io.Writer) error
}

// commands is the table of subcommands; each lives in its own file.
func commands() map[string]command {
	return map[string]command{
		"demo":       {"run everything on embedded NATS with a mixed multi-tenant load", runDemo},
		"up":         {"run every service in one process on embedded NATS", runUp},
		"nats":       {"run a standalone JetStream server", runNATS},
		"admitter":   {"run the admitter service against --nats URL", runAdmitter},
		"router":     {"run the router service against --nats URL", runRouter},
		"worker":     {"run one GPU worker against --nats URL", runWorker},
		"batch":      {"submit, track and collect OpenAI-format batch files (--nats URL)", runBatch},
		"auth":       {"generate a NATS config confining each tenant to its own subjects (--tenants a,b --out F)", runAuth},
		"replay":     {"run a recorded window back through the routing core (--store DIR | --nats URL)", runReplay},
		"trail":      {"print every stored message about request ids: submitted, admitted, each dispatch and its ack, events, result (--nats URL | --store DIR) ID...", runTrail},
		"bench":      {"measure placement, the bus pipeline and the gateway against baselines", runBench},
		"gateway":    {"serve the OpenAI-compatible HTTP API (--listen ADDR --nats URL --tenants FILE)", runGateway},
		"sim":        {"replay a trace against a simulated fleet under several policies (--trace FILE --format F --policies P,...)", runSim},
		"loadgen":    {"publish a multi-tenant load to a running system and count every result (--nats URL --rate R --duration D --json)", runLoadgen},
		"chaos":      {"kill -9 workers, routers, admitters and NATS nodes at random (seeded) under load, restarting them; report the loadgen counters (--duration D --json)", runChaos},
		"controller": {"run the control loop: autoscaling, spec decoding, budgets, warmth, shedding (--nats URL --interval 2s)", runController},
		"gpu":        {"capacity planning from the GPU performance model", runGPU},
		"gguf":       {"write the tiny Llama-architecture GGUF model the engine docs and tests use, and its Modelfile (tiny OUT.gguf)", runGGUF},
	}
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	os.Exit(run(ctx, os.Args[1:], os.Stdout, os.Stderr))
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	cmds := commands()
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		usage(stderr, cmds)
		return 2
	}
	c, ok := cmds[args[0]]
	if !ok {
		fmt.Fprintf(stderr, "switchyard: unknown command %q\n\n", args[0])
		usage(stderr, cmds)
		return 2
	}
	if err := c.run(ctx, args[1:], stdout); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 2
		}
		// One line, once: the services' own logs already carry the
		// structured context of what failed.
		fmt.Fprintf(stderr, "switchyard %s: %v\n", args[0], err)
		return 1
	}
	return 0
}

func usage(w io.Writer, cmds map[string]command) {
	fmt.Fprintln(w, "usage: switchyard <command> [flags]\n\ncommands:")
	names := make([]string, 0, len(cmds))
	for n := range cmds {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Fprintf(w, "  %-10s %s\n", n, cmds[n].summary)
	}
	fmt.Fprintln(w, "\nrun 'switchyard <command> -h' for a command's flags")
}
