package stack

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"golang.org/x/crypto/bcrypt"

	"github.com/switchyard-ai/switchyard/internal/adapter/auth"
	"github.com/switchyard-ai/switchyard/internal/adapter/bus"
	"github.com/switchyard-ai/switchyard/schemas"
	"github.com/switchyard-ai/switchyard/services/client"
	"github.com/switchyard-ai/switchyard/subjects"
)

// violations collects a connection's asynchronous permission errors.
type violations struct {
	mu   sync.Mutex
	seen []string
}

func (v *violations) handler(_ *nats.Conn, _ *nats.Subscription, err error) {
	v.mu.Lock()
	v.seen = append(v.seen, err.Error())
	v.mu.Unlock()
}

func (v *violations) has(subject string) bool { return v.refused("Publish to", subject) }

// refused reports whether the server refused what ("Publish to",
// "Subscription to") on subject.
func (v *violations) refused(what, subject string) bool {
	v.mu.Lock()
	defer v.mu.Unlock()
	for _, s := range v.seen {
		if strings.Contains(s, `Permissions Violation for `+what+` "`+subject+`"`) {
			return true
		}
	}
	return false
}

// TestTenantsCannotTouchServiceConsumers runs the whole system under a
// `switchyard auth` config, every service as its own user, and shows that a
// tenant is refused the consumer API on every consumer a service owns — the
// admitter's consumer on RESULTS that saw every tenant's results, the
// routers' on ADMITTED, the workers' on DISPATCH — and another tenant's
// stored results, while both tenants are served and read their own results
// live and from RESULTS, and the services keep serving afterwards.
func TestTenantsCannotTouchServiceConsumers(t *testing.T) {
	g, err := auth.Generate(auth.Config{Tenants: []string{"acme", "globex"}, Cost: bcrypt.MinCost})
	if err != nil {
		t.Fatal(err)
	}
	conf := filepath.Join(t.TempDir(), "auth.conf")
	if err := os.WriteFile(conf, []byte(g.Config), 0o600); err != nil {
		t.Fatal(err)
	}
	pw := map[string]string{}
	for _, u := range g.Users {
		pw[u.Name] = u.Password
	}
	st := startStack(t, Config{Workers: 2, Auth: &Auth{ConfigFile: conf, Passwords: pw}})
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()

	tenant := func(name string) (*nats.Conn, *client.Client, *violations) {
		v := &violations{}
		nc, err := st.Server.Connect(name, nats.UserInfo(name, pw[name]), nats.CustomInboxPrefix(auth.InboxPrefix(name)), nats.ErrorHandler(v.handler))
		if err != nil {
			t.Fatalf("connect %s: %v", name, err)
		}
		t.Cleanup(nc.Close)
		cl, err := client.New(nc, client.WithJSON())
		if err != nil {
			t.Fatal(err)
		}
		return nc, cl, v
	}
	acmeNC, acme, acmeV := tenant("acme")
	_, globex, _ := tenant("globex")

	live, err := acmeNC.SubscribeSync(subjects.Result("acme", ">"))
	if err != nil {
		t.Fatal(err)
	}
	if err := acmeNC.Flush(); err != nil {
		t.Fatal(err)
	}
	serve := func(cl *client.Client, tenant, id string) schemas.Result {
		t.Helper()
		r, err := cl.Do(ctx, tenant, &schemas.Request{ID: id, Model: "llama-3.1-8b", Prompt: "hello from " + tenant, MaxTokens: 8})
		if err != nil || r.Status != schemas.StatusOK {
			t.Fatalf("%s not served: %+v %v", id, r, err)
		}
		return r
	}
	serve(acme, "acme", "acme-1")
	for i := range 3 {
		serve(globex, "globex", fmt.Sprintf("globex-%d", i))
	}
	if m, err := live.NextMsg(10 * time.Second); err != nil || !strings.HasSuffix(m.Subject, ".acme-1") {
		t.Fatalf("acme's live result: %v %v", m, err)
	}
	for _, s := range acmeV.seen {
		t.Fatalf("acme hit a permission error doing what it may: %s", s)
	}

	// Every consumer the services own, read as the operator.
	opsNC, err := st.Connect("ops-inspector")
	if err != nil {
		t.Fatal(err)
	}
	opsJS, _ := bus.JetStream(opsNC)
	type owned struct{ stream, name string }
	var consumers []owned
	// HANDOFFS: the routers' router-handoffs, whose KV handles name every
	// tenant's split requests and the workers holding their KV.
	for _, name := range []string{subjects.StreamSubmit, subjects.StreamAdmitted, subjects.StreamDispatch, subjects.StreamResults, subjects.StreamHandoffs} {
		s, err := opsJS.Stream(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		names := s.ConsumerNames(ctx)
		for n := range names.Name() {
			consumers = append(consumers, owned{name, n})
		}
	}
	admitterResults := subjects.AdmitterResultsConsumer("admitter-1")
	found, handoffs := false, false
	for _, c := range consumers {
		found = found || (c.stream == subjects.StreamResults && c.name == admitterResults)
		handoffs = handoffs || (c.stream == subjects.StreamHandoffs && c.name == subjects.RouterHandoffsConsumer)
	}
	if !found || !handoffs || len(consumers) < 5 {
		t.Fatalf("service consumers %v: want the admitter's %s on RESULTS and the routers' %s on HANDOFFS among them",
			consumers, admitterResults, subjects.RouterHandoffsConsumer)
	}

	// acme tries each, with its replies on its own inbox: no reply may come.
	replies, err := acmeNC.SubscribeSync(auth.InboxPrefix("acme") + ".attack.>")
	if err != nil {
		t.Fatal(err)
	}
	pull, _ := json.Marshal(map[string]any{"batch": 16, "expires": int64(time.Second)})
	var attempts []string
	try := func(subject string, body []byte) {
		attempts = append(attempts, subject)
		if err := acmeNC.PublishRequest(subject, fmt.Sprintf("%s.attack.%d", auth.InboxPrefix("acme"), len(attempts)), body); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range consumers {
		try("$JS.API.CONSUMER.MSG.NEXT."+c.stream+"."+c.name, pull)
		try("$JS.API.CONSUMER.INFO."+c.stream+"."+c.name, nil)
		try("$JS.API.CONSUMER.DELETE."+c.stream+"."+c.name, nil)
		// An update that would narrow the admitter's filter to acme's own
		// results is as much an attack as a read.
		upd, _ := json.Marshal(map[string]any{"stream_name": c.stream, "config": map[string]any{
			"durable_name": c.name, "filter_subject": subjects.Result("acme", ">"), "ack_policy": "explicit"}})
		try("$JS.API.CONSUMER.CREATE."+c.stream+"."+c.name+"."+subjects.Result("acme", ">"), upd)
	}
	for _, id := range []string{"globex-0", "globex-1"} {
		try(auth.DirectGetResult("globex", id), nil)
	}
	try("$JS.API.DIRECT.GET."+subjects.StreamResults, []byte(`{"last_by_subj":"sy.result.globex.globex-0"}`))
	try("$JS.API.STREAM.MSG.GET."+subjects.StreamResults, []byte(`{"last_by_subj":"sy.result.globex.globex-0"}`))
	// A forged KV handle would send a decode worker to pull from wherever
	// acme says, for a request of acme's or another tenant's; a forged
	// pull would release a prefill worker's KV.
	try(subjects.Handoff("globex", "globex-0"), []byte(`{"request_id":"globex-0","tenant":"globex","worker":"evil"}`))
	try(subjects.Handoff("acme", "acme-1"), []byte(`{"request_id":"acme-1","tenant":"acme","worker":"evil"}`))
	try(subjects.KVPullRequest("w1-0"), []byte(`{"request_id":"globex-0","tenant":"globex"}`))
	try("$JS.API.STREAM.MSG.GET."+subjects.StreamHandoffs, []byte(`{"last_by_subj":"sy.handoff.globex.globex-0"}`))
	for _, subj := range []string{subjects.HandoffAll(), subjects.Handoff("acme", ">")} {
		if _, err := acmeNC.SubscribeSync(subj); err != nil {
			t.Fatal(err)
		}
	}
	try("$JS.API.CONSUMER.CREATE."+subjects.StreamResults+".mine."+subjects.Result("acme", ">"), []byte(`{"stream_name":"RESULTS","config":{"name":"mine","filter_subject":"sy.result.acme.>","deliver_subject":"sy.submit.globex"}}`))
	if err := acmeNC.Flush(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(15 * time.Second)
	for _, subj := range attempts {
		for !acmeV.has(subj) {
			if time.Now().After(deadline) {
				t.Fatalf("the server did not refuse acme %s", subj)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	if m, err := replies.NextMsg(500 * time.Millisecond); err == nil {
		t.Fatalf("acme got an answer on %s: %s", m.Subject, m.Data)
	}
	for _, subj := range []string{subjects.HandoffAll(), subjects.Handoff("acme", ">")} {
		for !acmeV.refused("Subscription to", subj) {
			if time.Now().After(deadline) {
				t.Fatalf("the server let acme subscribe to %s", subj)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}

	// The services are untouched and still serving: the admitter's
	// consumer keeps its filter, and both tenants are answered.
	ci, err := opsJS.Consumer(ctx, subjects.StreamResults, admitterResults)
	if err != nil || ci.CachedInfo().Config.FilterSubject != subjects.ResultAll {
		t.Fatalf("admitter's results consumer after the attacks: %+v %v", ci, err)
	}
	serve(acme, "acme", "acme-2")
	r := serve(globex, "globex", "globex-9")
	// A tenant reads its own stored result late, by direct get.
	if late, err := globex.Result(ctx, "globex", "globex-9"); err != nil || late.Text != r.Text {
		t.Fatalf("globex reading its own stored result: %+v %v", late, err)
	}
}

// TestReusedIDAnsweredWithStoredResult: an id submitted again after SUBMIT's
// duplicate window is not served twice; a client listening on it is
// answered at once with the result already stored (marked Sy-Reused-Id),
// and RESULTS still holds one result for the id.
func TestReusedIDAnsweredWithStoredResult(t *testing.T) {
	st := startStack(t, Config{Workers: 1, Streams: subjects.StreamOptions{DuplicateWindow: 500 * time.Millisecond}})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	nc, err := st.Connect("reuser")
	if err != nil {
		t.Fatal(err)
	}
	cl, err := client.New(nc, client.WithJSON())
	if err != nil {
		t.Fatal(err)
	}
	first, err := cl.Do(ctx, "acme", &schemas.Request{ID: "again", Model: "llama-3.1-8b", Prompt: "first ask", MaxTokens: 8})
	if err != nil || first.Status != schemas.StatusOK {
		t.Fatalf("first submission: %+v %v", first, err)
	}
	time.Sleep(time.Second) // past the duplicate window
	live, err := nc.SubscribeSync(subjects.Result("acme", "again"))
	if err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	if _, err := cl.Submit(ctx, "acme", &schemas.Request{ID: "again", Model: "llama-3.1-8b", Prompt: "a different ask", MaxTokens: 32}); err != nil {
		t.Fatal(err)
	}
	m, err := live.NextMsg(10 * time.Second)
	if err != nil {
		t.Fatalf("the reused id was not answered: %v", err)
	}
	got, err := client.DecodeResult(m.Header, m.Data)
	if err != nil || m.Header.Get(subjects.HeaderReusedID) == "" || got.Text != first.Text || got.Usage != first.Usage {
		t.Fatalf("reused id answered with %+v (headers %v, err %v), want the stored first result marked %s", got, m.Header, err, subjects.HeaderReusedID)
	}
	if extra, err := live.NextMsg(time.Second); err == nil {
		t.Fatalf("a second answer for the reused id: %s", extra.Data)
	}
	opsJS, _ := bus.JetStream(nc)
	rs, err := opsJS.Stream(ctx, subjects.StreamResults)
	if err != nil {
		t.Fatal(err)
	}
	info, err := rs.Info(ctx, jetstream.WithSubjectFilter(subjects.Result("acme", "again")))
	if err != nil || info.State.Subjects[subjects.Result("acme", "again")] != 1 {
		t.Fatalf("RESULTS holds %v for the id, want 1 (%v)", info.State.Subjects, err)
	}
}
