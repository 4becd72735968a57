package schemas

// ModelSpec describes a served model's architecture, for a model the
// receiver's catalog may not know: a worker fronting a real engine sends
// it in its heartbeat's ModelState (read from the engine, e.g. the GGUF
// metadata Ollama reports), and the router and admitter learn the model
// from it so that what the fleet serves is placeable and admissible. The
// fields mirror the catalog's model shape (config.json names).
type ModelSpec struct {
	Family       string `json:"family,omitempty"`
	Params       int64  `json:"params"`
	Layers       int    `json:"layers"`
	Hidden       int    `json:"hidden"`
	Heads        int    `json:"heads"`
	KVHeads      int    `json:"kv_heads"`
	HeadDim      int    `json:"head_dim"`
	Intermediate int    `json:"intermediate"`
	Vocab        int    `json:"vocab"`
	MaxContext   int    `json:"max_context"`
	// Source says where the numbers came from (e.g. "ollama /api/show").
	Source string `json:"source,omitempty"`
}
