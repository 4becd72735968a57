package main

import (
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/switchyard-ai/switchyard/loadgen/traces"
)

// TestLoadTraceServeGenModels pins --servegen-models: each pool=model pair
// renames that pool's requests, a pool left out falls to the run's --model
// (""), and a malformed entry is refused by name.
func TestLoadTraceServeGenModels(t *testing.T) {
	dir := filepath.Join("..", "..", "testdata", "traces", "servegen-m-large")
	rates := filepath.Join(dir, "servegen_m-large_client_rates.csv")
	lengths := filepath.Join(dir, "servegen_client_length_stats.csv")
	sg := traces.ServeGenConfig{Seed: 1, Duration: time.Minute, RateScale: 0.05}
	for _, tc := range []struct {
		name, models, wantModel, wantErr string
	}{
		{name: "mapped", models: "m-large=llama-3.1-8b", wantModel: "llama-3.1-8b"},
		{name: "unmapped pool takes --model", models: "", wantModel: ""},
		{name: "blank entries skipped", models: " , m-large=llama-3.1-8b ,", wantModel: "llama-3.1-8b"},
		{name: "no =", models: "m-large", wantErr: `--servegen-models "m-large": want a comma-separated list of pool=model`},
		{name: "empty model", models: "m-large=", wantErr: `--servegen-models "m-large=": want a comma-separated list of pool=model`},
		{name: "empty pool", models: "=llama-3.1-8b", wantErr: `--servegen-models "=llama-3.1-8b"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tr, err := loadTrace("servegen", rates, traces.ReadOptions{}, 1, 0, 0, 0, sg, lengths, tc.models)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want it to say %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if len(tr.Requests) == 0 {
				t.Fatal("no requests generated; the test cannot check the mapping")
			}
			for i, r := range tr.Requests {
				if r.Model != tc.wantModel {
					t.Fatalf("request %d model = %q, want %q", i, r.Model, tc.wantModel)
				}
			}
		})
	}
}
