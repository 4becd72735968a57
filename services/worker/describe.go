package worker

import (
	"context"
	"fmt"
	"time"

	"github.com/switchyard-ai/switchyard/internal/adapter/backend/openai"
	"github.com/switchyard-ai/switchyard/internal/core/catalog"
)

// LearnServedModel makes sure the catalog a worker is built with knows the
// model it serves. A simulated worker must serve a catalog model; a worker
// fronting a real engine may serve anything the engine was given, so when
// the catalog lacks the name, the engine is asked to describe it (Ollama's
// /api/show) and a learning copy of the catalog is returned with the
// model in it. The worker's heartbeats then carry the description, so the
// router and admitter learn the model too (fleetlearn).
func LearnServedModel(ctx context.Context, cat *catalog.Catalog, cfg Config) (*catalog.Catalog, error) {
	if cat == nil {
		cat = catalog.Default()
	}
	if _, ok := cat.Model(cfg.Model); ok || cfg.Backend != "openai" {
		return cat, nil
	}
	if cfg.OpenAIURL == "" {
		return nil, fmt.Errorf("worker %s: the openai backend needs its server's URL", cfg.ID)
	}
	served := cfg.OpenAIModel
	if served == "" {
		served = cfg.Model
	}
	dctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	spec, err := openai.New(cfg.OpenAIURL, served).Describe(dctx, served)
	if err != nil {
		return nil, fmt.Errorf("worker %s: model %q is not in the catalog and the engine at %s cannot describe it (%v); "+
			"name a catalog model with --model and the engine's name with --openai-model, or add the model with --catalog FILE",
			cfg.ID, cfg.Model, cfg.OpenAIURL, err)
	}
	learned := cat.Learning()
	if _, err := learned.Learn(cfg.Model, spec); err != nil {
		return nil, fmt.Errorf("worker %s: %w", cfg.ID, err)
	}
	return learned, nil
}
