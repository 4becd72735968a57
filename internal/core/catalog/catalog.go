// Package catalog owns Switchyard's data about hardware and models: the GPU
// catalog (peak FLOP/s, memory, bandwidth, interconnect, the fitted
// efficiencies of the performance model, and default prices) and the model
// catalog (architecture shapes from each model's config.json, plus a size
// tier and family for `model: auto` routing), the weight tiers a model
// loads from (tiers.go) and the network links KV cache moves over between
// a prefill and a decode worker (links.go).
//
// The data is embedded JSON (defaults.json), not code, so an operator can
// extend or override it without rebuilding: Load merges a user file over the
// defaults field by field. Every default carries a "source" string citing
// where its numbers come from (see shared/research/gpu-model.md §1, §2, §4).
// Prices in particular move monthly; they are configuration.
package catalog

import (
	_ "embed"
	"encoding/json"
	"fmt"
	"sort"
	"strings"
)

//go:embed defaults.json
var defaultsJSON []byte

// Dtypes the performance model understands. FP16 and BF16 have the same
// tensor-core rate on every GPU in the catalog.
const (
	DtypeBF16 = "bf16"
	DtypeFP16 = "fp16"
	DtypeFP8  = "fp8"
)

// DtypeBytes returns bytes per weight (and per KV element) for a dtype, or 0
// when the dtype is unknown.
func DtypeBytes(dtype string) float64 {
	// The canonical lower-case names first, without folding: every step
	// prediction asks (placement and the simulated engine), and
	// strings.ToLower on each call showed in placement's profile.
	switch dtype {
	case DtypeBF16, DtypeFP16:
		return 2
	case DtypeFP8:
		return 1
	}
	switch strings.ToLower(dtype) {
	case DtypeBF16, DtypeFP16:
		return 2
	case DtypeFP8:
		return 1
	}
	return 0
}

// GPU is one accelerator type. Rates are per GPU, dense (no sparsity).
type GPU struct {
	Name string `json:"name"`
	// Arch is the generation: ampere, ada, hopper, blackwell, cdna3.
	Arch       string  `json:"arch"`
	BF16TFLOPS float64 `json:"bf16_tflops"`
	FP8TFLOPS  float64 `json:"fp8_tflops"`
	// FP8 reports native FP8 tensor cores (Ada, Hopper and later, CDNA3).
	FP8 bool `json:"fp8"`
	// HBMGiB is device memory as the vendor sells it (NVIDIA's "80 GB"
	// parts report about 79.6 GiB to nvidia-smi, close enough for planning).
	HBMGiB       float64 `json:"hbm_gib"`
	HBMTBps      float64 `json:"hbm_tbps"`
	Interconnect string  `json:"interconnect"`
	// PricePerHour is the default on-demand $/GPU-hour.
	PricePerHour float64 `json:"price_per_hour"`

	// Efficiencies of the roofline model (gpu-model.md §4): the fraction of
	// peak dense BF16 FLOP/s, FP8 FLOP/s and HBM bandwidth a serving
	// engine's GEMMs actually reach on this part.
	EtaF  float64 `json:"eta_f"`
	EtaF8 float64 `json:"eta_f8"`
	EtaB  float64 `json:"eta_b"`
	// All-reduce latency and bus bandwidth for tensor parallelism.
	AllReduceLatencyUs float64 `json:"allreduce_latency_us"`
	AllReduceGBps      float64 `json:"allreduce_gbps"`
	// Assumed marks parts whose efficiencies have no calibration data.
	Assumed bool   `json:"assumed,omitempty"`
	Source  string `json:"source,omitempty"`
}

// HBMBytes is device memory in bytes.
func (g GPU) HBMBytes() float64 { return g.HBMGiB * (1 << 30) }

// Model is one dense decoder-only transformer, shaped as its config.json.
type Model struct {
	Name   string `json:"name"`
	Family string `json:"family"`
	// Tier orders models by size across families: 0 for ~1-2B, 1 for ~3B,
	// 2 for 7-8B, 3 for 70B-class. A `model: auto` router tries the lowest
	// tier the request's policy allows.
	Tier           int   `json:"tier"`
	Params         int64 `json:"params"`
	Layers         int   `json:"layers"`
	Hidden         int   `json:"hidden"`
	Heads          int   `json:"heads"`
	KVHeads        int   `json:"kv_heads"`
	HeadDim        int   `json:"head_dim"`
	Intermediate   int   `json:"intermediate"`
	Vocab          int   `json:"vocab"`
	MaxContext     int   `json:"max_context"`
	TiedEmbeddings bool  `json:"tied_embeddings,omitempty"`
	// Dtypes the model may be served in; empty means bf16, fp16 and fp8.
	Dtypes []string `json:"dtypes,omitempty"`
	Source string   `json:"source,omitempty"`
	// FromFleet marks a model learned from a worker's heartbeat (Learn)
	// rather than configured: only the workers that advertise it can serve
	// it, since nothing says where else its weights could be loaded from.
	FromFleet bool `json:"-"`
}

// LinearParamsPerLayer counts the weights one layer's GEMMs read: Q, K, V
// and O projections plus the gated MLP (gate, up, down).
func (m Model) LinearParamsPerLayer() float64 {
	d, hd := float64(m.Hidden), float64(m.HeadDim)
	return d*float64(m.Heads+2*m.KVHeads)*hd + float64(m.Heads)*hd*d + 3*d*float64(m.Intermediate)
}

// SupportsDtype reports whether the model may be served in dtype.
func (m Model) SupportsDtype(dtype string) bool {
	dtype = strings.ToLower(dtype)
	if DtypeBytes(dtype) == 0 {
		return false
	}
	if len(m.Dtypes) == 0 {
		return true
	}
	for _, d := range m.Dtypes {
		if strings.EqualFold(d, dtype) {
			return true
		}
	}
	return false
}

// Catalog is a set of GPUs and models, keyed by lower-case name. The
// configured part is immutable; a catalog made with Learning also holds the
// models learned from the fleet (learn.go), safe for concurrent use.
type Catalog struct {
	gpus   map[string]GPU
	models map[string]Model
	// tiers are the weight tiers (tiers.go), keyed by name.
	tiers map[string]Tier
	// links are the KV-transfer links (links.go), keyed by name.
	links map[string]Link
	// learned is nil for catalogs that cannot learn (the shared default).
	learned *learnedModels
}

type fileFormat struct {
	GPUs   map[string]json.RawMessage `json:"gpus"`
	Models map[string]json.RawMessage `json:"models"`
	Tiers  map[string]json.RawMessage `json:"weight_tiers,omitempty"`
	Links  map[string]json.RawMessage `json:"links,omitempty"`
}

var defaultCatalog = func() *Catalog {
	c := &Catalog{gpus: map[string]GPU{}, models: map[string]Model{}, tiers: map[string]Tier{}, links: map[string]Link{}}
	if err := c.merge(defaultsJSON); err != nil {
		panic("catalog: embedded defaults.json: " + err.Error())
	}
	return c
}()

// Default returns the built-in catalog. It is shared: treat it as read-only.
func Default() *Catalog { return defaultCatalog }

// Merge returns the defaults with a JSON document merged over them; an
// empty document returns the defaults. It has the shape of defaults.json:
// {"gpus": {"name": {...}}, "models": {"name": {...}}, "weight_tiers":
// {"name": {...}}, "links": {"name": {...}}}. An entry with a known
// name overrides only the fields it sets (e.g. {"gpus":{"h100":
// {"price_per_hour":2.1}}}); a new name adds an entry, which must then be
// complete enough to validate. Reading the file is the caller's
// (internal/adapter/config.LoadCatalog): the catalog does no I/O.
func Merge(data []byte) (*Catalog, error) {
	if len(data) == 0 {
		return Default(), nil
	}
	c := defaultCatalog.clone()
	if err := c.merge(data); err != nil {
		return nil, fmt.Errorf("catalog: %w", err)
	}
	return c, nil
}

func (c *Catalog) clone() *Catalog {
	n := &Catalog{gpus: make(map[string]GPU, len(c.gpus)), models: make(map[string]Model, len(c.models)), tiers: make(map[string]Tier, len(c.tiers)),
		links: make(map[string]Link, len(c.links))}
	for k, v := range c.links {
		n.links[k] = v
	}
	for k, v := range c.tiers {
		n.tiers[k] = v
	}
	for k, v := range c.gpus {
		n.gpus[k] = v
	}
	for k, v := range c.models {
		n.models[k] = v
	}
	return n
}

func (c *Catalog) merge(data []byte) error {
	var f fileFormat
	dec := json.NewDecoder(strings.NewReader(string(data)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&f); err != nil {
		return err
	}
	for name, raw := range f.GPUs {
		key := strings.ToLower(name)
		g := c.gpus[key] // zero value for a new entry
		if err := strictUnmarshal(raw, &g); err != nil {
			return fmt.Errorf("gpu %q: %w", name, err)
		}
		g.Name = key
		if err := g.validate(); err != nil {
			return fmt.Errorf("gpu %q: %w", name, err)
		}
		c.gpus[key] = g
	}
	for name, raw := range f.Models {
		key := strings.ToLower(name)
		m := c.models[key]
		if err := strictUnmarshal(raw, &m); err != nil {
			return fmt.Errorf("model %q: %w", name, err)
		}
		m.Name = key
		if err := m.validate(); err != nil {
			return fmt.Errorf("model %q: %w", name, err)
		}
		c.models[key] = m
	}
	for name, raw := range f.Tiers {
		key := strings.ToLower(name)
		t := c.tiers[key]
		if err := strictUnmarshal(raw, &t); err != nil {
			return fmt.Errorf("weight tier %q: %w", name, err)
		}
		t.Name = key
		if err := t.validate(); err != nil {
			return fmt.Errorf("weight tier %q: %w", name, err)
		}
		c.tiers[key] = t
	}
	for name, raw := range f.Links {
		key := strings.ToLower(name)
		l := c.links[key]
		if err := strictUnmarshal(raw, &l); err != nil {
			return fmt.Errorf("link %q: %w", name, err)
		}
		l.Name = key
		if err := l.validate(); err != nil {
			return fmt.Errorf("link %q: %w", name, err)
		}
		c.links[key] = l
	}
	return nil
}

// strictUnmarshal decodes onto v's existing fields, rejecting unknown keys so
// a typo in an override file fails loudly instead of being ignored.
func strictUnmarshal(raw json.RawMessage, v any) error {
	dec := json.NewDecoder(strings.NewReader(string(raw)))
	dec.DisallowUnknownFields()
	return dec.Decode(v)
}

func (g GPU) validate() error {
	switch {
	case g.BF16TFLOPS <= 0:
		return fmt.Errorf("bf16_tflops must be > 0")
	case g.HBMGiB <= 0:
		return fmt.Errorf("hbm_gib must be > 0")
	case g.HBMTBps <= 0:
		return fmt.Errorf("hbm_tbps must be > 0")
	case g.EtaF <= 0 || g.EtaF > 1 || g.EtaB <= 0 || g.EtaB > 1:
		return fmt.Errorf("eta_f and eta_b must be in (0, 1]")
	case g.FP8 && (g.FP8TFLOPS <= 0 || g.EtaF8 <= 0 || g.EtaF8 > 1):
		return fmt.Errorf("fp8 parts need fp8_tflops > 0 and eta_f8 in (0, 1]")
	case g.PricePerHour < 0:
		return fmt.Errorf("price_per_hour must be >= 0")
	case g.AllReduceGBps <= 0:
		return fmt.Errorf("allreduce_gbps must be > 0")
	}
	return nil
}

func (m Model) validate() error {
	switch {
	case m.Layers <= 0 || m.Hidden <= 0 || m.Heads <= 0 || m.KVHeads <= 0 || m.HeadDim <= 0:
		return fmt.Errorf("layers, hidden, heads, kv_heads and head_dim must be > 0")
	case m.Heads%m.KVHeads != 0:
		return fmt.Errorf("heads (%d) must be a multiple of kv_heads (%d)", m.Heads, m.KVHeads)
	case m.Intermediate <= 0 || m.Vocab <= 0 || m.MaxContext <= 0:
		return fmt.Errorf("intermediate, vocab and max_context must be > 0")
	case m.Params <= 0:
		return fmt.Errorf("params must be > 0")
	}
	for _, d := range m.Dtypes {
		if DtypeBytes(d) == 0 {
			return fmt.Errorf("unknown dtype %q", d)
		}
	}
	return nil
}

// GPU looks a GPU up by name, case-insensitively.
func (c *Catalog) GPU(name string) (GPU, bool) {
	g, ok := c.gpus[name]
	if !ok {
		g, ok = c.gpus[strings.ToLower(name)]
	}
	return g, ok
}

// Model looks a model up by name, case-insensitively.
func (c *Catalog) Model(name string) (Model, bool) {
	m, ok := c.models[name]
	if !ok {
		m, ok = c.models[strings.ToLower(name)]
	}
	if !ok && c.learned != nil {
		m, ok = c.learned.get(strings.ToLower(name))
	}
	return m, ok
}

// GPUs returns every GPU sorted by name.
func (c *Catalog) GPUs() []GPU {
	out := make([]GPU, 0, len(c.gpus))
	for _, g := range c.gpus {
		out = append(out, g)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// Models returns every model sorted by name.
func (c *Catalog) Models() []Model {
	out := make([]Model, 0, len(c.models))
	for _, m := range c.models {
		out = append(out, m)
	}
	if c.learned != nil {
		out = append(out, c.learned.all()...)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}
