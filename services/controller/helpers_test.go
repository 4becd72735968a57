package controller

import (
	"context"
	"testing"
	"time"

	"github.com/switchyard-ai/switchyard/internal/core/catalog"
	"github.com/switchyard-ai/switchyard/internal/core/perf"
	"github.com/switchyard-ai/switchyard/internal/testkit/bustest"
	"github.com/switchyard-ai/switchyard/schemas"
	"github.com/switchyard-ai/switchyard/services/router"
	"github.com/switchyard-ai/switchyard/services/svc"
	"github.com/switchyard-ai/switchyard/subjects"
)

// withRouter starts a router and a controller with cfg on env's server,
// each until the test ends (its error, if any, fails the test).
func withRouter(t *testing.T, ctx context.Context, env bustest.Env, cfg Config) *Controller {
	t.Helper()
	shell := func(service, instance string) *svc.Shell {
		sh, err := svc.New(service, instance, env.NC, nil)
		if err != nil {
			t.Fatal(err)
		}
		return sh
	}
	run := func(name string, fn func(context.Context) error) {
		rctx, stop := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() { done <- fn(rctx) }()
		t.Cleanup(func() {
			stop()
			if err := <-done; err != nil {
				t.Errorf("%s: %v", name, err)
			}
		})
	}
	r := router.New(shell("router", "r1"), router.Config{Cost: perf.NewPredictor(catalog.Default())})
	run("router", r.Run)
	c, err := New(shell("controller", "c1"), cfg)
	if err != nil {
		t.Fatal(err)
	}
	run("controller", c.Run)
	return c
}

// admit publishes a standard request of acme's for model with id, a minute
// to its deadline, as the admitter would.
func admit(t *testing.T, ctx context.Context, env bustest.Env, id, model string) {
	t.Helper()
	now := time.Now()
	adm := schemas.Admitted{V: schemas.Version, Tenant: "acme", Priority: schemas.PriorityStandard, Model: model,
		SubmittedAt: now, Deadline: now.Add(time.Minute), PromptTokens: 4,
		Request: schemas.Request{V: schemas.Version, ID: id, Model: model, Prompt: "hello", MaxTokens: 4}}
	m, err := svc.Encode(subjects.Admitted(adm.Priority, subjects.DeadlineBucket(time.Minute), "acme"), schemas.Msgpack, adm, adm.Request.ID)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := env.JS.PublishMsg(ctx, m); err != nil {
		t.Fatal(err)
	}
}
