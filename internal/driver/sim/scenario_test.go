package sim

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/switchyard-ai/switchyard/schemas"
)

// A valid scenario the error cases below each break in one field.
const goodScenario = `
name: t
fleet:
  - {gpu: h100, count: 2}
  - {gpu: a100-80g, model: qwen2.5-7b, count: 1}
tenants:
  - {name: a, class: critical, share: 0.2, ttft: 1s, tpot: 50ms, models: [llama-3.1-8b]}
  - {name: b, class: batch, share: 0.8, models: [qwen2.5-7b, llama-3.1-8b]}
trace:
  path: testdata/traces/azure_llm_2023_code_first1000.csv
  format: azure
  limit: 200
faults:
  - {at: 30s, worker: h100-01, kind: die}
`

func TestParseScenarioErrorsNameTheField(t *testing.T) {
	cases := []struct {
		name, from, to, want string
	}{
		{"unknown key", "fleet:", "gpus: x\nfleet:", `unknown field "gpus"`},
		{"unknown gpu", "gpu: h100, count: 2", "gpu: h900, count: 2", "fleet[0].gpu: \"h900\""},
		{"zero count", "gpu: h100, count: 2", "gpu: h100, count: 0", "fleet[0].count"},
		{"pool model", "model: qwen2.5-7b, count: 1", "model: gpt-9, count: 1", "fleet[1].model"},
		{"class", "class: critical", "class: urgent", "tenants[0].class"},
		{"share sum", "share: 0.8", "share: 0.7", "shares sum to"},
		{"negative share", "share: 0.2", "share: -0.2", "tenants[0].share"},
		{"bad duration", "tpot: 50ms", "tpot: fast", `tenants[0].tpot: "fast" is not a duration`},
		{"unserved model", "models: [llama-3.1-8b]", "models: [llama-3.1-70b]", "tenants[0].models[0]: no fleet pool serves"},
		{"format", "format: azure", "format: csv", "trace.format"},
		{"no path", "path: testdata/traces/azure_llm_2023_code_first1000.csv", "path: ''", "trace.path: empty"},
		{"fault worker", "worker: h100-01", "worker: h100-07", "faults[0].worker: \"h100-07\" is not in the fleet"},
		{"fault kind", "kind: die", "kind: explode", "faults[0].kind"},
		{"slow factor", "kind: die", "kind: slow", "faults[0].factor"},
		{"type", "count: 2", "count: two", "count"},
		{"burst", "limit: 200", "limit: 200\n  bursts: [{at: 10s, for: 5s, factor: 0.5}]", "trace.bursts[0].factor"},
		{"mix order", "limit: 200", "limit: 200\n  model_mix: [{at: 1m, weights: {qwen2.5-7b: 1}}, {at: 30s, weights: {qwen2.5-7b: 1}}]", "trace.model_mix[1].at"},
		{"mix unserved", "limit: 200", "limit: 200\n  model_mix: [{at: 0s, weights: {llama-3.1-70b: 1}}]", "trace.model_mix[0].weights: no fleet pool serves"},
	}
	if _, err := ParseScenario([]byte(goodScenario), "good.yaml"); err != nil {
		t.Fatalf("the good scenario: %v", err)
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if !strings.Contains(goodScenario, tc.from) {
				t.Fatalf("test bug: %q not in the scenario", tc.from)
			}
			bad := strings.Replace(goodScenario, tc.from, tc.to, 1)
			_, err := ParseScenario([]byte(bad), "bad.yaml")
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want an error containing %q", err, tc.want)
			}
			if !strings.Contains(err.Error(), "bad.yaml") {
				t.Errorf("error %q does not name the file", err)
			}
		})
	}
}

// TestScenarioJSONEqualsYAML: the two spellings load to the same run.
func TestScenarioJSONEqualsYAML(t *testing.T) {
	js := `{"name":"t","fleet":[{"gpu":"h100","count":2},{"gpu":"a100-80g","model":"qwen2.5-7b","count":1}],
	"tenants":[{"name":"a","class":"critical","share":0.2,"ttft":"1s","tpot":"50ms","models":["llama-3.1-8b"]},
	{"name":"b","class":"batch","share":0.8,"models":["qwen2.5-7b","llama-3.1-8b"]}],
	"trace":{"path":"testdata/traces/azure_llm_2023_code_first1000.csv","format":"azure","limit":200},
	"faults":[{"at":"30s","worker":"h100-01","kind":"die"}]}`
	a, err := ParseScenario([]byte(js), "t.json")
	if err != nil {
		t.Fatal(err)
	}
	b, err := ParseScenario([]byte(goodScenario), "t.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(a, b) {
		t.Fatalf("JSON %+v\nYAML %+v", a, b)
	}
	la, err := a.Load(".")
	if err != nil {
		t.Fatal(err)
	}
	lb, err := b.Load(".")
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(la.Trace.Requests, lb.Trace.Requests) {
		t.Fatal("the same scenario in JSON and YAML loaded different requests")
	}
}

// TestScenarioShapesTheTrace: tenants by share with their class, targets
// and models; the model mix shifts popularity at its phase; a burst
// compresses its window's arrivals; faults and fleet carry over.
func TestScenarioShapesTheTrace(t *testing.T) {
	sc, err := ParseScenario([]byte(strings.Replace(goodScenario, "limit: 200", `limit: 600
  bursts: [{at: 60s, for: 30s, factor: 3}]
  model_mix:
    - {at: 0s, weights: {llama-3.1-8b: 1}}
    - {at: 90s, weights: {qwen2.5-7b: 1}}`, 1)), "t.yaml")
	if err != nil {
		t.Fatal(err)
	}
	plain, err := ParseScenario([]byte(strings.Replace(goodScenario, "limit: 200", "limit: 600", 1)), "t.yaml")
	if err != nil {
		t.Fatal(err)
	}
	ls, err := sc.Load(".")
	if err != nil {
		t.Fatal(err)
	}
	lp, err := plain.Load(".")
	if err != nil {
		t.Fatal(err)
	}
	if got := len(ls.Trace.Requests); got != 600 {
		t.Fatalf("%d requests, want the 600 of the limit", got)
	}
	counts := map[string]int{}
	for i, q := range ls.Trace.Requests {
		counts[q.Tenant]++
		switch q.Tenant {
		case "a":
			want := time.Second + time.Duration(q.PromptTokens)*100*time.Microsecond
			if q.Priority != schemas.PriorityCritical || q.TTFTTarget != want || q.TPOTTarget != 50*time.Millisecond || q.Model != "llama-3.1-8b" {
				t.Fatalf("row %d of tenant a: %+v", i, q)
			}
		case "b":
			if q.Priority != schemas.PriorityBatch || q.TPOTTarget != 200*time.Millisecond {
				t.Fatalf("row %d of tenant b: class %s TPOT %v, want batch's defaults", i, q.Priority, q.TPOTTarget)
			}
			// The mix's phases are in the trace's own time, before
			// bursts: the plain load has those arrivals.
			want := "llama-3.1-8b"
			if lp.Trace.Requests[i].Arrival >= 90*time.Second {
				want = "qwen2.5-7b"
			}
			if q.Model != want {
				t.Fatalf("row %d of tenant b at %v: model %s, want %s", i, lp.Trace.Requests[i].Arrival, q.Model, want)
			}
		default:
			t.Fatalf("row %d: tenant %q", i, q.Tenant)
		}
		if q.Deadline != q.TTFTTarget+time.Duration(max(q.OutputTokens-1, 0))*q.TPOTTarget {
			t.Fatalf("row %d: deadline %v does not follow its targets", i, q.Deadline)
		}
	}
	if f := float64(counts["a"]) / 600; f < 0.14 || f > 0.26 {
		t.Errorf("tenant a has %.2f of the rows, want about its 0.2 share", f)
	}
	// The burst: the same rows, those in [60 s, 90 s) three times closer,
	// everything after moved 20 s earlier.
	for i := range ls.Trace.Requests {
		a, p := ls.Trace.Requests[i].Arrival, lp.Trace.Requests[i].Arrival
		var want time.Duration
		switch {
		case p < 60*time.Second:
			want = p
		case p < 90*time.Second:
			want = 60*time.Second + (p-60*time.Second)/3
		default:
			want = p - 20*time.Second
		}
		if d := a - want; d < -time.Microsecond || d > time.Microsecond {
			t.Fatalf("row %d: arrival %v, want %v (unburst %v)", i, a, want, p)
		}
	}
	if len(ls.Config.Faults) != 1 || ls.Config.Faults[0] != (Fault{At: 30 * time.Second, Worker: "h100-01", Kind: FaultDie}) {
		t.Errorf("faults %+v", ls.Config.Faults)
	}
	if ls.Config.Replicas() != 3 || ls.Config.GPUs[1].Model != "qwen2.5-7b" {
		t.Errorf("fleet %+v", ls.Config.GPUs)
	}
}

// TestShippedScenariosLoadAndRun: every scenario under loadgen/scenarios
// reads in a fresh clone (its trace is in the repository or generated) and
// its first requests run.
func TestShippedScenariosLoadAndRun(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("..", "..", "..", "loadgen", "scenarios", "*.yaml"))
	if err != nil || len(files) < 4 {
		t.Fatalf("scenarios: %v %v", files, err)
	}
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			ls, err := ReadScenarioFile(f)
			if err != nil {
				t.Fatal(err)
			}
			if len(ls.Trace.Requests) < 100 {
				t.Fatalf("only %d requests", len(ls.Trace.Requests))
			}
			classes := map[string]bool{}
			for _, q := range ls.Trace.Requests {
				classes[q.Priority] = true
			}
			if !classes[schemas.PriorityCritical] || !classes[schemas.PriorityInteractive] {
				t.Errorf("classes %v: want the high classes present", classes)
			}
			// A short prefix of the run: everything resolves.
			head := ls.Trace.Window(20 * time.Second)
			if len(head.Requests) == 0 {
				head = ls.Trace
			}
			cfg := ls.Config
			cfg.Faults = nil
			res := run(t, cfg, head, "switchyard")
			if res.Requests+res.Skipped != len(head.Requests) {
				t.Errorf("%d issued + %d skipped of %d", res.Requests, res.Skipped, len(head.Requests))
			}
		})
	}
}

func TestResolvePathFindsTheRepository(t *testing.T) {
	dir := filepath.Join("..", "..", "..", "loadgen", "scenarios")
	p, err := ResolvePath(dir, "testdata/traces/azure_llm_2023_code_first1000.csv")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(p); err != nil {
		t.Fatal(err)
	}
	if _, err := ResolvePath(dir, "testdata/traces/nope.csv"); err == nil || !strings.Contains(err.Error(), "trace.path") {
		t.Fatalf("missing file: %v", err)
	}
}
