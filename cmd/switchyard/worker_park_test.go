package main

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/switchyard-ai/switchyard/internal/testkit/bustest"
	"github.com/switchyard-ai/switchyard/schemas"
	"github.com/switchyard-ai/switchyard/services/svc"
	"github.com/switchyard-ai/switchyard/subjects"
)

// TestWorkerParkFlag: `worker --park MODEL[@TIER],...` reads each entry,
// tier host when left out; a bad tier, an empty model and a real engine's
// worker are refused, each error naming what is wrong. (What the catalog
// says of each model, Worker.Park checks: TestWorkerParkHeartbeats.)
func TestWorkerParkFlag(t *testing.T) {
	tests := []struct {
		park, backend string
		want          []string // model@tier, in flag order
		err           string
	}{
		{park: ""},
		{park: "qwen2.5-7b", want: []string{"qwen2.5-7b@host"}},
		{park: "Qwen2.5-7B@page_cache", want: []string{"Qwen2.5-7B@page_cache"}},
		{park: "qwen2.5-7b@disk, llama-3.2-3b@remote,", want: []string{"qwen2.5-7b@disk", "llama-3.2-3b@remote"}},
		{park: "qwen2.5-7b@", want: []string{"qwen2.5-7b@host"}},
		{park: "qwen2.5-7b@hbm", err: `parked tier "hbm"`},
		{park: "qwen2.5-7b@nvme", err: `parked tier "nvme"`},
		{park: "@host", err: `--park "@host": want MODEL[@TIER]`},
		{park: "qwen2.5-7b", backend: "openai", err: "--park with --backend openai: --park stages weights on the simulated engine"},
		{park: "", backend: "openai"},
	}
	for _, tc := range tests {
		t.Run(tc.park+"/"+tc.backend, func(t *testing.T) {
			if tc.backend == "" {
				tc.backend = "sim"
			}
			parks, err := parsePark(tc.park, tc.backend)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("err %v, want one naming %q", err, tc.err)
				}
				return
			}
			var got []string
			for _, p := range parks {
				got = append(got, p.String())
			}
			if err != nil || !slices.Equal(got, tc.want) {
				t.Fatalf("parked %v, err %v; want %v", got, err, tc.want)
			}
		})
	}
}

// TestWorkerParkHeartbeats runs `switchyard worker --park` against a real
// embedded server: its heartbeats list the model it serves first and the
// parked ones after it, each at its tier, which is what the controller
// prices a switch to it by. A --park the catalog refuses (an unknown model,
// the worker's own, one named twice) stops it before it serves.
func TestWorkerParkHeartbeats(t *testing.T) {
	env := bustest.StartListening(t, "127.0.0.1:0")
	srv, nc := env.Server, env.NC
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	args := func(park string) []string {
		return []string{"--nats", srv.ClientURL(), "--id", "gpu-0", "--gpu", "h100", "--model", "llama-3.1-8b", "--park", park}
	}
	for _, bad := range []struct{ park, err string }{
		{"nope-1b", `unknown model "nope-1b"`},
		{"llama-3.1-8b", "it is the model this worker serves"},
		{"Llama-3.1-8B@disk", "it is the model this worker serves"},
		{"qwen2.5-7b,Qwen2.5-7B@disk", "qwen2.5-7b is parked here already"},
	} {
		if err := runWorker(ctx, args(bad.park), io.Discard); err == nil || !strings.Contains(err.Error(), bad.err) {
			t.Fatalf("worker --park %s: err %v, want one naming %q", bad.park, err, bad.err)
		}
	}
	hbs, err := nc.SubscribeSync(subjects.Heartbeat("h100", "gpu-0"))
	if err != nil {
		t.Fatal(err)
	}
	wctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- runWorker(wctx, args("qwen2.5-7b,llama-3.2-3b@disk"), io.Discard) }()
	defer func() {
		stop()
		if err := <-done; err != nil {
			t.Errorf("worker: %v", err)
		}
	}()
	m, err := hbs.NextMsg(10 * time.Second)
	if err != nil {
		t.Fatalf("no heartbeat from the worker: %v", err)
	}
	var hb schemas.Heartbeat
	if err := svc.Decode(m.Header, m.Data, &hb); err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, ms := range hb.Models {
		got = append(got, fmt.Sprintf("%s@%s", ms.Name, ms.Tier))
	}
	want := []string{"llama-3.1-8b@" + schemas.TierHBM, "llama-3.2-3b@" + schemas.TierDisk, "qwen2.5-7b@" + schemas.TierHost}
	if !slices.Equal(got, want) {
		t.Fatalf("heartbeat models %v (%+v), want %v", got, hb.Models, want)
	}
}
