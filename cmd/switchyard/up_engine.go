package main

import (
	"context"
	"fmt"
	"strings"

	"github.com/switchyard-ai/switchyard/internal/core/catalog"
	"github.com/switchyard-ai/switchyard/services/stack"
	"github.com/switchyard-ai/switchyard/services/worker"
)

// engineFleet is `up --backend openai`: one worker in front of each running
// engine at urls (comma-separated), all serving model on gpu. A model the
// catalog lacks is described by the first engine, so `up` can serve
// whatever the engine was given (docs/engines.md).
func engineFleet(ctx context.Context, backend, urls, gpu, model string) ([]stack.WorkerSpec, *catalog.Catalog, error) {
	if backend != "openai" {
		return nil, nil, fmt.Errorf("up: unknown backend %q (sim or openai)", backend)
	}
	if strings.TrimSpace(urls) == "" {
		return nil, nil, fmt.Errorf("up: --backend openai needs --openai-url, the engine's root URL (e.g. http://127.0.0.1:11434)")
	}
	var fleet []stack.WorkerSpec
	for _, u := range strings.Split(urls, ",") {
		if u = strings.TrimSpace(u); u != "" {
			fleet = append(fleet, stack.WorkerSpec{GPU: gpu, Model: model, Dtype: "bf16", TP: 1, Backend: "openai", OpenAIURL: u})
		}
	}
	cat, err := worker.LearnServedModel(ctx, catalog.Default(), worker.Config{ID: "up", Model: model, Backend: "openai", OpenAIURL: fleet[0].OpenAIURL})
	if err != nil {
		return nil, nil, err
	}
	if _, ok := cat.GPU(gpu); !ok {
		return nil, nil, fmt.Errorf("up: unknown --gpu %q (see `switchyard gpu list`; cpu for an engine on the CPU)", gpu)
	}
	return fleet, cat, nil
}
