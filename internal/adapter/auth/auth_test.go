package auth

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"golang.org/x/crypto/bcrypt"

	"github.com/switchyard-ai/switchyard/internal/adapter/bus"
	"github.com/switchyard-ai/switchyard/schemas"
	"github.com/switchyard-ai/switchyard/services/client"
	"github.com/switchyard-ai/switchyard/subjects"
)

func TestGenerate(t *testing.T) {
	g, err := Generate(Config{Tenants: []string{"b", "a"}, Cost: bcrypt.MinCost})
	if err != nil {
		t.Fatal(err)
	}
	if len(g.Users) != 2+len(Services) || g.Users[0].Name != "a" || !g.Users[0].Tenant {
		t.Fatalf("users %+v", g.Users)
	}
	for _, u := range g.Users {
		if bcrypt.CompareHashAndPassword([]byte(u.Hash), []byte(u.Password)) != nil {
			t.Fatalf("hash of %s does not match its password", u.Name)
		}
		if strings.Contains(g.Config, u.Password) {
			t.Fatalf("plain password of %s in the config", u.Name)
		}
	}
	// The config itself says what confines a tenant.
	if !strings.Contains(g.Config, "no consumer API on any stream") || !strings.Contains(g.Config, "direct get on sy.result.a.>") {
		t.Fatalf("the config does not say what confines tenants:\n%s", g.Config)
	}
	if g.Users[0].Password == g.Users[1].Password {
		t.Fatal("passwords repeat")
	}
	for _, bad := range [][]string{nil, {"a.b"}, {"*"}, {"$SYS"}, {"a", "a"}, {"router"}} {
		if _, err := Generate(Config{Tenants: bad, Cost: bcrypt.MinCost}); err == nil {
			t.Errorf("tenants %q accepted", bad)
		}
	}
	if _, err := ServicePermissions("nope"); err == nil {
		t.Error("unknown service accepted")
	}
}

// isolation is a real server loaded with a generated config.
type isolation struct {
	srv   *bus.Server
	users map[string]User
}

func startIsolated(t *testing.T) *isolation {
	t.Helper()
	g, err := Generate(Config{Tenants: []string{"a", "b"}, Cost: bcrypt.MinCost})
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "nats.conf")
	if err := os.WriteFile(path, []byte(g.Config), 0o600); err != nil {
		t.Fatal(err)
	}
	srv, err := bus.StartServer(bus.ServerConfig{ConfigFile: path, Listen: "127.0.0.1:0"})
	if err != nil {
		t.Fatalf("server rejected the generated config: %v\n%s", err, g.Config)
	}
	t.Cleanup(srv.Shutdown)
	iso := &isolation{srv: srv, users: map[string]User{}}
	for _, u := range g.Users {
		iso.users[u.Name] = u
	}
	return iso
}

// errs collects asynchronous errors (permission violations) of one conn.
type errs struct {
	mu   sync.Mutex
	list []error
}

func (e *errs) handler(_ *nats.Conn, _ *nats.Subscription, err error) {
	e.mu.Lock()
	e.list = append(e.list, err)
	e.mu.Unlock()
}

func (e *errs) waitFor(t *testing.T, substr string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		e.mu.Lock()
		for _, err := range e.list {
			if strings.Contains(err.Error(), substr) {
				e.mu.Unlock()
				return
			}
		}
		e.mu.Unlock()
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("no async error containing %q", substr)
}

func (iso *isolation) connect(t *testing.T, user string, inbox string) (*nats.Conn, *errs) {
	t.Helper()
	u := iso.users[user]
	e := &errs{}
	opts := []nats.Option{nats.UserInfo(u.Name, u.Password), nats.ErrorHandler(e.handler)}
	if inbox != "" {
		opts = append(opts, nats.CustomInboxPrefix(inbox))
	}
	nc, err := nats.Connect(iso.srv.ClientURL(), opts...)
	if err != nil {
		t.Fatalf("connect %s: %v", user, err)
	}
	t.Cleanup(nc.Close)
	return nc, e
}

func publishResult(t *testing.T, ctx context.Context, js jetstream.JetStream, tenant, id string) {
	t.Helper()
	m := nats.NewMsg(subjects.Final(tenant, id))
	m.Data = schemas.MustMarshal(schemas.JSON, schemas.Result{ID: id, Tenant: tenant, Status: schemas.StatusOK, Text: "secret of " + tenant})
	m.Header.Set(schemas.HeaderMsgID, id)
	if _, err := js.PublishMsg(ctx, m); err != nil {
		t.Fatalf("worker publish result: %v", err)
	}
}

// TestTenantIsolation proves against a real server loaded with the
// generated config that tenant A can submit and read its results (live and
// from the stream) while tenant B can do neither for A.
func TestTenantIsolation(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	iso := startIsolated(t)

	// The operator provisions streams; the worker answers.
	ops, _ := iso.connect(t, "ops", "")
	opsJS, _ := bus.JetStream(ops)
	if err := subjects.Provision(ctx, opsJS, subjects.StreamOptions{}); err != nil {
		t.Fatalf("ops provision: %v", err)
	}
	worker, _ := iso.connect(t, "worker", "")
	workerJS, _ := bus.JetStream(worker)

	// A: core subscription to its results, submit, then read from the stream.
	ncA, errsA := iso.connect(t, "a", InboxPrefix("a"))
	live, err := ncA.SubscribeSync(subjects.Result("a", ">"))
	if err != nil {
		t.Fatal(err)
	}
	if err := ncA.Flush(); err != nil {
		t.Fatal(err)
	}
	cA, err := client.New(ncA, client.WithJSON())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cA.Submit(ctx, "a", &schemas.Request{ID: "a1", Model: "m", Prompt: "hi", MaxTokens: 4}); err != nil {
		t.Fatalf("A cannot submit as A: %v", err)
	}
	publishResult(t, ctx, workerJS, "a", "a1")
	if _, err := live.NextMsg(10 * time.Second); err != nil {
		t.Fatalf("A did not receive its live result: %v", err)
	}
	if r, err := cA.Result(ctx, "a", "a1"); err != nil || r.Text != "secret of a" {
		t.Fatalf("A cannot read its result from RESULTS: %+v %v", r, err)
	}
	errsA.mu.Lock()
	for _, err := range errsA.list {
		t.Fatalf("A hit an error doing what it may: %v", err)
	}
	errsA.mu.Unlock()

	// B, with its own inbox prefix.
	ncB, errsB := iso.connect(t, "b", InboxPrefix("b"))
	jsB, _ := bus.JetStream(ncB)

	t.Run("B cannot submit as A", func(t *testing.T) {
		m := nats.NewMsg(subjects.Submit("a"))
		m.Data = []byte(`{"id":"forged","model":"m","prompt":"x","max_tokens":1}`)
		m.Header.Set(schemas.HeaderMsgID, "forged")
		sctx, scancel := context.WithTimeout(ctx, 500*time.Millisecond)
		defer scancel()
		if _, err := jsB.PublishMsg(sctx, m); err == nil {
			t.Fatal("B's publish to sy.submit.a was acknowledged")
		}
		errsB.waitFor(t, `Permissions Violation for Publish to "sy.submit.a"`)
		st, _ := opsJS.Stream(ctx, subjects.StreamSubmit)
		if _, err := st.GetLastMsgForSubject(ctx, subjects.Submit("a")); err != nil {
			t.Fatal(err)
		}
		info, _ := st.Info(ctx)
		if info.State.Msgs != 1 {
			t.Fatalf("SUBMIT holds %d messages, want only A's", info.State.Msgs)
		}
	})
	t.Run("B cannot subscribe to A's results", func(t *testing.T) {
		for _, subj := range []string{"sy.result.a.>", "sy.result.>", "sy.result.*.a1", ">", "_INBOX.a.>", "_INBOX.>", "sy.tok.a.>"} {
			sub, err := ncB.SubscribeSync(subj)
			if err != nil {
				t.Fatal(err)
			}
			errsB.waitFor(t, `Permissions Violation for Subscription to "`+subj+`"`)
			publishResult(t, ctx, workerJS, "a", "a-"+strings.NewReplacer(".", "", ">", "gt", "*", "star").Replace(subj))
			if m, err := sub.NextMsg(100 * time.Millisecond); err == nil {
				t.Fatalf("B received %s on %s", m.Subject, subj)
			}
		}
	})
	t.Run("B cannot read A's results through JetStream", func(t *testing.T) {
		for _, filter := range []string{"sy.result.a.>", "sy.result.a.a1", "sy.result.>", "sy.result.*.a1"} {
			cctx, ccancel := context.WithTimeout(ctx, 500*time.Millisecond)
			_, err := jsB.CreateConsumer(cctx, subjects.StreamResults, jetstream.ConsumerConfig{FilterSubject: filter, AckPolicy: jetstream.AckNonePolicy})
			ccancel()
			if err == nil {
				t.Fatalf("B created a consumer filtered on %s", filter)
			}
			errsB.waitFor(t, `Permissions Violation for Publish to "$JS.API.CONSUMER.CREATE.RESULTS.`)
		}
		// Nor under B's own filter: a tenant has no consumer at all, since
		// pulling names only the consumer and a push consumer delivers
		// wherever its creator says.
		for _, api := range []string{"$JS.API.CONSUMER.CREATE.RESULTS.mine.sy.result.b.>", "$JS.API.CONSUMER.MSG.NEXT.RESULTS.mine"} {
			if _, err := ncB.Request(api, []byte(`{}`), 500*time.Millisecond); err == nil {
				t.Fatalf("B got an answer from %s", api)
			}
			errsB.waitFor(t, `Permissions Violation for Publish to "`+api+`"`)
		}
		// Nor can B look up stream contents by other means.
		for _, api := range []string{"$JS.API.STREAM.MSG.GET.RESULTS", "$JS.API.STREAM.INFO.RESULTS", "$JS.API.CONSUMER.LIST.RESULTS", "$JS.API.DIRECT.GET.RESULTS.sy.result.a.a1"} {
			if _, err := ncB.Request(api, []byte(`{"last_by_subj":"sy.result.a.a1"}`), 500*time.Millisecond); err == nil {
				t.Fatalf("B got an answer from %s", api)
			}
			errsB.waitFor(t, `Permissions Violation for Publish to "`+api+`"`)
		}
	})
	t.Run("B still reads its own results", func(t *testing.T) {
		publishResult(t, ctx, workerJS, "b", "b1")
		cB, _ := client.New(ncB)
		if r, err := cB.Result(ctx, "b", "b1"); err != nil || r.Text != "secret of b" {
			t.Fatalf("B cannot read its own result: %+v %v", r, err)
		}
	})
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		t.Fatal("test ran out of time")
	}
}

// TestSplitLegPermissions: under the generated config the services can
// carry a split request's two legs — a worker stores a KV handle on
// HANDOFFS, serves sy.rpc.kvpull.<itself> and requests it of another
// worker, and a router reads the handles with the shared durable
// router-handoffs — while a tenant can neither forge a handle nor read
// one (they name other tenants' requests and workers), nor ask a worker
// for a pull.
func TestSplitLegPermissions(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	iso := startIsolated(t)
	ops, _ := iso.connect(t, "ops", "")
	opsJS, _ := bus.JetStream(ops)
	if err := subjects.Provision(ctx, opsJS, subjects.StreamOptions{}); err != nil {
		t.Fatalf("ops provision: %v", err)
	}

	prefill, errsP := iso.connect(t, "worker", "")
	decode, errsD := iso.connect(t, "worker", "")
	prefillJS, _ := bus.JetStream(prefill)
	h := schemas.KVHandle{RequestID: "r1", Tenant: "a", Worker: "p1", PromptTokens: 4096, Blocks: 256}
	m := nats.NewMsg(subjects.Handoff("a", "r1"))
	m.Data = schemas.MustMarshal(schemas.JSON, h)
	m.Header.Set(schemas.HeaderMsgID, "r1-a0-kv")
	pctx, pcancel := context.WithTimeout(ctx, 5*time.Second)
	defer pcancel()
	if _, err := prefillJS.PublishMsg(pctx, m); err != nil {
		t.Fatalf("worker cannot store a KV handle: %v", err)
	}
	pulls, err := prefill.Subscribe(subjects.KVPullRequest("p1"), func(m *nats.Msg) { m.Respond([]byte(`{"ok":true}`)) })
	if err != nil {
		t.Fatal(err)
	}
	defer pulls.Unsubscribe()
	if err := prefill.Flush(); err != nil {
		t.Fatal(err)
	}
	if rep, err := decode.Request(subjects.KVPullRequest("p1"), []byte(`{"request_id":"r1"}`), 5*time.Second); err != nil || string(rep.Data) != `{"ok":true}` {
		t.Fatalf("decode worker's KV pull from p1: %v %v", rep, err)
	}

	router, errsR := iso.connect(t, "router", "")
	routerJS, _ := bus.JetStream(router)
	cons, err := routerJS.CreateOrUpdateConsumer(ctx, subjects.StreamHandoffs, jetstream.ConsumerConfig{
		Durable: subjects.RouterHandoffsConsumer, FilterSubject: subjects.HandoffAll(), AckPolicy: jetstream.AckExplicitPolicy})
	if err != nil {
		t.Fatalf("router cannot create %s: %v", subjects.RouterHandoffsConsumer, err)
	}
	batch, err := cons.Fetch(1, jetstream.FetchMaxWait(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	got := 0
	for msg := range batch.Messages() {
		var kv schemas.KVHandle
		if err := schemas.Unmarshal(schemas.JSON, msg.Data(), &kv); err != nil || kv.RequestID != "r1" || msg.Subject() != subjects.Handoff("a", "r1") {
			t.Fatalf("router read %s %q (%v)", msg.Subject(), msg.Data(), err)
		}
		if err := msg.DoubleAck(ctx); err != nil {
			t.Fatalf("router cannot ack a handle: %v", err)
		}
		got++
	}
	if got != 1 || batch.Error() != nil {
		t.Fatalf("router read %d handles (%v), want the one stored", got, batch.Error())
	}
	for name, e := range map[string]*errs{"prefill worker": errsP, "decode worker": errsD, "router": errsR} {
		e.mu.Lock()
		for _, err := range e.list {
			t.Errorf("%s hit an error doing what it may: %v", name, err)
		}
		e.mu.Unlock()
	}

	ncB, errsB := iso.connect(t, "b", InboxPrefix("b"))
	jsB, _ := bus.JetStream(ncB)
	t.Run("a tenant cannot forge a handle", func(t *testing.T) {
		for _, subj := range []string{subjects.Handoff("a", "r1"), subjects.Handoff("b", "mine")} {
			m := nats.NewMsg(subj)
			m.Data = schemas.MustMarshal(schemas.JSON, schemas.KVHandle{RequestID: "r1", Tenant: "a", Worker: "evil"})
			m.Header.Set(schemas.HeaderMsgID, "forged-"+subj)
			sctx, scancel := context.WithTimeout(ctx, 500*time.Millisecond)
			_, err := jsB.PublishMsg(sctx, m)
			scancel()
			if err == nil {
				t.Fatalf("b's handle on %s was stored", subj)
			}
			errsB.waitFor(t, `Permissions Violation for Publish to "`+subj+`"`)
		}
		st, _ := opsJS.Stream(ctx, subjects.StreamHandoffs)
		if info, _ := st.Info(ctx); info.State.Msgs != 1 {
			t.Fatalf("HANDOFFS holds %d messages, want only the worker's", info.State.Msgs)
		}
	})
	t.Run("a tenant cannot read handles or ask for a pull", func(t *testing.T) {
		for _, subj := range []string{subjects.HandoffAll(), subjects.Handoff("a", ">"), subjects.Handoff("b", ">")} {
			if _, err := ncB.SubscribeSync(subj); err != nil {
				t.Fatal(err)
			}
			errsB.waitFor(t, `Permissions Violation for Subscription to "`+subj+`"`)
		}
		for _, api := range []string{"$JS.API.CONSUMER.MSG.NEXT." + subjects.StreamHandoffs + "." + subjects.RouterHandoffsConsumer,
			"$JS.API.CONSUMER.CREATE." + subjects.StreamHandoffs + ".mine." + subjects.Handoff("b", ">"),
			"$JS.API.STREAM.MSG.GET." + subjects.StreamHandoffs, subjects.KVPullRequest("p1")} {
			if _, err := ncB.Request(api, []byte(`{}`), 500*time.Millisecond); err == nil {
				t.Fatalf("b got an answer from %s", api)
			}
			errsB.waitFor(t, `Permissions Violation for Publish to "`+api+`"`)
		}
	})
}
