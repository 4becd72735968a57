package main

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/switchyard-ai/switchyard/internal/core/catalog"
	"github.com/switchyard-ai/switchyard/internal/testkit/bustest"
	"github.com/switchyard-ai/switchyard/schemas"
	"github.com/switchyard-ai/switchyard/services/svc"
	"github.com/switchyard-ai/switchyard/subjects"
)

// TestWorkerParkFlag: `worker --park MODEL[@TIER],...` names each model as
// the catalog does, tier host when left out; a model the catalog lacks, the
// worker's own model, one named twice, a bad tier, an empty model and a
// real engine's worker are refused, each error naming what is wrong.
func TestWorkerParkFlag(t *testing.T) {
	const own = "llama-3.1-8b"
	tests := []struct {
		park, backend string
		want          []string // model@tier, in flag order
		err           string
	}{
		{park: ""},
		{park: "qwen2.5-7b", want: []string{"qwen2.5-7b@host"}},
		{park: "Qwen2.5-7B@page_cache", want: []string{"qwen2.5-7b@page_cache"}},
		{park: "qwen2.5-7b@disk, llama-3.2-3b@remote,", want: []string{"qwen2.5-7b@disk", "llama-3.2-3b@remote"}},
		{park: "qwen2.5-7b@", want: []string{"qwen2.5-7b@host"}},
		{park: "qwen2.5-7b@hbm", err: `parked tier "hbm"`},
		{park: "qwen2.5-7b@nvme", err: `parked tier "nvme"`},
		{park: "@host", err: `--park "@host": want MODEL[@TIER]`},
		{park: "nope-1b", err: `unknown model "nope-1b"`},
		{park: "llama-3.1-8b", err: "it is the model this worker serves"},
		{park: "Llama-3.1-8B@disk", err: "it is the model this worker serves"},
		{park: "qwen2.5-7b,Qwen2.5-7B@disk", err: "qwen2.5-7b named twice"},
		{park: "qwen2.5-7b", backend: "openai", err: "--park with --backend openai: --park stages weights on the simulated engine"},
		{park: "", backend: "openai"},
	}
	for _, tc := range tests {
		t.Run(tc.park+"/"+tc.backend, func(t *testing.T) {
			if tc.backend == "" {
				tc.backend = "sim"
			}
			parks, err := parsePark(tc.park, tc.backend)
			if err == nil {
				parks, err = checkPark(parks, catalog.Default(), "h100", own, "bf16", 1)
			}
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
// prices a switch to it by. A bad --park stops it before it serves.
func TestWorkerParkHeartbeats(t *testing.T) {
	env := bustest.StartListening(t, "127.0.0.1:0")
	srv, nc := env.Server, env.NC
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	args := func(park string) []string {
		return []string{"--nats", srv.ClientURL(), "--id", "gpu-0", "--gpu", "h100", "--model", "llama-3.1-8b", "--park", park}
	}
	if err := runWorker(ctx, args("llama-3.1-8b"), io.Discard); err == nil || !strings.Contains(err.Error(), "it is the model this worker serves") {
		t.Fatalf("worker parking its own model: err %v, want it refused", err)
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
