// Package chaos owns Switchyard's chaos drill: the real switchyard binary
// run as separate processes on loopback — a 3-node JetStream cluster (R3
// streams), admitters, routers and simulated workers — driven by loadgen
// within the fleet's capacity while a seeded schedule kills one process at
// a time with SIGKILL (a worker, a router, an admitter or a NATS node) and
// restarts it. The run is bounded: the load lasts Duration, the kills stop
// when it ends, loadgen waits for the last answers, and every process the
// run started is stopped before Run returns. The result is loadgen's
// counters (loadgen/tally) with the kills that happened.
package chaos

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/switchyard-ai/switchyard/internal/adapter/bus"
	"github.com/switchyard-ai/switchyard/internal/adapter/freeport"
	"github.com/switchyard-ai/switchyard/internal/adapter/trail"
	"github.com/switchyard-ai/switchyard/loadgen/tally"
)

// Roles a kill can hit.
const (
	RoleWorker   = "worker"
	RoleRouter   = "router"
	RoleAdmitter = "admitter"
	RoleNATS     = "nats"
)

// Config configures a run. Zero fields take the defaults noted.
type Config struct {
	// Binary is the switchyard executable the services run as (required).
	Binary string
	// Dir keeps the stores and logs; "" means a temporary directory,
	// removed when Run returns.
	Dir string
	// Duration is how long loadgen generates load (required).
	Duration time.Duration
	// Rate is loadgen's request rate per second; 0 means 8, within what
	// the fleet serves with one worker down.
	Rate float64
	// Seed drives the kill schedule and the workload.
	Seed uint64
	// Workers, Routers and Admitters size the fleet; 0 means 3, 2 and 2.
	// NATS always runs 3 nodes.
	Workers, Routers, Admitters int
	// KillEvery is the mean time between kills (exponentially drawn);
	// 0 means 20 s.
	KillEvery time.Duration
	// Down is how long a killed process stays dead before its restart;
	// 0 means 5 s — past the 3 s after which routers declare a silent
	// worker lost.
	Down time.Duration
	// Quiet is how long before the load ends the kills stop, so the
	// last restarted process serves the tail; 0 means 10 s.
	Quiet time.Duration
	// Roles, when set, is the order the kills take by role, repeated
	// (each of RoleWorker, RoleRouter, RoleAdmitter, RoleNATS); empty
	// means all four in a seeded order.
	Roles []string
	// GPU and Model describe every worker; "" means h100 and llama-3.1-8b.
	GPU, Model string
	Log        *slog.Logger
}

func (c *Config) defaults() error {
	if c.Binary == "" {
		return errors.New("chaos: no switchyard binary given")
	}
	if _, err := os.Stat(c.Binary); err != nil {
		return fmt.Errorf("chaos: binary: %w", err)
	}
	if c.Duration <= 0 {
		return errors.New("chaos: --duration must be positive")
	}
	if c.Rate < 0 || c.Workers < 0 || c.Routers < 0 || c.Admitters < 0 || c.KillEvery < 0 || c.Down < 0 || c.Quiet < 0 {
		return errors.New("chaos: rate, counts and intervals must not be negative")
	}
	set := func(v *int, d int) {
		if *v == 0 {
			*v = d
		}
	}
	set(&c.Workers, 3)
	set(&c.Routers, 2)
	set(&c.Admitters, 2)
	if c.Rate == 0 {
		c.Rate = 8
	}
	if c.KillEvery == 0 {
		c.KillEvery = 20 * time.Second
	}
	if c.Down == 0 {
		c.Down = 5 * time.Second
	}
	if c.Quiet == 0 {
		c.Quiet = 10 * time.Second
	}
	if c.GPU == "" {
		c.GPU = "h100"
	}
	if c.Model == "" {
		c.Model = "llama-3.1-8b"
	}
	for _, r := range c.Roles {
		switch r {
		case RoleWorker, RoleRouter, RoleAdmitter, RoleNATS:
		default:
			return fmt.Errorf("chaos: unknown role %q (want worker, router, admitter or nats)", r)
		}
	}
	if c.Log == nil {
		c.Log = slog.New(slog.DiscardHandler)
	}
	return nil
}

// Kill is one SIGKILL the run sent and the restart that followed.
type Kill struct {
	At   time.Time `json:"at"`
	Role string    `json:"role"`
	Name string    `json:"name"`
	// Leader is set for a router that held the lease when killed.
	Leader bool `json:"leader,omitempty"`
	// BackAfterS is how long after the kill the restarted process was
	// ready again.
	BackAfterS float64 `json:"back_after_s"`
}

// Exit is a service that ended on its own — not killed by the drill —
// and was restarted, as a supervisor (systemd, Kubernetes) would. Each is
// a finding: the service gave up where it could have retried.
type Exit struct {
	At   time.Time `json:"at"`
	Name string    `json:"name"`
	// LastLog is the last line it logged (its error).
	LastLog string `json:"last_log"`
}

// Report is loadgen's counters (the demo's --json fields) plus the kills
// and the exits the drill restarted.
type Report struct {
	tally.Summary
	Kills     []Kill         `json:"kills"`
	Exits     []Exit         `json:"exits"`
	KillsBy   map[string]int `json:"kills_by_role"`
	Seed      uint64         `json:"seed"`
	DurationS float64        `json:"duration_s"`
	Rate      float64        `json:"rate"`
	// CompletedShare is completed / submitted.
	CompletedShare float64 `json:"completed_share"`
	Dir            string  `json:"dir,omitempty"`
	// LostTrails is, for each lost request loadgen named, every message
	// the cluster's streams still hold about it, read before the cluster
	// stops: where the request stopped (see `switchyard trail`).
	LostTrails map[string][]trail.Step `json:"lost_trails,omitempty"`
}

// run is one drill's state.
type run struct {
	cfg   Config
	dir   string
	nats  []*natsNode
	url   string
	procs []*proc // every service, in start order
	by    map[string][]*proc
	rng   *rand.Rand
	// down is the process the drill killed and has not restarted yet.
	down *proc
	// decks deal each role's victims: a seeded shuffle of its processes,
	// dealt out before the next shuffle, so every instance is hit in turn.
	decks map[string][]*proc
	exits []Exit
}

type natsNode struct {
	*proc
	httpPort int
}

// Run performs one drill. It returns the report, or an error when the
// system could not be started or loadgen gave no summary; ctx ending
// stops the drill and every process early.
func Run(ctx context.Context, cfg Config) (Report, error) {
	if err := cfg.defaults(); err != nil {
		return Report{}, err
	}
	r := &run{cfg: cfg, by: map[string][]*proc{}, rng: rand.New(rand.NewPCG(cfg.Seed, 0x5ca1ab1e))}
	r.dir = cfg.Dir
	if r.dir == "" {
		d, err := os.MkdirTemp("", "switchyard-chaos-")
		if err != nil {
			return Report{}, fmt.Errorf("chaos: temp dir: %w", err)
		}
		r.dir = d
		defer os.RemoveAll(d)
	} else if err := os.MkdirAll(r.dir, 0o755); err != nil {
		return Report{}, fmt.Errorf("chaos: dir: %w", err)
	}
	defer r.stopAll()
	if err := r.startSystem(ctx); err != nil {
		return Report{}, err
	}
	lg := r.add(&proc{name: "loadgen", role: "loadgen", args: []string{"loadgen", "--nats", r.url,
		"--rate", fmt.Sprint(cfg.Rate), "--duration", cfg.Duration.String(), "--json",
		"--seed", fmt.Sprint(cfg.Seed), "--drain", "45s"}})
	if err := lg.start(cfg.Binary); err != nil {
		return Report{}, err
	}
	cfg.Log.Info("chaos: load started", "duration", cfg.Duration, "rate", cfg.Rate, "nats", r.url)
	kills, err := r.killLoop(ctx, time.Now().Add(cfg.Duration-cfg.Quiet), lg)
	if err != nil {
		return Report{}, err
	}
	// The load has ended (or ctx did): loadgen now waits for the last
	// answers, bounded by its --drain.
	if _, err := r.sleep(ctx, cfg.Duration+5*time.Minute, lg); err != nil {
		return Report{}, err
	}
	if lg.running() {
		return Report{}, fmt.Errorf("chaos: stopped before loadgen finished: %w", context.Cause(ctx))
	}
	line := lg.lastOut()
	var rep Report
	if err := json.Unmarshal([]byte(line), &rep.Summary); err != nil || !strings.HasPrefix(line, "{") {
		return Report{}, fmt.Errorf("chaos: loadgen gave no JSON summary (%q):\n%s", line, lg.tail(15))
	}
	rep.Exits = r.exits
	rep.Kills, rep.Seed, rep.DurationS, rep.Rate = kills, cfg.Seed, cfg.Duration.Seconds(), cfg.Rate
	rep.KillsBy = map[string]int{}
	for _, k := range kills {
		rep.KillsBy[k.Role]++
	}
	if rep.Submitted > 0 {
		rep.CompletedShare = float64(rep.Completed) / float64(rep.Submitted)
	}
	if cfg.Dir != "" {
		rep.Dir = r.dir
	}
	if len(rep.LostIDs) > 0 {
		trails, err := r.trail(ctx, rep.LostIDs)
		if err != nil {
			cfg.Log.Warn("chaos: reading the lost requests' trails", "err", err)
		}
		rep.LostTrails = trails
	}
	return rep, nil
}

// trail reads every stored message about ids from the running cluster.
func (r *run) trail(ctx context.Context, ids []string) (map[string][]trail.Step, error) {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	nc, err := bus.Dial(ctx, r.url, "chaos-trail", 10*time.Second)
	if err != nil {
		return nil, err
	}
	defer nc.Close()
	js, err := bus.JetStream(nc)
	if err != nil {
		return nil, err
	}
	return trail.Find(ctx, js, ids, trail.Options{})
}

func (r *run) add(p *proc) *proc {
	p.logPath = filepath.Join(r.dir, p.name+".log")
	p.outPath = filepath.Join(r.dir, p.name+".out")
	r.procs = append(r.procs, p)
	r.by[p.role] = append(r.by[p.role], p)
	return p
}

// stopAll stops every process, newest first (loadgen, then the services,
// then NATS), and kills what does not exit within a few seconds.
func (r *run) stopAll() {
	for i := len(r.procs) - 1; i >= 0; i-- {
		r.procs[i].stop(3 * time.Second)
	}
}

// startSystem starts the NATS cluster, then the admitters (the first
// alone: on a cluster, services creating the same R3 streams at once can
// time out while the meta leader serialises the creates), routers and
// workers, and waits until each serves and a router leads.
func (r *run) startSystem(ctx context.Context) error {
	if err := r.startNATS(ctx); err != nil {
		return err
	}
	cfg := r.cfg
	common := func(id string) []string {
		return []string{"--nats", r.url, "--id", id, "--stream-replicas", "3"}
	}
	sctx, cancel := context.WithTimeout(ctx, 90*time.Second)
	defer cancel()
	for i := 1; i <= cfg.Admitters; i++ {
		id := fmt.Sprintf("adm%d", i)
		p := r.add(&proc{name: id, role: RoleAdmitter, ready: "admitter running", args: append([]string{"admitter"}, common(id)...)})
		if err := p.start(cfg.Binary); err != nil {
			return err
		}
		if i == 1 {
			if err := p.waitReady(sctx); err != nil {
				return err
			}
		}
	}
	for i := 1; i <= cfg.Routers; i++ {
		id := fmt.Sprintf("r%d", i)
		p := r.add(&proc{name: id, role: RoleRouter, args: append([]string{"router"}, common(id)...)})
		if err := p.start(cfg.Binary); err != nil {
			return err
		}
	}
	for i := 1; i <= cfg.Workers; i++ {
		id := fmt.Sprintf("w%d", i)
		p := r.add(&proc{name: id, role: RoleWorker, ready: "worker starting",
			args: append(append([]string{"worker"}, common(id)...), "--gpu", cfg.GPU, "--model", cfg.Model)})
		if err := p.start(cfg.Binary); err != nil {
			return err
		}
	}
	for _, p := range r.procs {
		if p.role == RoleNATS {
			continue
		}
		if err := r.waitUp(sctx, p); err != nil {
			return err
		}
	}
	for r.leader() == nil {
		if err := r.reviveAll(); err != nil {
			return err
		}
		select {
		case <-sctx.Done():
			var tails []string
			for _, p := range r.by[RoleRouter] {
				tails = append(tails, fmt.Sprintf("--- %s:\n%s", p.name, p.tail(8)))
			}
			return fmt.Errorf("chaos: no router took the lease: %w\n%s", sctx.Err(), strings.Join(tails, "\n"))
		case <-time.After(100 * time.Millisecond):
		}
	}
	// Heartbeats reach the routers' and admitters' fleet views.
	time.Sleep(2 * time.Second)
	return nil
}

// startNATS writes a config file per node (cluster routes on loopback,
// its own store) and starts the three nodes, then waits for a meta leader.
func (r *run) startNATS(ctx context.Context) error {
	const n = 3
	type ports struct{ client, cluster, http int }
	ps := make([]ports, n)
	for i := range ps {
		for _, p := range []*int{&ps[i].client, &ps[i].cluster, &ps[i].http} {
			// Below the ephemeral range: the drill's own connections
			// cannot take it before nats-server binds it.
			v, err := freeport.Port()
			if err != nil {
				return fmt.Errorf("chaos: %w", err)
			}
			*p = v
		}
	}
	var routes, urls []string
	for _, p := range ps {
		routes = append(routes, fmt.Sprintf("%q", fmt.Sprintf("nats://127.0.0.1:%d", p.cluster)))
		urls = append(urls, fmt.Sprintf("nats://127.0.0.1:%d", p.client))
	}
	r.url = strings.Join(urls, ",")
	for i, p := range ps {
		name := fmt.Sprintf("n%d", i+1)
		conf := fmt.Sprintf(`server_name: %s
jetstream {
  store_dir: %q
  max_memory_store: 268435456
  max_file_store: 4294967296
}
cluster {
  name: switchyard-chaos
  listen: "127.0.0.1:%d"
  routes: [%s]
}
`, name, filepath.Join(r.dir, "js-"+name), p.cluster, strings.Join(routes, ", "))
		path := filepath.Join(r.dir, name+".conf")
		if err := os.WriteFile(path, []byte(conf), 0o644); err != nil {
			return fmt.Errorf("chaos: %s config: %w", name, err)
		}
		pr := r.add(&proc{name: name, role: RoleNATS, args: []string{"nats", "--listen", fmt.Sprintf("127.0.0.1:%d", p.client),
			"--http", fmt.Sprint(p.http), "--name", name, "--config", path}})
		nd := &natsNode{proc: pr, httpPort: p.http}
		r.nats = append(r.nats, nd)
		if err := pr.start(r.cfg.Binary); err != nil {
			return err
		}
	}
	wctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	for _, nd := range r.nats {
		if err := nd.waitMeta(wctx); err != nil {
			return err
		}
	}
	return nil
}

// metaLeader is the JetStream meta leader as this node sees it, "" when
// it knows none (or does not answer).
func (nd *natsNode) metaLeader() string {
	c := http.Client{Timeout: 2 * time.Second}
	resp, err := c.Get(fmt.Sprintf("http://127.0.0.1:%d/jsz", nd.httpPort))
	if err != nil {
		return ""
	}
	defer resp.Body.Close()
	var jsz struct {
		Meta *struct {
			Leader string `json:"leader"`
		} `json:"meta_cluster"`
	}
	if json.NewDecoder(resp.Body).Decode(&jsz) != nil || jsz.Meta == nil {
		return ""
	}
	return jsz.Meta.Leader
}

// waitMeta waits until the node is in a cluster with a meta leader.
func (nd *natsNode) waitMeta(ctx context.Context) error {
	for nd.metaLeader() == "" {
		if !nd.running() {
			return fmt.Errorf("chaos: NATS node %s exited:\n%s", nd.name, nd.tail(10))
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("chaos: NATS node %s sees no meta leader: %w", nd.name, ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
	return nil
}

// leader is the router whose latest incarnation last logged that it holds
// the lease, nil when none does.
func (r *run) leader() *proc {
	for _, p := range r.by[RoleRouter] {
		if !p.running() {
			continue
		}
		log := p.logSince()
		i := strings.LastIndex(string(log), "router leadership")
		if i >= 0 && strings.Contains(firstLine(string(log[i:])), "leader=true") {
			return p
		}
	}
	return nil
}

func firstLine(s string) string {
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		return s[:i]
	}
	return s
}

// killLoop kills one process at a time until stopAt: the roles come round
// in a seeded order (so a short run hits every role), the victims of a
// role are dealt from a seeded shuffle of its processes (so every one is
// hit in turn) and the gaps between kills are drawn from the seed. A killed
// process stays down for Down, is restarted on the same id (and, for a
// NATS node, the same store), and the next kill waits until it is ready.
func (r *run) killLoop(ctx context.Context, stopAt time.Time, lg *proc) ([]Kill, error) {
	roles := r.cfg.Roles
	if len(roles) == 0 {
		roles = []string{RoleWorker, RoleRouter, RoleAdmitter, RoleNATS}
		r.rng.Shuffle(len(roles), func(i, j int) { roles[i], roles[j] = roles[j], roles[i] })
	}
	var kills []Kill
	for turn := 0; ; turn++ {
		gap := time.Duration(r.rng.ExpFloat64() * float64(r.cfg.KillEvery))
		gap = min(max(gap, r.cfg.KillEvery/4), 3*r.cfg.KillEvery)
		at := time.Now().Add(gap)
		if at.After(stopAt) {
			_, err := r.sleep(ctx, time.Until(stopAt), lg)
			return kills, err
		}
		if done, err := r.sleep(ctx, gap, lg); done || err != nil {
			return kills, err // loadgen ended early: its summary says why
		}
		role := roles[turn%len(roles)]
		k, err := r.killOne(ctx, role)
		if err != nil {
			return kills, err
		}
		kills = append(kills, k)
	}
}

// deal is the next victim of role from its deck, reshuffled when empty.
func (r *run) deal(role string) *proc {
	if r.decks == nil {
		r.decks = map[string][]*proc{}
	}
	if len(r.decks[role]) == 0 {
		deck := append([]*proc(nil), r.by[role]...)
		r.rng.Shuffle(len(deck), func(i, j int) { deck[i], deck[j] = deck[j], deck[i] })
		r.decks[role] = deck
	}
	p := r.decks[role][0]
	r.decks[role] = r.decks[role][1:]
	return p
}

// sleep waits d, restarting services that exit meanwhile; done is true
// when ctx or loadgen ended first.
func (r *run) sleep(ctx context.Context, d time.Duration, lg *proc) (done bool, err error) {
	end := time.Now().Add(d)
	for {
		if err := r.reviveAll(); err != nil {
			return true, err
		}
		left := time.Until(end)
		if left <= 0 {
			return false, nil
		}
		select {
		case <-ctx.Done():
			return true, nil
		case <-lg.done:
			return true, nil
		case <-time.After(min(left, 500*time.Millisecond)):
		}
	}
}

// killOne kills the next process of role from its deck, keeps it down
// for Down and restarts it, waiting until it serves again.
func (r *run) killOne(ctx context.Context, role string) (Kill, error) {
	victim := r.deal(role)
	var node *natsNode
	for _, nd := range r.nats {
		if nd.proc == victim {
			node = nd
		}
	}
	leader := r.leader()
	k := Kill{At: time.Now().UTC(), Role: role, Name: victim.name, Leader: role == RoleRouter && victim == leader}
	r.cfg.Log.Info("chaos: kill -9", "role", role, "name", victim.name, "leader", k.Leader)
	victim.kill()
	r.down = victim
	select {
	case <-ctx.Done():
		return k, nil
	case <-time.After(r.cfg.Down):
	}
	r.down = nil
	if err := victim.start(r.cfg.Binary); err != nil {
		return k, err
	}
	rctx, cancel := context.WithTimeout(ctx, 90*time.Second)
	defer cancel()
	var err error
	if node != nil {
		err = node.waitMeta(rctx)
	} else {
		err = r.waitUp(rctx, victim)
	}
	if err != nil && ctx.Err() == nil {
		return k, fmt.Errorf("chaos: restart of %s: %w", victim.name, err)
	}
	k.BackAfterS = time.Since(k.At).Seconds()
	r.cfg.Log.Info("chaos: restarted", "name", victim.name, "back_after_s", fmt.Sprintf("%.1f", k.BackAfterS))
	return k, nil
}

// waitUp waits until p serves: its ready line, or for a router (a standby
// logs nothing until it leads) its connection on a NATS node.
// A process that exits meanwhile is restarted (see revive).
func (r *run) waitUp(ctx context.Context, p *proc) error {
	if p.role != RoleRouter {
		for {
			err := p.waitReady(ctx)
			if err == nil || ctx.Err() != nil || p.running() {
				return err
			}
			if err := r.revive(p); err != nil {
				return err
			}
		}
	}
	want := "router-" + p.name
	for !r.connected(want) {
		if !p.running() {
			if err := r.revive(p); err != nil {
				return err
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("chaos: %s never connected to NATS: %w", p.name, ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
	return nil
}

// maxExits bounds the restarts after exits in one run: a service that
// keeps exiting is broken, not unlucky.
const maxExits = 50

// revive restarts p after it exited on its own, recording the exit.
func (r *run) revive(p *proc) error {
	last := strings.TrimSpace(p.tail(1))
	r.exits = append(r.exits, Exit{At: time.Now().UTC(), Name: p.name, LastLog: last})
	r.cfg.Log.Warn("chaos: exited on its own; restarting", "name", p.name, "last_log", last)
	if len(r.exits) > maxExits {
		return fmt.Errorf("chaos: %d services exited on their own; the last, %s:\n%s", len(r.exits), p.name, p.tail(10))
	}
	time.Sleep(time.Second)
	return p.start(r.cfg.Binary)
}

// reviveAll restarts every service (not loadgen, not the one the drill
// holds down) that exited on its own.
func (r *run) reviveAll() error {
	for _, p := range r.procs {
		if p.role == "loadgen" || p == r.down || p.running() {
			continue
		}
		if err := r.revive(p); err != nil {
			return err
		}
	}
	return nil
}

// connected reports whether a live NATS node lists a client connection
// named name.
func (r *run) connected(name string) bool {
	c := http.Client{Timeout: 2 * time.Second}
	for _, nd := range r.nats {
		if !nd.running() {
			continue
		}
		resp, err := c.Get(fmt.Sprintf("http://127.0.0.1:%d/connz?limit=4096", nd.httpPort))
		if err != nil {
			continue
		}
		var connz struct {
			Conns []struct {
				Name string `json:"name"`
			} `json:"connections"`
		}
		err = json.NewDecoder(resp.Body).Decode(&connz)
		resp.Body.Close()
		if err != nil {
			continue
		}
		for _, cn := range connz.Conns {
			if cn.Name == name {
				return true
			}
		}
	}
	return false
}
