package fleetlearn

import (
	"slices"
	"testing"
	"time"

	"github.com/switchyard-ai/switchyard/internal/core/catalog"
	"github.com/switchyard-ai/switchyard/internal/testkit/bustest"
	"github.com/switchyard-ai/switchyard/schemas"
	"github.com/switchyard-ai/switchyard/services/svc"
	"github.com/switchyard-ai/switchyard/subjects"
)

var tinySpec = &schemas.ModelSpec{Params: 110_000, Layers: 2, Hidden: 64, Heads: 4, KVHeads: 2, HeadDim: 16, Intermediate: 128, Vocab: 354, MaxContext: 2048}

func TestFollowLearnsFromHeartbeats(t *testing.T) {
	env := bustest.Start(t)
	cat := catalog.Default().Learning()
	f, err := Follow(env.NC, Options{Catalog: cat})
	if err != nil {
		t.Fatal(err)
	}
	defer f.Stop()
	for _, tc := range []struct {
		name   string
		format schemas.Format
	}{{"msgpack", schemas.Msgpack}, {"json", schemas.JSON}} {
		hb := schemas.Heartbeat{WorkerID: "w-" + tc.name, Pool: "p", Models: []schemas.ModelState{
			{Name: "tiny-" + tc.name, State: schemas.WeightHot, Spec: tinySpec},
			{Name: "broken-" + tc.name, State: schemas.WeightHot, Spec: &schemas.ModelSpec{Params: 1}},
		}}
		m, err := svc.Encode(subjects.Heartbeat("p", hb.WorkerID), tc.format, hb, "")
		if err != nil {
			t.Fatal(err)
		}
		if err := env.NC.PublishMsg(m); err != nil {
			t.Fatal(err)
		}
	}
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) && !(f.Serves("tiny-msgpack") && f.Serves("TINY-JSON")) {
		time.Sleep(10 * time.Millisecond)
	}
	for _, name := range []string{"tiny-msgpack", "tiny-json"} {
		if m, ok := cat.Model(name); !ok || !m.FromFleet {
			t.Errorf("%s not learned", name)
		}
		if !f.Serves(name) {
			t.Errorf("%s not served", name)
		}
	}
	if _, ok := cat.Model("broken-json"); ok {
		t.Error("an invalid description was learned")
	}
	if !f.Serves("broken-json") {
		t.Error("a served model whose description is bad is not served")
	}
}

func TestServesOnlyWhileLive(t *testing.T) {
	now := time.Unix(1000, 0)
	f := New(Options{Now: func() time.Time { return now }, Stale: 5 * time.Second})
	known := f.KnownOrServed(func(m string) bool { return m == "llama-3.1-8b" })
	hot := func(worker string, draining bool, state string) schemas.Heartbeat {
		return schemas.Heartbeat{WorkerID: worker, Draining: draining, Models: []schemas.ModelState{{Name: "tiny", State: state}}}
	}
	for _, step := range []struct {
		what    string
		advance time.Duration
		hb      *schemas.Heartbeat
		want    bool
	}{
		{"before any heartbeat", 0, nil, false},
		{"a worker serves it", 0, ptr(hot("a", false, schemas.WeightHot)), true},
		{"within the stale bound", 5 * time.Second, nil, true},
		{"silent past the bound", time.Second, nil, false},
		{"back, sleeping still serves", 0, ptr(hot("a", false, schemas.WeightSleeping)), true},
		{"draining serves nothing", 0, ptr(hot("a", true, schemas.WeightHot)), false},
		{"another worker", 0, ptr(hot("b", false, schemas.WeightHot)), true},
		{"absent there", 0, ptr(hot("b", false, schemas.WeightAbsent)), false},
	} {
		now = now.Add(step.advance)
		if step.hb != nil {
			f.Observe(*step.hb)
		}
		if got := known("tiny"); got != step.want {
			t.Fatalf("%s: known(tiny) = %v, want %v", step.what, got, step.want)
		}
		// The listing agrees with Serves at every step.
		if listed := slices.Contains(f.Models(), Served{Name: "tiny"}); listed != step.want {
			t.Fatalf("%s: Models() = %v, want tiny listed: %v", step.what, f.Models(), step.want)
		}
	}
	if !known("llama-3.1-8b") || known("gpt-17") {
		t.Fatal("the catalog lookup is not kept")
	}
	if f.KnownOrServed(nil) != nil {
		t.Fatal("a nil lookup (accept everything) became a check")
	}
}

func ptr[T any](v T) *T { return &v }

// Models spells a name as the heartbeats do and keeps the context window a
// worker reported.
func TestModelsListing(t *testing.T) {
	f := New(Options{})
	f.Observe(schemas.Heartbeat{WorkerID: "a", Models: []schemas.ModelState{
		{Name: "Tiny", State: schemas.WeightHot, ContextLength: 2048}, {Name: "alpha", State: schemas.WeightCold}}})
	want := []Served{{Name: "Tiny", ContextLength: 2048}, {Name: "alpha"}}
	if got := f.Models(); !slices.Equal(got, want) {
		t.Fatalf("Models() = %v, want %v", got, want)
	}
}
