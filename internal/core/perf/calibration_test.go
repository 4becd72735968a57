package perf

import (
	"encoding/csv"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/switchyard-ai/switchyard/internal/core/catalog"
)

// calibrationCSV is the project's copy of the published measurements the
// roofline model is calibrated against (testdata/README.md).
var calibrationCSV = filepath.Join("..", "..", "..", "testdata", "calibration", "published-measurements.csv")

// defaultMaxSeqs is vLLM's default max_num_seqs, used when a throughput
// measurement does not state its batch.
const defaultMaxSeqs = 256

type measurement struct {
	caseID, gpu, model, dtype string
	tp, input, output, batch  int
	metric, engine            string
	value                     float64
}

func readMeasurements(t *testing.T) []measurement {
	t.Helper()
	f, err := os.Open(calibrationCSV)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	rows, err := csv.NewReader(f).ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	col := map[string]int{}
	for i, h := range rows[0] {
		col[h] = i
	}
	atoi := func(s string) int {
		if s == "" {
			return 0
		}
		n, err := strconv.Atoi(s)
		if err != nil {
			t.Fatalf("bad int %q", s)
		}
		return n
	}
	var out []measurement
	for _, r := range rows[1:] {
		v, err := strconv.ParseFloat(r[col["value"]], 64)
		if err != nil {
			t.Fatalf("bad value in %v", r)
		}
		out = append(out, measurement{
			caseID: r[col["case"]], gpu: r[col["gpu"]], model: r[col["model"]], dtype: r[col["dtype"]],
			tp: atoi(r[col["tp"]]), input: atoi(r[col["input_tokens"]]), output: atoi(r[col["output_tokens"]]),
			batch: atoi(r[col["batch"]]), metric: r[col["metric"]], value: v, engine: r[col["engine"]],
		})
	}
	return out
}

// predict maps a published metric onto the model:
//   - itl_ms, step_ms: one decode step at the stated batch (1 if blank) with
//     context input + output/2 (blank counts as 0);
//   - ttft_ms: prefill of the input alone (engine side, no HTTP);
//   - output_tokens_per_s: SteadyState at the stated batch, or vLLM's default
//     max_num_seqs when the source does not state one.
func predict(t *testing.T, m measurement) float64 {
	r, err := NewReplica(catalog.Default(), m.gpu, m.model, m.dtype, max(m.tp, 1))
	if err == nil {
		r, err = r.WithEngine(engineOf(m.engine))
	}
	if err != nil {
		t.Fatalf("%s: %v", m.caseID, err)
	}
	switch m.metric {
	case "itl_ms", "step_ms":
		return r.DecodeStepSeconds(max(m.batch, 1), m.input+m.output/2) * 1e3
	case "ttft_ms":
		return r.PrefillSeconds(m.input, 0) * 1e3
	case "output_tokens_per_s":
		b := m.batch
		if b == 0 {
			b = defaultMaxSeqs
		}
		_, tps := r.SteadyState(m.input, m.output, b)
		return tps
	}
	t.Fatalf("%s: unknown metric %q", m.caseID, m.metric)
	return 0
}

// engineOf maps the CSV's engine column onto the model's engine profiles.
// NVIDIA NIM serves Llama on H100 through its TensorRT-LLM backend.
func engineOf(s string) string {
	s = strings.ToLower(s)
	switch {
	case strings.Contains(s, "tensorrt"), strings.Contains(s, "nim"):
		return EngineTRTLLM
	case strings.Contains(s, "sglang"):
		return EngineSGLang
	}
	return EngineVLLM
}

func TestCalibrationAgainstPublishedMeasurements(t *testing.T) {
	ms := readMeasurements(t)
	var sum, worst float64
	worstCase := ""
	for _, m := range ms {
		got := predict(t, m)
		e := math.Abs(got-m.value) / m.value
		t.Logf("%-36s %-20s published %9.2f model %9.2f ratio %.2f", m.caseID, m.metric, m.value, got, got/m.value)
		sum += e
		if e > worst {
			worst, worstCase = e, m.caseID
		}
	}
	mean := sum / float64(len(ms))
	t.Logf("%d measurements: mean |error| %.1f %%, worst %.1f %% (%s)", len(ms), mean*100, worst*100, worstCase)
	if mean > 0.10 {
		t.Errorf("mean |error| %.1f %% > 10 %%", mean*100)
	}
	if worst > 0.25 {
		t.Errorf("worst |error| %.1f %% > 25 %% (%s)", worst*100, worstCase)
	}
}
