package controller

import (
	"context"
	"fmt"
	"maps"
	"testing"
	"time"

	"github.com/switchyard-ai/switchyard/internal/core/control"
	"github.com/switchyard-ai/switchyard/internal/testkit/bustest"
	"github.com/switchyard-ai/switchyard/internal/testkit/waitfor"
	"github.com/switchyard-ai/switchyard/schemas"
	"github.com/switchyard-ai/switchyard/subjects"
)

const llama, qwen = "llama-3.1-8b", "qwen2.5-7b"

// TestQueuedBook sums the routers' queue depth per model and scales it to
// the router consumers' backlog: the routers give the mix, the backlog the
// size; no figure heard (or one that lapsed) leaves the models unknown.
func TestQueuedBook(t *testing.T) {
	t0 := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	pools := []control.Pool{{GPU: "h100", Model: llama}, {GPU: "h100", Model: qwen}}
	tests := []struct {
		name    string
		notes   map[string]map[string]int // by router, all at t0
		at      time.Duration
		backlog int
		want    map[string]int
	}{
		{name: "no router heard", backlog: 7},
		{name: "two routers add up", notes: map[string]map[string]int{"r1": {qwen: 3}, "r2": {qwen: 2, llama: 1}}, backlog: 6,
			want: map[string]int{qwen: 5, llama: 1}},
		{name: "backlog unknown: the routers' figure as it is", notes: map[string]map[string]int{"r1": {qwen: 3, llama: 1}}, backlog: -1,
			want: map[string]int{qwen: 3, llama: 1}},
		{name: "requests not pulled yet take the routers' mix", notes: map[string]map[string]int{"r1": {qwen: 3, llama: 1}}, backlog: 40,
			want: map[string]int{qwen: 30, llama: 10}},
		{name: "a dead router's figure not lapsed yet counts no more than the backlog",
			notes: map[string]map[string]int{"dead": {qwen: 4}, "r2": {qwen: 4}}, backlog: 4, want: map[string]int{qwen: 4}},
		{name: "scaled counts add up to the backlog", notes: map[string]map[string]int{"r1": {qwen: 2, llama: 1}}, backlog: 4,
			want: map[string]int{qwen: 3, llama: 1}},
		{name: "a tie goes by name", notes: map[string]map[string]int{"r1": {qwen: 1, llama: 1}}, backlog: 3,
			want: map[string]int{qwen: 1, llama: 2}},
		{name: "an unrepeated figure lapses", notes: map[string]map[string]int{"r1": {qwen: 3}}, at: queuedStaleAfter + time.Second, backlog: 3},
		{name: "routers hold nothing, nothing queued: a known zero", notes: map[string]map[string]int{"r1": {}}, backlog: 0, want: map[string]int{}},
		{name: "routers hold nothing, backlog waiting: mix unknown", notes: map[string]map[string]int{"r1": {}}, backlog: 5},
		{name: "models named as the pools name them", notes: map[string]map[string]int{"r1": {"Qwen2.5-7B": 2, "mystery-1b": 1}}, backlog: 3,
			want: map[string]int{qwen: 2, "mystery-1b": 1}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var b queuedBook
			for r, q := range tc.notes {
				b.note(r, map[string]int{llama: 9}, t0.Add(-time.Second)) // an earlier figure, replaced
				b.note(r, q, t0)
			}
			got := b.byModel(t0.Add(tc.at), tc.backlog, poolModels(pools, nil))
			if (got == nil) != (tc.want == nil) || !maps.Equal(got, tc.want) {
				t.Fatalf("queued by model %v (nil %t), want %v (nil %t)", got, got == nil, tc.want, tc.want == nil)
			}
		})
	}
}

// TestInputsCarryRoutersQueueByModel: on the real embedded server, a
// router holds admitted requests no worker serves (three for Qwen, two
// for Llama), queued or held for a pool's cold start; the live
// controller's inputs then say which model the queue waits for
// (control.Inputs.QueuedByModel), which GPUs that change model read first.
// The controller had only the per-class backlog and split it over the
// pools by their capacity.
func TestInputsCarryRoutersQueueByModel(t *testing.T) {
	env := bustest.StartProvisioned(t, subjects.StreamOptions{})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c := withRouter(t, ctx, env, Config{Control: control.Config{
		Pools:       []control.Pool{{GPU: "h100", Model: llama, Max: 2}, {GPU: "h100", Model: qwen, Max: 2}},
		Interval:    200 * time.Millisecond,
		ShiftModels: true, Inventory: map[string]int{"h100": 2},
	}})
	waitfor.True(t, "the router's consumers", 10*time.Second, func() bool {
		for _, class := range schemas.Priorities {
			if _, err := env.JS.Consumer(ctx, subjects.StreamAdmitted, subjects.RouterConsumer(class)); err != nil {
				return false
			}
		}
		return true
	})
	for i, model := range []string{qwen, qwen, llama, qwen, llama} {
		admit(t, ctx, env, fmt.Sprintf("q-%d", i), model)
	}
	want := map[string]int{qwen: 3, llama: 2}
	var got control.Inputs
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(waitfor.Poll) {
		if got = c.inputs(ctx); maps.Equal(got.QueuedByModel, want) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after 10 s the controller's inputs say queued by model %v (nil %t), backlog %v: want %v from the router's queue",
				got.QueuedByModel, got.QueuedByModel == nil, got.Queued, want)
		}
	}
	// Queued by class or held for a pool's cold start (the controller
	// describes its pools to the router every interval): counted alike.
	t.Logf("queued by model %v; by class %v; held %v", got.QueuedByModel, got.Queued, got.Held)
}
