package sim

// A scenario is a simulated experiment as a file: the fleet, the tenants
// and their targets, the trace and how its rows become those tenants'
// requests, and the faults. `switchyard sim --scenario FILE` runs one; the
// command's flags describe the same things for the one-fleet, default-
// tenant case.

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"math"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/switchyard-ai/switchyard/internal/core/catalog"
	"github.com/switchyard-ai/switchyard/loadgen/traces"
	"github.com/switchyard-ai/switchyard/schemas"
)

// Scenario is the file form of an experiment. Durations are strings Go's
// time.ParseDuration reads ("90s", "2m", "75ms").
type Scenario struct {
	Name        string `json:"name"`
	Description string `json:"description,omitempty"`
	// Model is the catalog model of pools and tenants that name none
	// (default llama-3.1-8b).
	Model string `json:"model,omitempty"`
	Dtype string `json:"dtype,omitempty"`
	// Seed seeds the trace reader, the tenant and model draws and the
	// engines (default 1).
	Seed    int64            `json:"seed,omitempty"`
	Fleet   []ScenarioPool   `json:"fleet"`
	Tenants []ScenarioTenant `json:"tenants,omitempty"`
	Trace   ScenarioTrace    `json:"trace"`
	Faults  []ScenarioFault  `json:"faults,omitempty"`
	// Drain is how long the run continues after the last arrival (default
	// the simulator's, 5 min).
	Drain string `json:"drain,omitempty"`
}

// ScenarioPool is count replicas of one GPU type serving one model, each
// replica TP GPUs.
type ScenarioPool struct {
	GPU   string `json:"gpu"`
	Model string `json:"model,omitempty"`
	Count int    `json:"count"`
	TP    int    `json:"tp,omitempty"`
	// Role fixes the phases the pool takes (prefill, decode; both or
	// empty leaves the split to the router) and Link its network link
	// for KV transfers (a catalog link name; see Config.Link).
	Role string `json:"role,omitempty"`
	Link string `json:"link,omitempty"`
}

// ScenarioTenant is one tenant: its class, its share of the trace's
// sessions, its latency targets and the models it may use. Targets left
// out are the class's defaults (traces.DefaultSLOs).
type ScenarioTenant struct {
	Name  string  `json:"name"`
	Class string  `json:"class"`
	Share float64 `json:"share"`
	// TTFT is the base time-to-first-token target, TTFTPerPromptToken the
	// slack per prompt token on top (a long prompt cannot start as fast),
	// and TPOT the mean time per output token after the first.
	TTFT               string `json:"ttft,omitempty"`
	TTFTPerPromptToken string `json:"ttft_per_prompt_token,omitempty"`
	TPOT               string `json:"tpot,omitempty"`
	// Models the tenant may use; a request gets the first, or one drawn by
	// the trace's model_mix weights among these. Empty: the scenario's
	// model.
	Models []string `json:"models,omitempty"`
}

// ScenarioTrace is the workload: a trace file or a generator, and how it is
// cut and shaped.
type ScenarioTrace struct {
	// Path is the trace file, relative to the scenario file or, failing
	// that, to the repository holding it (servegen: the rates file, with
	// servegen_client_length_stats.csv beside it).
	Path string `json:"path,omitempty"`
	// Format is mooncake, azure, servegen, agentic or shared-prefix (the
	// last two are generated and take no path).
	Format string `json:"format"`
	// RateScale multiplies the arrival rate of the scenario's 1× load
	// (default 1); capacity searches scale from there.
	RateScale float64 `json:"rate_scale,omitempty"`
	// Duration keeps the arrivals of the first D of the (rate-scaled)
	// trace: the scenario's 1× load. A capacity search at x× keeps the
	// first D of the trace scaled by x — x times the requests over the same
	// time — so the trace should run well past D. Limit reads only the
	// first N rows.
	Duration string `json:"duration,omitempty"`
	Limit    int    `json:"limit,omitempty"`
	// Generator settings: agentic workflow start rate and window,
	// shared-prefix stage length, servegen rate multiplier and start.
	WorkflowsPerSec float64 `json:"workflows_per_sec,omitempty"`
	GenDuration     string  `json:"gen_duration,omitempty"`
	Stage           string  `json:"stage,omitempty"`
	ServeGenRate    float64 `json:"servegen_rate,omitempty"`
	ServeGenStart   string  `json:"servegen_start,omitempty"`
	// ModelMix makes model popularity shift: from each phase's start on, a
	// request's model is drawn among its tenant's models by these weights.
	ModelMix []ModelPhase `json:"model_mix,omitempty"`
	// Bursts compress the arrivals of a window, multiplying its rate.
	Bursts []Burst `json:"bursts,omitempty"`
}

// ModelPhase is the model popularity from At on, in the trace's own time
// (before bursts and rate scaling).
type ModelPhase struct {
	At      string             `json:"at"`
	Weights map[string]float64 `json:"weights"`
}

// Burst multiplies the arrival rate by Factor for the arrivals in
// [At, At+For) of the trace: they arrive Factor times closer together, and
// every later arrival moves earlier by the time saved, so the requests are
// the trace's own and only their timing changes.
type Burst struct {
	At     string  `json:"at"`
	For    string  `json:"for"`
	Factor float64 `json:"factor"`
}

// ScenarioFault is a sim.Fault with its time as a string.
type ScenarioFault struct {
	At     string  `json:"at"`
	Worker string  `json:"worker"`
	Kind   string  `json:"kind"`
	Factor float64 `json:"factor,omitempty"`
}

// LoadedScenario is a scenario ready to run: the simulator's config and the
// trace at the scenario's 1× load.
type LoadedScenario struct {
	Scenario Scenario
	// File is where it was read from.
	File   string
	Config Config
	// Trace has the tenants, classes, targets, models and bursts applied
	// and is rate-scaled by trace.rate_scale; it is the whole trace (up to
	// trace.limit), so a capacity search can scale into it.
	Trace *traces.Trace
	// Window is trace.duration: a run keeps the arrivals of the first
	// Window of the (scaled) trace (0: all).
	Window time.Duration
}

// Base is the scenario's 1× load: the first Window of the trace.
func (ls *LoadedScenario) Base() *traces.Trace { return ls.Trace.Window(ls.Window) }

// ReadScenarioFile reads and checks a scenario (JSON, or YAML by its .yaml
// or .yml extension) and loads its trace.
func ReadScenarioFile(path string) (*LoadedScenario, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("scenario: %w", err)
	}
	sc, err := ParseScenario(raw, path)
	if err != nil {
		return nil, err
	}
	ls, err := sc.Load(filepath.Dir(path))
	if err != nil {
		return nil, fmt.Errorf("scenario %s: %w", path, err)
	}
	ls.File = path
	return ls, nil
}

// ParseScenario decodes a scenario and checks every field that needs no
// trace; name is the file name, for errors and to tell YAML by extension.
// Unknown fields are errors, so a misspelt key is not silently ignored.
func ParseScenario(raw []byte, name string) (Scenario, error) {
	var sc Scenario
	js := raw
	if ext := strings.ToLower(filepath.Ext(name)); ext == ".yaml" || ext == ".yml" {
		var err error
		if js, err = yaml.YAMLToJSON(raw); err != nil {
			return sc, fmt.Errorf("scenario %s: %w", name, err)
		}
	}
	dec := json.NewDecoder(bytes.NewReader(js))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&sc); err != nil {
		return sc, fmt.Errorf("scenario %s: %w", name, err)
	}
	if dec.More() {
		return sc, fmt.Errorf("scenario %s: more than one document", name)
	}
	if err := sc.Check(catalog.Default()); err != nil {
		return sc, fmt.Errorf("scenario %s: %w", name, err)
	}
	return sc, nil
}

// duration parses a duration field, naming it in the error; "" is zero.
func duration(field, v string) (time.Duration, error) {
	if v == "" {
		return 0, nil
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		return 0, fmt.Errorf("%s: %q is not a duration (want e.g. \"2s\", \"75ms\", \"10m\")", field, v)
	}
	if d < 0 {
		return 0, fmt.Errorf("%s: %v is negative", field, d)
	}
	return d, nil
}

func (sc *Scenario) model() string {
	if sc.Model == "" {
		return "llama-3.1-8b"
	}
	return sc.Model
}

// workerNames lists the worker ids the fleet's replicas get, as the
// simulator names them (buildFleet: gpu-NN numbered per GPU type).
func workerNames(pools []GPUSpec) []string {
	var out []string
	seen := map[string]int{}
	for _, g := range pools {
		for i := 0; i < g.Count; i++ {
			out = append(out, fmt.Sprintf("%s-%02d", g.GPU, seen[g.GPU]))
			seen[g.GPU]++
		}
	}
	return out
}

// Check validates the scenario against a catalog, naming the field at fault.
func (sc *Scenario) Check(cat *catalog.Catalog) error {
	if _, ok := cat.Model(sc.model()); !ok {
		return fmt.Errorf("model: %q is not in the catalog (have %s)", sc.Model, modelNames(cat))
	}
	if sc.Dtype != "" && catalog.DtypeBytes(sc.Dtype) == 0 {
		return fmt.Errorf("dtype: unknown dtype %q", sc.Dtype)
	}
	served, err := sc.checkFleet(cat)
	if err != nil {
		return err
	}
	if err := sc.checkTenants(cat, served); err != nil {
		return err
	}
	if err := sc.Trace.check(); err != nil {
		return err
	}
	if err := sc.checkModelMix(served); err != nil {
		return err
	}
	if err := sc.checkFaults(); err != nil {
		return err
	}
	if _, err := duration("drain", sc.Drain); err != nil {
		return err
	}
	return nil
}

// checkFleet validates the fleet's pools and returns the models they serve.
func (sc *Scenario) checkFleet(cat *catalog.Catalog) (map[string]bool, error) {
	if len(sc.Fleet) == 0 {
		return nil, errors.New("fleet: no pools (want a list of {gpu, model, count, tp})")
	}
	served := map[string]bool{}
	for i, p := range sc.Fleet {
		f := fmt.Sprintf("fleet[%d]", i)
		if _, ok := cat.GPU(p.GPU); !ok {
			return nil, fmt.Errorf("%s.gpu: %q is not in the catalog (have %s)", f, p.GPU, gpuNames(cat))
		}
		m := p.Model
		if m == "" {
			m = sc.model()
		}
		if _, ok := cat.Model(m); !ok {
			return nil, fmt.Errorf("%s.model: %q is not in the catalog (have %s)", f, m, modelNames(cat))
		}
		if p.Count < 1 {
			return nil, fmt.Errorf("%s.count: %d, want at least 1", f, p.Count)
		}
		if p.TP < 0 {
			return nil, fmt.Errorf("%s.tp: %d, want at least 1", f, p.TP)
		}
		if !schemas.ValidRole(p.Role) {
			return nil, fmt.Errorf("%s.role: %q, want prefill, decode or both", f, p.Role)
		}
		if _, ok := catalog.LinkNamed(p.Link); p.Link != "" && !ok {
			return nil, fmt.Errorf("%s.link: %q is not a catalog link (have %s)", f, p.Link, strings.Join(catalog.LinkNames(), ", "))
		}
		served[m] = true
	}
	return served, nil
}

// checkTenants validates the tenants: names, classes, shares summing to 1,
// targets, and models some pool serves.
func (sc *Scenario) checkTenants(cat *catalog.Catalog, served map[string]bool) error {
	total := 0.0
	names := map[string]bool{}
	for i, t := range sc.Tenants {
		f := fmt.Sprintf("tenants[%d]", i)
		if t.Name == "" {
			return fmt.Errorf("%s.name: empty", f)
		}
		if names[t.Name] {
			return fmt.Errorf("%s.name: %q appears twice", f, t.Name)
		}
		names[t.Name] = true
		if !slices.Contains(schemas.Priorities, t.Class) {
			return fmt.Errorf("%s.class: %q, want one of %v", f, t.Class, schemas.Priorities)
		}
		if !(t.Share > 0) || math.IsInf(t.Share, 0) {
			return fmt.Errorf("%s.share: %v, want a positive fraction", f, t.Share)
		}
		total += t.Share
		for _, d := range []struct{ k, v string }{{"ttft", t.TTFT}, {"ttft_per_prompt_token", t.TTFTPerPromptToken}, {"tpot", t.TPOT}} {
			if _, err := duration(f+"."+d.k, d.v); err != nil {
				return err
			}
		}
		for j, m := range t.Models {
			if _, ok := cat.Model(m); !ok {
				return fmt.Errorf("%s.models[%d]: %q is not in the catalog (have %s)", f, j, m, modelNames(cat))
			}
			if !served[m] {
				return fmt.Errorf("%s.models[%d]: no fleet pool serves %q, so its requests could never run", f, j, m)
			}
		}
		if len(t.Models) == 0 && !served[sc.model()] {
			return fmt.Errorf("%s.models: empty, and no fleet pool serves the scenario's model %q", f, sc.model())
		}
	}
	if len(sc.Tenants) > 0 && math.Abs(total-1) > 1e-6 {
		return fmt.Errorf("tenants: shares sum to %v, want 1", total)
	}
	return nil
}

// checkModelMix validates the trace's model-mix phases against the tenants
// and the models the fleet serves.
func (sc *Scenario) checkModelMix(served map[string]bool) error {
	for i, ph := range sc.Trace.ModelMix {
		f := fmt.Sprintf("trace.model_mix[%d]", i)
		if len(sc.Tenants) == 0 {
			return fmt.Errorf("%s: a model mix needs tenants with models to draw among", f)
		}
		sum := 0.0
		for m, w := range ph.Weights {
			if !served[m] {
				return fmt.Errorf("%s.weights: no fleet pool serves %q", f, m)
			}
			if w < 0 || math.IsNaN(w) || math.IsInf(w, 0) {
				return fmt.Errorf("%s.weights[%s]: %v, want a non-negative number", f, m, w)
			}
			sum += w
		}
		if sum <= 0 {
			return fmt.Errorf("%s.weights: none positive", f)
		}
	}
	return nil
}

// checkFaults validates the faults: times, kinds and workers of the fleet.
func (sc *Scenario) checkFaults() error {
	workers := workerNames(sc.gpuSpecs())
	for i, ft := range sc.Faults {
		f := fmt.Sprintf("faults[%d]", i)
		if _, err := duration(f+".at", ft.At); err != nil {
			return err
		}
		if !slices.Contains(workers, ft.Worker) {
			return fmt.Errorf("%s.worker: %q is not in the fleet (its workers: %s)", f, ft.Worker, strings.Join(workers, ", "))
		}
		switch ft.Kind {
		case FaultDie, FaultSilent, FaultRecover:
		case FaultSlow:
			if ft.Factor <= 0 || ft.Factor > 1 {
				return fmt.Errorf("%s.factor: %v, want a speed in (0, 1] for a slow fault", f, ft.Factor)
			}
		default:
			return fmt.Errorf("%s.kind: %q, want die, slow, silent or recover", f, ft.Kind)
		}
	}
	return nil
}

func (t *ScenarioTrace) check() error {
	switch t.Format {
	case "mooncake", "azure", "servegen":
		if t.Path == "" {
			return fmt.Errorf("trace.path: empty, and format %s reads a file", t.Format)
		}
	case "agentic", "shared-prefix":
		if t.Path != "" {
			return fmt.Errorf("trace.path: format %s is generated and reads no file", t.Format)
		}
	case "":
		return errors.New("trace.format: empty, want mooncake, azure, servegen, agentic or shared-prefix")
	default:
		return fmt.Errorf("trace.format: %q, want mooncake, azure, servegen, agentic or shared-prefix", t.Format)
	}
	if t.RateScale < 0 || math.IsNaN(t.RateScale) || math.IsInf(t.RateScale, 0) {
		return fmt.Errorf("trace.rate_scale: %v, want a positive number", t.RateScale)
	}
	if t.Limit < 0 {
		return fmt.Errorf("trace.limit: %d is negative", t.Limit)
	}
	if t.Limit > 0 && t.Format == "agentic" {
		return errors.New("trace.limit: an agentic trace is cut by whole workflows; use gen_duration or duration")
	}
	if t.WorkflowsPerSec < 0 {
		return fmt.Errorf("trace.workflows_per_sec: %v is negative", t.WorkflowsPerSec)
	}
	if t.ServeGenRate < 0 {
		return fmt.Errorf("trace.servegen_rate: %v is negative", t.ServeGenRate)
	}
	for _, d := range []struct{ k, v string }{{"duration", t.Duration}, {"gen_duration", t.GenDuration}, {"stage", t.Stage}, {"servegen_start", t.ServeGenStart}} {
		if _, err := duration("trace."+d.k, d.v); err != nil {
			return err
		}
	}
	var prev time.Duration
	for i, ph := range t.ModelMix {
		at, err := duration(fmt.Sprintf("trace.model_mix[%d].at", i), ph.At)
		if err != nil {
			return err
		}
		if i > 0 && at <= prev {
			return fmt.Errorf("trace.model_mix[%d].at: %v, want phases in increasing order (after %v)", i, at, prev)
		}
		prev = at
	}
	var end time.Duration
	for i, b := range t.Bursts {
		f := fmt.Sprintf("trace.bursts[%d]", i)
		at, err := duration(f+".at", b.At)
		if err != nil {
			return err
		}
		d, err := duration(f+".for", b.For)
		if err != nil {
			return err
		}
		if d <= 0 {
			return fmt.Errorf("%s.for: want a positive duration", f)
		}
		if !(b.Factor >= 1) || math.IsInf(b.Factor, 0) {
			return fmt.Errorf("%s.factor: %v, want a rate multiplier ≥ 1", f, b.Factor)
		}
		if at < end {
			return fmt.Errorf("%s.at: %v overlaps the burst before it (ends at %v)", f, at, end)
		}
		end = at + d
	}
	return nil
}

func (sc *Scenario) gpuSpecs() []GPUSpec {
	var out []GPUSpec
	for _, p := range sc.Fleet {
		out = append(out, GPUSpec{GPU: p.GPU, Count: p.Count, TP: max(p.TP, 1), Model: p.Model, Role: p.Role, Link: p.Link})
	}
	return out
}

// Load builds the simulator config and reads and shapes the trace; dir is
// the scenario file's folder, for the trace path.
func (sc Scenario) Load(dir string) (*LoadedScenario, error) {
	if err := sc.Check(catalog.Default()); err != nil {
		return nil, err
	}
	seed := sc.Seed
	if seed == 0 {
		seed = 1
	}
	drain, _ := duration("drain", sc.Drain)
	cfg := Config{GPUs: sc.gpuSpecs(), Model: sc.model(), Dtype: sc.Dtype, Seed: seed, Drain: drain}
	for _, f := range sc.Faults {
		at, _ := duration("at", f.At)
		cfg.Faults = append(cfg.Faults, Fault{At: at, Worker: f.Worker, Kind: f.Kind, Factor: f.Factor})
	}
	tr, err := sc.Trace.read(dir, seed)
	if err != nil {
		return nil, err
	}
	if err := sc.assignTenants(tr, seed); err != nil {
		return nil, err
	}
	sc.Trace.burst(tr)
	scale := sc.Trace.RateScale
	if scale == 0 {
		scale = 1
	}
	win, _ := duration("duration", sc.Trace.Duration)
	tr = tr.Scale(scale)
	if len(tr.Window(win).Requests) == 0 {
		return nil, fmt.Errorf("trace.duration: no requests in the first %v at %g×", win, scale)
	}
	if sc.Name != "" {
		tr.Name = sc.Name + ": " + tr.Name
	}
	return &LoadedScenario{Scenario: sc, Config: cfg, Trace: tr, Window: win}, nil
}

// ResolvePath finds a scenario's trace file: relative to the scenario's
// folder, else relative to the repository that holds it (the nearest folder
// above with a go.mod), so scenarios can name testdata/traces/... .
func ResolvePath(dir, p string) (string, error) {
	if filepath.IsAbs(p) {
		return p, nil
	}
	tried := []string{filepath.Join(dir, p)}
	if _, err := os.Stat(tried[0]); err == nil {
		return tried[0], nil
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return "", fmt.Errorf("trace.path: %w", err)
	}
	for d := abs; ; d = filepath.Dir(d) {
		if _, err := os.Stat(filepath.Join(d, "go.mod")); err == nil {
			c := filepath.Join(d, p)
			if _, err := os.Stat(c); err == nil {
				return c, nil
			}
			tried = append(tried, c)
			break
		}
		if filepath.Dir(d) == d {
			break
		}
	}
	return "", fmt.Errorf("trace.path: %q not found (looked at %s)", p, strings.Join(tried, ", "))
}

func (t *ScenarioTrace) read(dir string, seed int64) (*traces.Trace, error) {
	var path string
	if t.Path != "" {
		var err error
		if path, err = ResolvePath(dir, t.Path); err != nil {
			return nil, err
		}
	}
	o := traces.ReadOptions{Limit: t.Limit, Seed: seed}
	var tr *traces.Trace
	var err error
	switch t.Format {
	case "mooncake":
		tr, err = traces.ReadMooncakeFile(path, o)
	case "azure":
		tr, err = traces.ReadAzureFile(path, o)
	case "servegen":
		// All of the rate data from the start is generated (the window
		// cuts it), so capacity searches can scale into it.
		start, _ := duration("servegen_start", t.ServeGenStart)
		rate := t.ServeGenRate
		if rate == 0 {
			rate = 1
		}
		tr, err = traces.ReadServeGenFiles(path, "", traces.ServeGenConfig{Seed: seed, Start: start, RateScale: rate})
		if err == nil && t.Limit > 0 && len(tr.Requests) > t.Limit {
			tr.Requests = tr.Requests[:t.Limit]
		}
	case "agentic":
		gen, _ := duration("gen_duration", t.GenDuration)
		if gen == 0 {
			gen = 10 * time.Minute
		}
		rate := t.WorkflowsPerSec
		if rate == 0 {
			rate = 0.5
		}
		tr = traces.Agentic(traces.AgenticConfig{Seed: seed, Duration: gen, WorkflowsPerSec: rate})
	case "shared-prefix":
		stage, _ := duration("stage", t.Stage)
		if stage == 0 {
			stage = 60 * time.Second
		}
		tr = traces.SharedPrefix(traces.SharedPrefixConfig{Seed: seed, StageDuration: stage})
	}
	if err != nil {
		return nil, fmt.Errorf("trace.path: %w", err)
	}
	if t.Limit > 0 && len(tr.Requests) > t.Limit && tr.Requests[0].Workflow == nil {
		tr.Requests = tr.Requests[:t.Limit]
	}
	if len(tr.Requests) == 0 {
		return nil, fmt.Errorf("trace.path: %s has no requests", t.Path)
	}
	return tr, nil
}

func hashText(s string) uint64 {
	h := fnv.New64a()
	h.Write([]byte(s))
	return h.Sum64()
}

// sessionBlock is the 16-token block whose chained hash covers a prompt's
// first 1,024 tokens: Mooncake's first two 512-token blocks, the system
// prompt and the conversation, which every turn of one conversation shares
// (rules.go keys Mooncake sessions by hash_ids[1]).
const sessionBlock = 1024/16 - 1

// sessionKey is what keeps one session on one tenant: the workflow of an
// agentic step, the ServeGen client of a generated row, the conversation
// prefix of a Mooncake or shared-prefix row, else the row itself.
func sessionKey(format string, i int, q *traces.Request) uint64 {
	switch {
	case q.Workflow != nil:
		return hashText("wf/" + q.Workflow.ID)
	case format == "servegen":
		return hashText("client/" + q.Tenant)
	case (format == "mooncake" || format == "shared-prefix") && len(q.BlockHashes) > sessionBlock:
		return q.BlockHashes[sessionBlock]
	}
	return hashText(fmt.Sprintf("row/%d", i))
}

// assignTenants gives every row its scenario tenant (by share, a seeded
// hash of the session key), the tenant's class and targets, and a model.
func (sc *Scenario) assignTenants(tr *traces.Trace, seed int64) error {
	if len(sc.Tenants) == 0 {
		// The trace's own rules stand; rows ask for the scenario model
		// unless the pools say otherwise.
		for i := range tr.Requests {
			if q := &tr.Requests[i]; q.Model != "" {
				if _, ok := catalog.Default().Model(q.Model); !ok {
					q.Model = ""
				}
			}
		}
		return nil
	}
	type slo struct {
		base, per, tpot time.Duration
	}
	targets := make([]slo, len(sc.Tenants))
	for k, t := range sc.Tenants {
		d := traces.DefaultSLOs[t.Class]
		s := slo{d.TTFTBase, d.PerPromptToken, d.TPOT}
		if v, _ := duration("ttft", t.TTFT); t.TTFT != "" {
			s.base = v
		}
		if v, _ := duration("ttft_per_prompt_token", t.TTFTPerPromptToken); t.TTFTPerPromptToken != "" {
			s.per = v
		}
		if v, _ := duration("tpot", t.TPOT); t.TPOT != "" {
			s.tpot = v
		}
		targets[k] = s
	}
	phases := make([]time.Duration, len(sc.Trace.ModelMix))
	for k, ph := range sc.Trace.ModelMix {
		phases[k], _ = duration("at", ph.At)
	}
	counts := make([]int, len(sc.Tenants))
	for i := range tr.Requests {
		q := &tr.Requests[i]
		u := traces.Unit(seed, sessionKey(sc.Trace.Format, i, q))
		k, acc := len(sc.Tenants)-1, 0.0
		for j, t := range sc.Tenants {
			if acc += t.Share; u < acc {
				k = j
				break
			}
		}
		t, s := sc.Tenants[k], targets[k]
		counts[k]++
		q.Tenant, q.Priority = t.Name, t.Class
		q.TTFTTarget = s.base + time.Duration(q.PromptTokens)*s.per
		q.TPOTTarget = s.tpot
		q.Deadline = q.TTFTTarget + time.Duration(max(q.OutputTokens-1, 0))*s.tpot
		q.Model = sc.pickModel(t, phases, q, seed, i)
	}
	rules := []string{fmt.Sprintf("scenario tenants (seed %d): a seeded hash of each row's session key (agentic: its workflow; servegen: its client; mooncake/shared-prefix: the chained hash of its first 1,024 prompt tokens; azure: the row) picks the tenant by share, which fixes class, targets and model:", seed)}
	for k, t := range sc.Tenants {
		s := targets[k]
		models := t.Models
		if len(models) == 0 {
			models = []string{sc.model()}
		}
		rules = append(rules, fmt.Sprintf("  %-14s %-12s share %4.2f (%d rows), TTFT %v + %v/token, TPOT %v, models %s",
			t.Name, t.Class, t.Share, counts[k], s.base, s.per, s.tpot, strings.Join(models, ",")))
	}
	for k, ph := range sc.Trace.ModelMix {
		ms := make([]string, 0, len(ph.Weights))
		for m, w := range ph.Weights {
			ms = append(ms, fmt.Sprintf("%s %g", m, w))
		}
		sort.Strings(ms)
		rules = append(rules, fmt.Sprintf("  model mix from %v: %s (each row's model drawn among its tenant's models by these weights)", phases[k], strings.Join(ms, ", ")))
	}
	tr.Rules = append(tr.Rules, rules...)
	return nil
}

// pickModel is a request's model: with a model mix, drawn among the
// tenant's models by the weights of the phase the row arrives in; else the
// tenant's first model.
func (sc *Scenario) pickModel(t ScenarioTenant, phases []time.Duration, q *traces.Request, seed int64, i int) string {
	if len(t.Models) == 0 {
		return sc.model()
	}
	ph := -1
	for k, at := range phases {
		if q.Arrival >= at {
			ph = k
		}
	}
	if ph < 0 {
		return t.Models[0]
	}
	w := sc.Trace.ModelMix[ph].Weights
	sum := 0.0
	for _, m := range t.Models {
		sum += w[m]
	}
	if sum <= 0 {
		return t.Models[0]
	}
	u := traces.Unit(seed^0x6d6f64656c, uint64(i)) * sum
	for _, m := range t.Models {
		if u -= w[m]; u < 0 {
			return m
		}
	}
	return t.Models[len(t.Models)-1]
}

// burst applies the bursts: arrivals inside a burst window come Factor
// times closer together, later ones move earlier by the time saved.
func (t *ScenarioTrace) burst(tr *traces.Trace) {
	if len(t.Bursts) == 0 {
		return
	}
	type win struct {
		at, d time.Duration
		f     float64
	}
	ws := make([]win, len(t.Bursts))
	for k, b := range t.Bursts {
		ws[k].at, _ = duration("at", b.At)
		ws[k].d, _ = duration("for", b.For)
		ws[k].f = b.Factor
	}
	warp := func(a time.Duration) time.Duration {
		var saved time.Duration
		for _, w := range ws {
			switch {
			case a >= w.at+w.d:
				saved += w.d - time.Duration(float64(w.d)/w.f)
			case a >= w.at:
				saved += (a - w.at) - time.Duration(float64(a-w.at)/w.f)
			}
		}
		return a - saved
	}
	for i := range tr.Requests {
		tr.Requests[i].Arrival = warp(tr.Requests[i].Arrival)
	}
	for _, w := range ws {
		tr.Rules = append(tr.Rules, fmt.Sprintf("burst: arrivals in [%v, %v) of the trace come %g× as fast; later arrivals move earlier by the time saved", w.at, w.at+w.d, w.f))
	}
}

func modelNames(cat *catalog.Catalog) string {
	var out []string
	for _, m := range cat.Models() {
		out = append(out, m.Name)
	}
	return strings.Join(out, ", ")
}

func gpuNames(cat *catalog.Catalog) string {
	var out []string
	for _, g := range cat.GPUs() {
		out = append(out, g.Name)
	}
	return strings.Join(out, ", ")
}
