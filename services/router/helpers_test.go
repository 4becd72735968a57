package router_test

import (
	"bytes"
	"context"
	"testing"

	"github.com/switchyard-ai/switchyard/internal/core/catalog"
	"github.com/switchyard-ai/switchyard/internal/core/perf"
	"github.com/switchyard-ai/switchyard/internal/testkit/bustest"
	"github.com/switchyard-ai/switchyard/services/router"
	"github.com/switchyard-ai/switchyard/services/svc"
)

// testRouter is one lease-mode router over a test's server with the
// built-in catalog, running until stop or the test's end.
type testRouter struct {
	sh  *svc.Shell
	reg svc.Registry
	// exited is closed when Run returns, with its error in err.
	exited chan struct{}
	err    error
	stop   func() error
}

// startRouter builds and runs a router named instance; its metrics are
// registered before it runs, so a scrape sees every series it declares.
func startRouter(t *testing.T, ctx context.Context, env bustest.Env, instance string) *testRouter {
	t.Helper()
	sh, err := svc.New("router", instance, env.NC, nil)
	if err != nil {
		t.Fatal(err)
	}
	tr := &testRouter{sh: sh, exited: make(chan struct{})}
	tr.reg.Add(sh.Metrics)
	r := router.New(sh, router.Config{Cost: perf.NewPredictor(catalog.Default())})
	runCtx, cancel := context.WithCancel(ctx)
	go func() { tr.err = r.Run(runCtx); close(tr.exited) }()
	tr.stop = func() error {
		cancel()
		<-tr.exited
		return tr.err
	}
	t.Cleanup(func() { tr.stop() })
	return tr
}

// scrape is the router's metrics in the Prometheus text format.
func (tr *testRouter) scrape() string {
	var b bytes.Buffer
	tr.reg.WritePrometheusContext(context.Background(), &b)
	return b.String()
}
