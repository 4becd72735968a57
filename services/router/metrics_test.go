package router_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/switchyard-ai/switchyard/internal/testkit/bustest"
	"github.com/switchyard-ai/switchyard/schemas"
	"github.com/switchyard-ai/switchyard/services/svc"
	"github.com/switchyard-ai/switchyard/subjects"
)

// TestQueueWaitCountsExpiredRequests: a request that expires in the queue
// (no worker ever joins) is in the queue-wait histogram, and the retry and
// breaker counters exist at 0 before any retry or breaker event.
func TestQueueWaitCountsExpiredRequests(t *testing.T) {
	env := bustest.StartProvisioned(t, subjects.StreamOptions{})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	tr := startRouter(t, ctx, env, "router-test")
	scrape := tr.scrape
	for _, want := range []string{`switchyard_retries_total{allowed="true"} 0`, `switchyard_retries_total{allowed="false"} 0`,
		`switchyard_breaker_transitions_total{to="open"} 0`, `switchyard_breaker_transitions_total{to="closed"} 0`} {
		if !strings.Contains(scrape(), want+"\n") {
			t.Errorf("missing %s before any event", want)
		}
	}
	sub, err := env.NC.SubscribeSync(subjects.Result("acme", ">"))
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond) // the router's consumers exist
	now := time.Now()
	adm := schemas.Admitted{V: schemas.Version, Tenant: "acme", Priority: schemas.PriorityStandard, Model: "llama-3.1-8b",
		SubmittedAt: now, Deadline: now.Add(700 * time.Millisecond), PromptTokens: 4,
		Request: schemas.Request{V: schemas.Version, ID: "expire-1", Model: "llama-3.1-8b", Prompt: "hello", MaxTokens: 4}}
	m, err := svc.Encode(subjects.Admitted(adm.Priority, subjects.DeadlineBucket(700*time.Millisecond), "acme"), schemas.Msgpack, adm, adm.Request.ID)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := env.JS.PublishMsg(ctx, m); err != nil {
		t.Fatal(err)
	}
	if _, err := sub.NextMsg(10 * time.Second); err != nil {
		t.Fatalf("no result for a request that should expire in the queue: %v", err)
	}
	if text := scrape(); !strings.Contains(text, "switchyard_router_queue_seconds_count 1\n") {
		t.Errorf("queue-wait histogram does not count the expired request:\n%s", grep(text, "switchyard_router_queue_seconds"))
	}
	// The fairness state is exported: acme's counter, kept until it has
	// been idle a minute (queue.ForgetIdleAfter); no peers.
	want := "switchyard_router_fair_tenants 1\nswitchyard_router_fair_peers 0\nswitchyard_router_fair_peer_tenants 0"
	if got := grep(scrape(), "switchyard_router_fair_"); !strings.Contains(got, "switchyard_router_fair_tenants 1") ||
		!strings.Contains(got, "switchyard_router_fair_peers 0") || !strings.Contains(got, "switchyard_router_fair_peer_tenants 0") {
		t.Errorf("fairness state gauges:\n%s\nwant\n%s", got, want)
	}
}

func grep(text, prefix string) string {
	var out []string
	for _, l := range strings.Split(text, "\n") {
		if strings.HasPrefix(l, prefix) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
