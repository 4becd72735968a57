package routing_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/switchyard-ai/switchyard/internal/core/catalog"
	"github.com/switchyard-ai/switchyard/internal/core/perf"
	"github.com/switchyard-ai/switchyard/internal/core/replay"
	"github.com/switchyard-ai/switchyard/internal/core/routing"
	"github.com/switchyard-ai/switchyard/schemas"
)

// mystery is a model no built-in catalog knows: only the heartbeats of the
// workers serving it describe it.
const mystery = "mystery-34b"

var mysterySpec = schemas.ModelSpec{Family: "llama", Params: 34_000_000_000, Layers: 48, Hidden: 8192, Heads: 64, KVHeads: 8,
	HeadDim: 128, Intermediate: 22016, Vocab: 32000, MaxContext: 16384, Source: "test"}

func mysteryBeat(worker, gpu string, tp int, price float64, described bool, seq uint64) *schemas.Heartbeat {
	ms := schemas.ModelState{Name: mystery, Dtype: "bf16", State: schemas.WeightHot}
	if described {
		spec := mysterySpec
		ms.Spec = &spec
	}
	return &schemas.Heartbeat{V: schemas.Version, WorkerID: worker, Pool: gpu, GPU: gpu, Simulated: true, Backend: "sim", TP: tp,
		HBMTotalBytes: 80 << 30, HBMFreeBytes: 10 << 30, KVBlocksTotal: 20000, KVBlocksFree: 20000, BlockSize: 16,
		Models: []schemas.ModelState{ms}, MaxBatch: 64, Seq: seq, PricePerHour: price}
}

// catalogChangeJournal is a router's inputs with the catalog changing
// mid-stream: requests for a model the catalog does not know arrive while
// the workers serving it send plain heartbeats, then one worker's
// heartbeat describes the model, and more requests arrive.
func catalogChangeJournal() []routing.Input {
	t0 := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	var in []routing.Input
	at := t0
	beat := func(described bool) {
		seq := uint64(at.Sub(t0) / time.Millisecond)
		in = append(in, routing.Input{Kind: routing.InHeartbeat, At: at, Heartbeat: mysteryBeat("w-h100", "h100", 1, 3, described, seq)},
			routing.Input{Kind: routing.InHeartbeat, At: at, Heartbeat: mysteryBeat("w-a100", "a100-80g", 1, 1.5, false, seq)})
	}
	n := 0
	request := func() {
		n++
		id := fmt.Sprintf("r%d", n)
		in = append(in, routing.Input{Kind: routing.InAdmitted, At: at, Admitted: &schemas.Admitted{
			Request: schemas.Request{ID: id, Model: mystery, MaxTokens: 200, Priority: schemas.PriorityStandard},
			Tenant:  "acme", Model: mystery, Priority: schemas.PriorityStandard, PromptTokens: 1500 + 500*n,
			SubmittedAt: at, Deadline: at.Add(20 * time.Second)}})
	}
	for step := 0; step < 40; step++ {
		if step%5 == 0 {
			beat(step >= 20) // the description arrives half-way
		}
		if step%2 == 0 {
			request()
		}
		in = append(in, routing.Input{Kind: routing.InTick, At: at})
		at = at.Add(100 * time.Millisecond)
	}
	return in
}

// run replays inputs through a fresh core over cat, as a router (or
// `switchyard replay`) builds one.
func run(cat *catalog.Catalog, inputs []routing.Input) []replay.Decision {
	cost := perf.NewPredictor(cat)
	pol, err := routing.PolicyNamed("switchyard", cat, cost)
	if err != nil {
		panic(err)
	}
	return replay.Run(routing.New(routing.Config{Policy: pol, Cost: cost, Catalog: cat}), inputs)
}

// TestReplayWithACatalogChangeMidStream: the catalog's one change at run
// time — a model learned from a heartbeat's description — is an input the
// core applies and the journal records, so a replay from the journal,
// through a fresh learning copy of the configured catalog, makes every
// decision the live core made: the requests before the description are
// refused (nothing can price the model), those after it placed. A core
// taught by anything but its inputs (the side subscription the router
// once had, which replay never saw) diverges.
func TestReplayWithACatalogChangeMidStream(t *testing.T) {
	inputs := catalogChangeJournal()
	live := run(catalog.Default().Learning(), inputs)
	var before, after int
	for _, d := range live {
		switch {
		case d.Kind == "failed" && d.Code == schemas.CodeUnplaceable:
			before++
		case d.Kind == "placed":
			after++
		}
	}
	if before == 0 || after == 0 {
		t.Fatalf("the live core should refuse the unknown model, then place it once described: %d refused, %d placed", before, after)
	}

	// Through the journal's own encoding, as `switchyard replay` reads it.
	j := routing.NewJournal()
	for _, in := range inputs {
		if err := j.Add(in, 0); err != nil {
			t.Fatal(err)
		}
	}
	entries, err := routing.DecodeJournal(j.Take())
	if err != nil {
		t.Fatal(err)
	}
	replayed, unresolved := replay.Resolve(entries, nil)
	if unresolved != 0 {
		t.Fatalf("%d journal entries unresolved", unresolved)
	}
	got := run(catalog.Default().Learning(), replayed)
	if diff := firstDifference(live, got); diff != "" {
		t.Fatalf("replay diverged from the live core: %s", diff)
	}

	// The controls: a catalog that learns nothing, and one that already
	// knew the model when the journal began (what one catalog shared by
	// every replayed core would be), each decide differently.
	if firstDifference(live, run(catalog.Default(), replayed)) == "" {
		t.Error("a core whose catalog never learns made the live decisions: the test cannot tell")
	}
	known := catalog.Default().Learning()
	if _, err := known.Learn(mystery, mysterySpec); err != nil {
		t.Fatal(err)
	}
	if firstDifference(live, run(known, replayed)) == "" {
		t.Error("a core that knew the model from the start made the live decisions: the test cannot tell")
	}
}

func firstDifference(a, b []replay.Decision) string {
	for i := range min(len(a), len(b)) {
		if !a[i].Same(b[i]) || a[i].ID != b[i].ID {
			return fmt.Sprintf("decision %d: %s %s %s %s, then %s %s %s %s", i, a[i].ID, a[i].Kind, a[i].Worker, a[i].Code,
				b[i].ID, b[i].Kind, b[i].Worker, b[i].Code)
		}
	}
	if len(a) != len(b) {
		return fmt.Sprintf("%d decisions, then %d", len(a), len(b))
	}
	return ""
}
