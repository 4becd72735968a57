package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
	"time"

	"github.com/switchyard-ai/switchyard/internal/driver/chaos"
)

// runChaos runs the chaos drill (internal/driver/chaos): this binary's services as
// separate processes on a 3-node JetStream cluster on loopback, loadgen
// within capacity, and seeded kill -9s of workers, routers, admitters and
// one NATS node at a time, each restarted; it ends with loadgen's counters.
func runChaos(ctx context.Context, args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("chaos", flag.ContinueOnError)
	duration := fs.Duration("duration", 2*time.Minute, "how long the load (and the kills) last; the run then waits up to 45 s for the last answers")
	rate := fs.Float64("rate", 8, "loadgen's request rate per second (within what the fleet serves with one worker down)")
	seed := fs.Uint64("seed", 1, "seed of the kill schedule and the workload")
	every := fs.Duration("kill-every", 20*time.Second, "mean time between kills")
	down := fs.Duration("down", 5*time.Second, "how long a killed process stays dead before its restart")
	workers := fs.Int("workers", 3, "simulated workers")
	routers := fs.Int("routers", 2, "routers (one active through the lease)")
	admitters := fs.Int("admitters", 2, "admitters")
	gpu := fs.String("gpu", "h100", "every worker's GPU (catalog name)")
	model := fs.String("model", "llama-3.1-8b", "every worker's model")
	roles := fs.String("roles", "", "comma-separated order of the roles killed, repeated (worker,router,admitter,nats; default all four in a seeded order)")
	dir := fs.String("dir", "", "keep stores and logs here (default: a temp dir removed at the end)")
	bin := fs.String("binary", "", "switchyard binary the services run as (default: this one)")
	jsonOut := fs.Bool("json", false, "end with one JSON summary line on stdout")
	verbose := fs.Bool("v", false, "log each kill and restart")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *duration <= 0 || *rate <= 0 || *every <= 0 || *down <= 0 {
		return fmt.Errorf("--duration, --rate, --kill-every and --down must be positive")
	}
	if *workers < 1 || *routers < 1 || *admitters < 1 {
		return fmt.Errorf("--workers, --routers and --admitters must be at least 1")
	}
	var order []string
	for _, r := range strings.Split(*roles, ",") {
		if r = strings.TrimSpace(r); r != "" {
			order = append(order, r)
		}
	}
	if *bin == "" {
		exe, err := os.Executable()
		if err != nil {
			return fmt.Errorf("chaos: own executable: %w", err)
		}
		*bin = exe
	}
	// Bounded even if a process hangs: the load, startup and the drain,
	// with room to spare.
	ctx, cancel := context.WithTimeout(ctx, *duration+4*time.Minute)
	defer cancel()
	if !*jsonOut {
		fmt.Fprintf(stdout, "switchyard chaos: %s of load at %.1f/s on 3 NATS nodes, %d admitters, %d routers, %d workers; a kill -9 every ~%s (seed %d)\n",
			*duration, *rate, *admitters, *routers, *workers, *every, *seed)
	}
	rep, err := chaos.Run(ctx, chaos.Config{Binary: *bin, Dir: *dir, Duration: *duration, Rate: *rate, Seed: *seed,
		Workers: *workers, Routers: *routers, Admitters: *admitters, KillEvery: *every, Down: *down,
		Roles: order, GPU: *gpu, Model: *model, Log: newLogger(*verbose)})
	if err != nil {
		return err
	}
	if *jsonOut {
		b, err := json.Marshal(rep)
		if err != nil {
			return err
		}
		fmt.Fprintln(stdout, string(b))
		return nil
	}
	hit := make([]string, 0, len(rep.KillsBy))
	for r := range rep.KillsBy {
		hit = append(hit, r)
	}
	sort.Strings(hit)
	fmt.Fprintf(stdout, "kills: %d (", len(rep.Kills))
	for i, r := range hit {
		if i > 0 {
			fmt.Fprint(stdout, ", ")
		}
		fmt.Fprintf(stdout, "%s %d", r, rep.KillsBy[r])
	}
	fmt.Fprintln(stdout, ")")
	for _, k := range rep.Kills {
		lead := ""
		if k.Leader {
			lead = " (active)"
		}
		fmt.Fprintf(stdout, "  %s  %-8s %s%s back after %.1fs\n", k.At.Format("15:04:05"), k.Role, k.Name, lead, k.BackAfterS)
	}
	fmt.Fprintf(stdout, "submitted %d  completed %d (%.1f %%)  rejected %d  shed %d  failed %d  lost %d  duplicates %d\n",
		rep.Submitted, rep.Completed, 100*rep.CompletedShare, rep.Rejected, rep.Shed, rep.Failed, rep.Lost, rep.Duplicates)
	fmt.Fprintf(stdout, "slo attainment %.3f  by class %v  errors %v\n", rep.SLOAttainment, rep.SLOAttainmentByPriority, rep.ErrorsByCode)
	return nil
}
