package enginetest

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/switchyard-ai/switchyard/internal/adapter/backend/openai"
	"github.com/switchyard-ai/switchyard/internal/core/control"
	"github.com/switchyard-ai/switchyard/schemas"
	"github.com/switchyard-ai/switchyard/services/svc"
)

// TestSleepThroughThePageCache is issue 30's drill on a real Ollama: the
// controller's sleep (a warmth message on the subject the controller
// sends it on) unloads the model — Ollama has no host-memory tier — and
// the heartbeat says it sits in the page cache; a dispatch reloads it from
// there, and the engine's own measure of that reload is the heartbeat's
// measured tier_s for page_cache, the same figure the weights event
// reports; a second sleep reports that measured time for the tier it
// fell to.
func TestSleepThroughThePageCache(t *testing.T) {
	o := startEngine(t, 1, "tiny")
	st := system(t, "tiny", o.URL)
	cl := newClient(t, st, "tiers")
	nc := newNC(t, st)
	hbs := watchHeartbeats(t, nc)
	evs := watchEvents(t, nc)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	ask := func(id string) {
		t.Helper()
		res, err := cl.Do(ctx, tenant, &schemas.Request{ID: id, Model: "tiny", Prompt: "wake up", MaxTokens: 4})
		if err != nil {
			t.Fatal(err)
		}
		if res.Status != schemas.StatusOK {
			t.Fatalf("%s: result %+v", id, res)
		}
	}
	resident := func() bool {
		ps, err := o.Client("").Running(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return slices.ContainsFunc(ps, func(l openai.Loaded) bool { return openai.SameModel(l.Name, "tiny") })
	}
	tiny := func(hb schemas.Heartbeat) schemas.ModelState { m, _ := modelState(hb, "tiny"); return m }

	// The first request loads the model; the worker has seen it in memory.
	ask("tier-1")
	hb := hbs.waitFor(t, "tiny resident", 10*time.Second, func(hb schemas.Heartbeat) bool {
		m := tiny(hb)
		return m.State == schemas.WeightHot && m.Tier == schemas.TierHBM
	})
	worker := hb.WorkerID
	sleep := func() {
		t.Helper()
		m, err := svc.Encode(control.WarmthSubject(worker), schemas.JSON,
			control.WarmthMsg{Worker: worker, Model: "tiny", State: schemas.WeightSleeping, Reason: "drill: sleep"}, "")
		if err != nil {
			t.Fatal(err)
		}
		if err := nc.PublishMsg(m); err != nil {
			t.Fatal(err)
		}
	}

	sleep()
	hb = hbs.waitFor(t, "tiny in the page cache after the controller's sleep", 15*time.Second, func(hb schemas.Heartbeat) bool {
		m := tiny(hb)
		return m.State == schemas.WeightCold && m.Tier == schemas.TierPageCache && !resident()
	})
	asleep := tiny(hb)
	if _, ok := asleep.TierSeconds[schemas.TierPageCache]; !ok {
		t.Fatalf("asleep: no tier_s for page_cache: %+v", asleep)
	}
	if slices.Contains(asleep.TierMeasured, schemas.TierPageCache) {
		t.Fatalf("asleep before any reload, but page_cache is reported measured: %+v", asleep)
	}

	// A dispatch reloads it through the page cache, measured.
	ask("tier-2")
	ev := evs.waitFor(t, "the reload's weights event", 10*time.Second, func(e schemas.Event) bool {
		return e.Kind == "weights" && e.Fields["from_tier"] == schemas.TierPageCache
	})
	reload, _ := ev.Fields["load_s"].(float64)
	if reload <= 0 {
		t.Fatalf("reload event without a load time: %+v", ev)
	}
	hb = hbs.waitFor(t, "tiny back in hbm with the measured reload", 10*time.Second, func(hb schemas.Heartbeat) bool {
		m := tiny(hb)
		return m.State == schemas.WeightHot && m.Tier == schemas.TierHBM && slices.Contains(m.TierMeasured, schemas.TierPageCache)
	})
	awake := tiny(hb)
	if got := awake.TierSeconds[schemas.TierPageCache]; got != reload || awake.LoadSeconds != reload {
		t.Fatalf("tier_s[page_cache] %v, load_s %v: want the measured reload %v", got, awake.LoadSeconds, reload)
	}
	if !resident() {
		t.Fatal("the heartbeat says hbm but the engine does not hold tiny")
	}

	// Asleep again: the tier it fell to carries the measured reload.
	sleep()
	hb = hbs.waitFor(t, "tiny in the page cache again, with its measured reload", 15*time.Second, func(hb schemas.Heartbeat) bool {
		m := tiny(hb)
		return m.Tier == schemas.TierPageCache && slices.Contains(m.TierMeasured, schemas.TierPageCache) && !resident()
	})
	if m := tiny(hb); m.LoadSeconds != reload || m.TierSeconds[schemas.TierPageCache] != reload {
		t.Fatalf("asleep again: load_s %v tier_s %v, want the measured %v", m.LoadSeconds, m.TierSeconds, reload)
	}
	t.Logf("unload → reload through the page cache: %.3f s measured (disk-tier tier_s %.3f s, measured %v)",
		reload, awake.TierSeconds[schemas.TierDisk], awake.TierMeasured)
}
