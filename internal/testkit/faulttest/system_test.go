package faulttest

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/switchyard-ai/switchyard/schemas"
	"github.com/switchyard-ai/switchyard/services/svc"
	"github.com/switchyard-ai/switchyard/subjects"
)

// sysConfig describes a system of separate processes.
type sysConfig struct {
	// natsNodes is 1 (a single server with a file store) or 3 (a
	// JetStream cluster; services then provision R3 streams).
	natsNodes int
	admitters int
	routers   int
	workers   int
	// workerArgs adds flags to one worker by index (fault injection).
	workerArgs map[int][]string
}

// system is NATS, admitters, routers and workers, each a separate process
// of the real binary.
type system struct {
	t         *testing.T
	dir       string
	url       string // every client URL, comma-separated
	nodes     []*natsNode
	procs     []*Proc
	admitters []*Proc
	routers   []*Proc
	workers   []*Proc
}

// natsNode is one `switchyard nats` process and its ports.
type natsNode struct {
	*Proc
	name       string
	clientURL  string
	httpPort   int
	clusterURL string
}

func startSystem(ctx context.Context, t *testing.T, routers, workers int) *system {
	return launch(ctx, t, sysConfig{natsNodes: 1, admitters: 1, routers: routers, workers: workers})
}

// newSystem is an empty system whose processes are all stopped, newest
// first, when the test ends, with their log tails if it failed.
func newSystem(t *testing.T) *system {
	s := &system{t: t, dir: t.TempDir()}
	t.Cleanup(func() {
		for i := len(s.procs) - 1; i >= 0; i-- {
			s.procs[i].Stop(2 * time.Second)
		}
		if t.Failed() {
			for _, p := range s.procs {
				t.Logf("--- %s log tail:\n%s", p.Name, p.Tail(15))
			}
		}
	})
	return s
}

func launch(ctx context.Context, t *testing.T, cfg sysConfig) *system {
	t.Helper()
	s := newSystem(t)
	s.startNATS(ctx, max(1, cfg.natsNodes))
	replicas := "1"
	if cfg.natsNodes >= 3 {
		replicas = "3"
	}
	common := func(id string) []string { return []string{"--nats", s.url, "--id", id, "--stream-replicas", replicas} }
	for i := 1; i <= max(1, cfg.admitters); i++ {
		id := fmt.Sprintf("adm%d", i)
		s.admitters = append(s.admitters, s.start(id, append([]string{"admitter"}, common(id)...)...))
	}
	if cfg.natsNodes >= 3 {
		// On a cluster, services that provision the same R3 streams at the
		// same moment can time out (the meta leader serialises the
		// creates); let the first admitter create them, the rest then
		// find them in place.
		wctx, cancel := context.WithTimeout(ctx, 45*time.Second)
		err := s.admitters[0].WaitFor(wctx, "admitter running")
		cancel()
		if err != nil {
			t.Fatal(err)
		}
	}
	for i := 1; i <= cfg.routers; i++ {
		id := fmt.Sprintf("r%d", i)
		s.routers = append(s.routers, s.start(id, append([]string{"router"}, common(id)...)...))
	}
	for i := 1; i <= cfg.workers; i++ {
		id := fmt.Sprintf("w%d", i)
		args := append(append([]string{"worker"}, common(id)...), cfg.workerArgs[i]...)
		s.workers = append(s.workers, s.start(id, args...))
	}
	wctx, cancel := context.WithTimeout(ctx, 45*time.Second)
	defer cancel()
	for _, a := range s.admitters {
		if err := a.WaitFor(wctx, "admitter running"); err != nil {
			t.Fatal(err)
		}
	}
	for _, w := range s.workers {
		if err := w.WaitFor(wctx, "worker starting"); err != nil {
			t.Fatal(err)
		}
	}
	if s.leader(wctx) == nil {
		t.Fatal("no router became leader")
	}
	// Heartbeats reach the router's fleet view within one interval.
	time.Sleep(time.Second)
	return s
}

// startNATS starts one server, or n servers as a JetStream cluster routed
// on loopback, each from a nats-server config file.
func (s *system) startNATS(ctx context.Context, n int) {
	t := s.t
	t.Helper()
	type ports struct{ client, cluster, http int }
	ps := make([]ports, n)
	for i := range ps {
		for _, p := range []*int{&ps[i].client, &ps[i].cluster, &ps[i].http} {
			v, err := FreePort()
			if err != nil {
				t.Fatal(err)
			}
			*p = v
		}
	}
	var routes, urls []string
	for _, p := range ps {
		routes = append(routes, fmt.Sprintf("%q", fmt.Sprintf("nats://127.0.0.1:%d", p.cluster)))
		urls = append(urls, fmt.Sprintf("nats://127.0.0.1:%d", p.client))
	}
	s.url = strings.Join(urls, ",")
	for i, p := range ps {
		name := fmt.Sprintf("n%d", i+1)
		store := filepath.Join(s.dir, "js-"+name)
		args := []string{"nats", "--listen", fmt.Sprintf("127.0.0.1:%d", p.client), "--http", fmt.Sprint(p.http), "--name", name}
		if n == 1 {
			args = append(args, "--store", store)
		} else {
			conf := fmt.Sprintf(`server_name: %s
jetstream {
  store_dir: %q
  max_memory_store: 268435456
  max_file_store: 8589934592
}
cluster {
  name: switchyard
  listen: "127.0.0.1:%d"
  routes: [%s]
}
`, name, store, p.cluster, strings.Join(routes, ", "))
			path := filepath.Join(s.dir, name+".conf")
			if err := os.WriteFile(path, []byte(conf), 0o644); err != nil {
				t.Fatal(err)
			}
			args = append(args, "--config", path)
		}
		s.nodes = append(s.nodes, &natsNode{Proc: s.start(name, args...), name: name, clientURL: urls[i], httpPort: p.http,
			clusterURL: fmt.Sprintf("nats://127.0.0.1:%d", p.cluster)})
	}
	// A cluster serves JetStream only once it has a meta leader. A node
	// may itself take up to bus's 30 s to be ready on a loaded machine.
	wctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	for wctx.Err() == nil {
		ok := 0
		for _, nd := range s.nodes {
			if n == 1 || nd.metaLeader() != "" {
				ok++
			}
		}
		if ok == n {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("NATS (%d nodes) not ready: %v", n, wctx.Err())
}

func (nd *natsNode) getJSON(path string, v any) error {
	c := http.Client{Timeout: 2 * time.Second}
	resp, err := c.Get(fmt.Sprintf("http://127.0.0.1:%d%s", nd.httpPort, path))
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	return json.NewDecoder(resp.Body).Decode(v)
}

// metaLeader is the JetStream meta leader as this node sees it.
func (nd *natsNode) metaLeader() string {
	var jsz struct {
		Meta *struct {
			Leader string `json:"leader"`
		} `json:"meta_cluster"`
	}
	if nd.getJSON("/jsz", &jsz) != nil || jsz.Meta == nil {
		return ""
	}
	return jsz.Meta.Leader
}

// clients names the client connections on this node.
func (nd *natsNode) clients() []string {
	var connz struct {
		Conns []struct {
			Name string `json:"name"`
		} `json:"connections"`
	}
	if nd.getJSON("/connz?limit=1000", &connz) != nil {
		return nil
	}
	var out []string
	for _, c := range connz.Conns {
		out = append(out, c.Name)
	}
	sort.Strings(out)
	return out
}

func (s *system) start(name string, args ...string) *Proc {
	s.t.Helper()
	p, err := Start(bin, s.dir, name, args...)
	if err != nil {
		s.t.Fatal(err)
	}
	s.procs = append(s.procs, p)
	return p
}

// takeover waits for a router other than dead to log leadership and
// returns it.
func (s *system) takeover(ctx context.Context, dead *Proc) *Proc {
	s.t.Helper()
	var standby *Proc
	for _, r := range s.routers {
		if r != dead {
			standby = r
		}
	}
	if standby == nil {
		s.t.Fatal("no standby router")
	}
	if err := standby.WaitFor(ctx, "leader=true"); err != nil {
		s.t.Fatal(err)
	}
	return standby
}

// untilHolding waits, from start, for the load to settle (2 s) and then
// for open() to report at least three requests in flight (up to 9 s), so
// a kill lands mid-batch. It returns how many were open.
func untilHolding(start time.Time, open func() int) int {
	for time.Since(start) < 2*time.Second || (open() < 3 && time.Since(start) < 9*time.Second) {
		time.Sleep(20 * time.Millisecond)
	}
	return open()
}

// leader waits for a router that logged leadership and is still running.
func (s *system) leader(ctx context.Context) *Proc {
	for ctx.Err() == nil {
		for _, r := range s.routers {
			if r.Contains("leader=true") && !r.Exited() {
				return r
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	return nil
}

func (s *system) loadgen(rate float64, d time.Duration, extra ...string) *Proc {
	args := append([]string{"loadgen", "--nats", s.url, "--rate", fmt.Sprint(rate), "--duration", d.String(), "--json", "--seed", "3", "--drain", "40s"}, extra...)
	return s.start("loadgen", args...)
}

// watchPlacements delivers the worker of each dispatch of request id, read
// from the dispatch itself, until the test ends.
func watchPlacements(t *testing.T, nc *nats.Conn, id string) <-chan string {
	t.Helper()
	placed := make(chan string, 4)
	sub, err := nc.Subscribe(subjects.DispatchAll, func(m *nats.Msg) {
		var d schemas.Dispatch
		if svc.Decode(m.Header, m.Data, &d) == nil && d.Admitted.Request.ID == id {
			placed <- d.WorkerID
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sub.Unsubscribe() })
	return placed
}

// observer is the test's own connection, for reading what the system
// recorded in its streams.
func (s *system) observer() (*nats.Conn, jetstream.JetStream) {
	s.t.Helper()
	nc, err := nats.Connect(s.url, nats.Name("faulttest-observer"), nats.MaxReconnects(-1), nats.ReconnectWait(100*time.Millisecond))
	if err != nil {
		s.t.Fatal(err)
	}
	s.t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		s.t.Fatal(err)
	}
	return nc, js
}

// record is one stream message, decoded, with its stream timestamp.
type record[T any] struct {
	Subject string
	At      time.Time
	V       T
}

// decodeOne decodes a message that holds one value.
func decodeOne[T any](h nats.Header, data []byte) ([]T, error) {
	var v T
	err := svc.Decode(h, data, &v)
	return []T{v}, err
}

// readAll reads every value of stream matching filter, in order; decode
// gives a message's values (events are batched, svc.DecodeEvents).
func readAll[T any](ctx context.Context, js jetstream.JetStream, stream, filter string, decode func(nats.Header, []byte) ([]T, error)) ([]record[T], error) {
	st, err := js.Stream(ctx, stream)
	if err != nil {
		return nil, fmt.Errorf("stream %s: %w", stream, err)
	}
	c, err := st.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{FilterSubjects: []string{filter}})
	if err != nil {
		return nil, fmt.Errorf("ordered consumer on %s: %w", stream, err)
	}
	var out []record[T]
	for ctx.Err() == nil {
		batch, err := c.Fetch(1000, jetstream.FetchMaxWait(2*time.Second))
		if err != nil {
			return nil, fmt.Errorf("fetch %s: %w", stream, err)
		}
		got, last := 0, false
		for m := range batch.Messages() {
			got++
			md, err := m.Metadata()
			if err != nil {
				return nil, err
			}
			vs, err := decode(m.Headers(), m.Data())
			if err != nil {
				return nil, fmt.Errorf("%s seq %d: %w", stream, md.Sequence.Stream, err)
			}
			for _, v := range vs {
				out = append(out, record[T]{Subject: m.Subject(), At: md.Timestamp, V: v})
			}
			last = md.NumPending == 0
		}
		if got == 0 || last {
			return out, nil
		}
	}
	return nil, ctx.Err()
}

// recorded is what the system wrote down during a run.
type recorded struct {
	dispatches []record[schemas.Dispatch]
	results    []record[schemas.Result]
	events     []record[schemas.Event]
	admitted   []record[schemas.Admitted]
}

func (s *system) recorded(ctx context.Context, js jetstream.JetStream) recorded {
	s.t.Helper()
	var r recorded
	var err error
	if r.dispatches, err = readAll(ctx, js, subjects.StreamDispatch, subjects.DispatchAll, decodeOne[schemas.Dispatch]); err != nil {
		s.t.Fatal(err)
	}
	if r.results, err = readAll(ctx, js, subjects.StreamResults, subjects.ResultAll, decodeOne[schemas.Result]); err != nil {
		s.t.Fatal(err)
	}
	if r.events, err = readAll(ctx, js, subjects.StreamEvents, subjects.EventAll, svc.DecodeEvents); err != nil {
		s.t.Fatal(err)
	}
	if r.admitted, err = readAll(ctx, js, subjects.StreamAdmitted, subjects.AdmittedAll, decodeOne[schemas.Admitted]); err != nil {
		s.t.Fatal(err)
	}
	return r
}

// finals maps each request id to its final results on the stream; more
// than one is a duplicate.
func (r recorded) finals() map[string][]schemas.Result {
	out := map[string][]schemas.Result{}
	for _, x := range r.results {
		out[x.V.ID] = append(out[x.V.ID], x.V)
	}
	return out
}

// streamDuplicates counts request ids with more than one stored result.
func (r recorded) streamDuplicates() int {
	n := 0
	for _, rs := range r.finals() {
		if len(rs) > 1 {
			n++
		}
	}
	return n
}

// eventsOf returns the events of one kind, in stream order.
func (r recorded) eventsOf(kind string) []record[schemas.Event] {
	var out []record[schemas.Event]
	for _, e := range r.events {
		if e.V.Kind == kind {
			out = append(out, e)
		}
	}
	return out
}

// watchInflight tracks, live, which dispatches to one worker have no
// result yet, so a test can kill the worker while it is mid-batch. The
// returned function is the count now.
func watchInflight(t *testing.T, nc *nats.Conn, worker string) func() int {
	t.Helper()
	open := map[string]bool{}
	ch := make(chan func(), 1<<14)
	sub1, err := nc.Subscribe(subjects.Dispatch(worker), func(m *nats.Msg) {
		var d schemas.Dispatch
		if svc.Decode(m.Header, m.Data, &d) == nil {
			id := d.Admitted.Request.ID
			ch <- func() { open[id] = true }
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	sub2, err := nc.Subscribe(subjects.ResultAll, func(m *nats.Msg) {
		if _, id, err := subjects.ParseResult(m.Subject); err == nil {
			ch <- func() { delete(open, id) }
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sub1.Unsubscribe(); sub2.Unsubscribe() })
	return func() int {
		for {
			select {
			case fn := <-ch:
				fn()
			default:
				return len(open)
			}
		}
	}
}
