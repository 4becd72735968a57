package fleetlearn

import (
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/switchyard-ai/switchyard/internal/bus/bustest"
	"github.com/switchyard-ai/switchyard/internal/catalog"
	"github.com/switchyard-ai/switchyard/schemas"
	"github.com/switchyard-ai/switchyard/services/svc"
	"github.com/switchyard-ai/switchyard/subjects"
)

func TestFollowLearnsFromHeartbeats(t *testing.T) {
	env := bustest.Start(t)
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	if _, err := Follow(env.NC, catalog.Default(), log); err == nil {
		t.Fatal("followed into the shared default catalog")
	}
	cat := catalog.Default().Learning()
	sub, err := Follow(env.NC, cat, log)
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	spec := &schemas.ModelSpec{Params: 110_000, Layers: 2, Hidden: 64, Heads: 4, KVHeads: 2, HeadDim: 16, Intermediate: 128, Vocab: 354, MaxContext: 2048}
	bad := &schemas.ModelSpec{Params: 1}
	name := map[schemas.Format]string{schemas.Msgpack: "msgpack", schemas.JSON: "json"}
	for _, f := range []schemas.Format{schemas.Msgpack, schemas.JSON} {
		hb := schemas.Heartbeat{WorkerID: "w-" + name[f], Pool: "p", Models: []schemas.ModelState{
			{Name: "tiny-" + name[f], State: schemas.WeightHot, Spec: spec},
			{Name: "broken-" + name[f], State: schemas.WeightHot, Spec: bad},
			{Name: "llama-3.1-8b", State: schemas.WeightHot}, // no spec: nothing to learn
		}}
		m, err := svc.Encode(subjects.Heartbeat("p", hb.WorkerID), f, hb, "")
		if err != nil {
			t.Fatal(err)
		}
		if err := env.NC.PublishMsg(m); err != nil {
			t.Fatal(err)
		}
	}
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		_, a := cat.Model("tiny-" + "msgpack")
		_, b := cat.Model("tiny-" + "json")
		if a && b {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	for _, f := range []schemas.Format{schemas.Msgpack, schemas.JSON} {
		if m, ok := cat.Model("tiny-" + name[f]); !ok || !m.FromFleet {
			t.Errorf("%s heartbeat: tiny not learned", f)
		}
		if _, ok := cat.Model("broken-" + name[f]); ok {
			t.Errorf("%s heartbeat: an invalid description was learned", f)
		}
	}
}
