package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"text/tabwriter"

	"github.com/switchyard-ai/switchyard/internal/adapter/config"
	"github.com/switchyard-ai/switchyard/internal/core/perf"
	"github.com/switchyard-ai/switchyard/internal/core/tokens"
)

// runGPU is `switchyard gpu`: capacity planning from the performance model
// (internal/core/perf) over the GPU and model catalog (internal/core/catalog).
//
//	switchyard gpu predict --gpu h100 --model llama-3.1-8b --input 1000 --output 200 --batch 32 [--json]
//	switchyard gpu list [--json]
func runGPU(ctx context.Context, args []string, stdout io.Writer) error {
	if len(args) == 0 {
		return errors.New("usage: switchyard gpu predict|list [flags]")
	}
	switch args[0] {
	case "predict":
		return gpuPredict(args[1:], stdout)
	case "list":
		return gpuList(args[1:], stdout)
	}
	return fmt.Errorf("unknown gpu subcommand %q (want predict or list)", args[0])
}

type gpuPrediction struct {
	GPU               string  `json:"gpu"`
	Model             string  `json:"model"`
	Dtype             string  `json:"dtype"`
	TP                int     `json:"tp"`
	Input             int     `json:"input_tokens"`
	Output            int     `json:"output_tokens"`
	Batch             int     `json:"batch"`
	StepMs            float64 `json:"step_ms"`
	TTFTMs            float64 `json:"ttft_ms"`
	ITLMs             float64 `json:"itl_ms"`
	OutputTokensPerS  float64 `json:"output_tokens_per_s"`
	KVBlocks          int     `json:"kv_blocks"`
	KVTokens          int     `json:"kv_tokens"`
	MaxBatchByKV      int     `json:"max_batch_by_kv"`
	PricePerHour      float64 `json:"price_per_hour"`
	DollarsPerMOutput float64 `json:"usd_per_million_output_tokens"`
	Assumed           bool    `json:"assumed_efficiencies,omitempty"`
}

func gpuPredict(args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("gpu predict", flag.ContinueOnError)
	fs.SetOutput(stdout)
	gpu := fs.String("gpu", "", "GPU name (see `switchyard gpu list`)")
	model := fs.String("model", "", "model name")
	dtype := fs.String("dtype", "bf16", "bf16, fp16 or fp8")
	tp := fs.Int("tp", 1, "tensor-parallel GPUs")
	input := fs.Int("input", 1000, "prompt tokens per request")
	output := fs.Int("output", 200, "output tokens per request")
	batch := fs.Int("batch", 1, "concurrent sequences")
	engine := fs.String("engine", perf.EngineVLLM, "serving engine overheads: vllm, sglang or trtllm")
	asJSON := fs.Bool("json", false, "print one JSON object")
	catFile := fs.String("catalog", "", "JSON file merged over the built-in catalog")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *gpu == "" || *model == "" {
		return errors.New("--gpu and --model are required")
	}
	if *input < 1 || *output < 1 || *batch < 1 {
		return errors.New("--input, --output and --batch must be ≥ 1")
	}
	cat, err := config.LoadCatalog(*catFile)
	if err != nil {
		return err
	}
	r, err := perf.NewReplica(cat, *gpu, *model, *dtype, *tp)
	if err != nil {
		return err
	}
	if r, err = r.WithEngine(*engine); err != nil {
		return err
	}
	ctx := *input + *output/2
	step := r.DecodeStepSeconds(*batch, ctx)
	_, tput := r.SteadyState(*input, *output, *batch)
	kvBlocks := r.KVBlocks(tokens.BlockSize, perf.DefaultMemUtil)
	p := gpuPrediction{
		GPU: r.GPU.Name, Model: r.Model.Name, Dtype: r.Dtype, TP: r.TP,
		Input: *input, Output: *output, Batch: *batch,
		StepMs:           step * 1e3,
		TTFTMs:           r.PrefillSeconds(*input, 0) * 1e3,
		ITLMs:            step * 1e3,
		OutputTokensPerS: tput,
		KVBlocks:         kvBlocks,
		KVTokens:         kvBlocks * tokens.BlockSize,
		MaxBatchByKV:     kvBlocks * tokens.BlockSize / (*input + *output),
		PricePerHour:     r.PricePerHour(),
		Assumed:          r.GPU.Assumed,
	}
	if tput > 0 {
		p.DollarsPerMOutput = r.PricePerHour() / 3600 / tput * 1e6
	}
	if *asJSON {
		return json.NewEncoder(stdout).Encode(p)
	}
	w := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintf(w, "replica\t%s × %d %s, %s (%s overheads)\n", r.Model.Name, r.TP, r.GPU.Name, r.Dtype, r.Engine)
	fmt.Fprintf(w, "TTFT (%d tokens alone)\t%.1f ms\n", *input, p.TTFTMs)
	fmt.Fprintf(w, "decode step / ITL (batch %d, context %d)\t%.2f ms\n", *batch, ctx, p.StepMs)
	fmt.Fprintf(w, "steady-state output\t%.0f tok/s\n", p.OutputTokensPerS)
	fmt.Fprintf(w, "KV capacity\t%d tokens (max batch %d at %d+%d)\n", p.KVTokens, p.MaxBatchByKV, *input, *output)
	fmt.Fprintf(w, "price\t$%.2f/h, $%.3f per M output tokens\n", p.PricePerHour, p.DollarsPerMOutput)
	if p.Assumed {
		fmt.Fprintf(w, "note\t%s efficiencies are assumed, not calibrated\n", r.GPU.Name)
	}
	return w.Flush()
}

func gpuList(args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("gpu list", flag.ContinueOnError)
	fs.SetOutput(stdout)
	asJSON := fs.Bool("json", false, "print one JSON object")
	catFile := fs.String("catalog", "", "JSON file merged over the built-in catalog")
	if err := fs.Parse(args); err != nil {
		return err
	}
	cat, err := config.LoadCatalog(*catFile)
	if err != nil {
		return err
	}
	if *asJSON {
		return json.NewEncoder(stdout).Encode(map[string]any{"gpus": cat.GPUs(), "models": cat.Models()})
	}
	w := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(w, "GPU\tARCH\tBF16 TF\tFP8 TF\tHBM GiB\tTB/s\t$/h")
	for _, g := range cat.GPUs() {
		fmt.Fprintf(w, "%s\t%s\t%.0f\t%.0f\t%.0f\t%.3g\t%.2f\n", g.Name, g.Arch, g.BF16TFLOPS, g.FP8TFLOPS, g.HBMGiB, g.HBMTBps, g.PricePerHour)
	}
	fmt.Fprintln(w, "\nMODEL\tFAMILY\tTIER\tPARAMS\tLAYERS\tKV HEADS\tMAX CTX")
	for _, m := range cat.Models() {
		fmt.Fprintf(w, "%s\t%s\t%d\t%.2fB\t%d\t%d\t%d\n", m.Name, m.Family, m.Tier, float64(m.Params)/1e9, m.Layers, m.KVHeads, m.MaxContext)
	}
	return w.Flush()
}
