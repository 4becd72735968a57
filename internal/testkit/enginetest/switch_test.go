package enginetest

import (
	"context"
	"fmt"
	"os/exec"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/switchyard-ai/switchyard/internal/adapter/backend/openai"
	"github.com/switchyard-ai/switchyard/internal/core/control"
	"github.com/switchyard-ai/switchyard/schemas"
	"github.com/switchyard-ai/switchyard/services/svc"
	"github.com/switchyard-ai/switchyard/services/worker"
	"github.com/switchyard-ai/switchyard/subjects"
)

// copyModel registers the model from under a second name (`ollama cp`):
// the same GGUF blob, which Ollama loads as a model of its own.
func (s *Ollama) copyModel(ctx context.Context, from, to string) error {
	cctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(cctx, s.bin, "cp", from, to)
	cmd.Env = s.env()
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("enginetest: ollama cp %s %s: %w: %s", from, to, err, lastLine(out))
	}
	return nil
}

// kvClears counts the KVCleared events each worker published.
type kvClears struct {
	mu sync.Mutex
	n  map[string]int
}

func watchKVClears(t *testing.T, nc *nats.Conn) *kvClears {
	t.Helper()
	k := &kvClears{n: map[string]int{}}
	sub, err := nc.Subscribe(subjects.KVAll, func(m *nats.Msg) {
		var e schemas.KVEvent
		if svc.Decode(m.Header, m.Data, &e) == nil && e.Kind == schemas.KVCleared {
			k.mu.Lock()
			k.n[e.WorkerID]++
			k.mu.Unlock()
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sub.Unsubscribe() })
	return k
}

func (k *kvClears) of(worker string) int {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.n[worker]
}

// TestSwitchModelOnOllama is issue 30's switch on a real engine: a worker
// in front of Ollama serves tiny, and the engine has tiny-b too (the same
// GGUF under a second name). The controller's switch tiny → tiny-b, sent
// on the subject the controller sends it on, drains the worker (its
// heartbeat says draining at once), unloads tiny, loads tiny-b as a
// dispatch's load does, measured by the engine, and the switched event
// says so; the routers' KV index of the worker is cleared; the heartbeat
// then lists tiny-b hot first and tiny cold in the page cache with its
// tier time, as the engine's /api/ps agrees; and a request for tiny-b is
// served by the engine through the whole stack, with exactly one result.
func TestSwitchModelOnOllama(t *testing.T) {
	o := startEngine(t, 1, "tiny")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := o.copyModel(ctx, "tiny", "tiny-b"); err != nil {
		t.Fatal(err)
	}
	st := system(t, "tiny", o.URL)
	cl := newClient(t, st, "switch")
	nc := newNC(t, st)
	hbs := watchHeartbeats(t, nc)
	evs := watchEvents(t, nc)
	clears := watchKVClears(t, nc)
	ask := func(id, model string) schemas.Result {
		t.Helper()
		res, err := cl.Do(ctx, tenant, &schemas.Request{ID: id, Model: model, Prompt: "switch over", MaxTokens: 4})
		if err != nil {
			t.Fatal(err)
		}
		if res.Status != schemas.StatusOK {
			t.Fatalf("%s: result %+v", id, res)
		}
		return res
	}
	resident := func() []string {
		t.Helper()
		ps, err := o.Client("").Running(ctx)
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, l := range ps {
			names = append(names, l.Name)
		}
		return names
	}
	holds := func(names []string, model string) bool {
		return slices.ContainsFunc(names, func(n string) bool { return openai.SameModel(n, model) })
	}

	// tiny serves (a first request loads it); tiny-b is listed cold.
	ask("switch-a", "tiny")
	hb := hbs.waitFor(t, "tiny serving hot, tiny-b listed cold", 15*time.Second, func(hb schemas.Heartbeat) bool {
		b, ok := modelState(hb, "tiny-b")
		return len(hb.Models) > 0 && hb.Models[0].Name == "tiny" && hb.Models[0].State == schemas.WeightHot &&
			ok && b.State == schemas.WeightCold && b.LoadSeconds > 0
	})
	id := hb.WorkerID
	b, _ := modelState(hb, "tiny-b")

	hbs.mu.Lock()
	before := len(hbs.all)
	hbs.mu.Unlock()
	m, err := svc.Encode(control.SwitchSubject(id), schemas.JSON, control.SwitchMsg{Worker: id, GPU: "cpu", From: "tiny", To: "tiny-b",
		FromTier: b.Tier, Seconds: b.LoadSeconds, Reason: "drill: switch", At: time.Now()}, "")
	if err != nil {
		t.Fatal(err)
	}
	if err := nc.PublishMsg(m); err != nil {
		t.Fatal(err)
	}
	ev := evs.waitFor(t, "the switch made or refused", 30*time.Second, func(e schemas.Event) bool {
		return e.WorkerID == id && (e.Kind == worker.EventSwitched || e.Kind == worker.EventSwitchRefused)
	})
	if ev.Kind != worker.EventSwitched {
		t.Fatalf("switch refused: %s (%+v)", ev.Reason, ev.Fields)
	}
	load, _ := ev.Fields["load_s"].(float64)
	drain, _ := ev.Fields["drain_s"].(float64)
	if ev.Fields["from"] != "tiny" || ev.Fields["to"] != "tiny-b" || ev.Fields["from_tier"] != schemas.TierDisk || load <= 0 || drain <= 0 {
		t.Fatalf("switched event %+v: want tiny → tiny-b from disk with a measured load and the drain's time", ev.Fields)
	}
	loaded := evs.waitFor(t, "the weights event of tiny-b's load", 5*time.Second, func(e schemas.Event) bool {
		return e.WorkerID == id && e.Kind == "weights" && e.Fields["model"] != nil && openai.SameModel(fmt.Sprint(e.Fields["model"]), "tiny-b")
	})
	if loaded.Fields["load_s"] != load {
		t.Fatalf("switched load_s %v, the load's weights event %v: want the one measured load", load, loaded.Fields["load_s"])
	}
	hbs.mu.Lock()
	drained := slices.ContainsFunc(hbs.all[before:], func(hb schemas.Heartbeat) bool {
		return hb.WorkerID == id && hb.Draining && len(hb.Models) > 0 && hb.Models[0].Name == "tiny"
	})
	hbs.mu.Unlock()
	if !drained {
		t.Fatal("no draining heartbeat while the worker still served tiny")
	}
	if clears.of(id) == 0 {
		t.Fatal("no KVCleared event from the switched worker")
	}

	hb = hbs.waitFor(t, "tiny-b hot first, tiny cold in the page cache", 15*time.Second, func(hb schemas.Heartbeat) bool {
		if hb.WorkerID != id || hb.Draining || len(hb.Models) < 2 {
			return false
		}
		a, ok := modelState(hb, "tiny")
		return hb.Models[0].Name == "tiny-b" && hb.Models[0].State == schemas.WeightHot && hb.Models[0].Tier == schemas.TierHBM &&
			ok && a.State == schemas.WeightCold && a.Tier == schemas.TierPageCache && a.TierSeconds[schemas.TierPageCache] > 0 && a.LoadSeconds > 0
	})
	if got := hb.Models[0]; !slices.Contains(got.TierMeasured, schemas.TierDisk) || got.TierSeconds[schemas.TierDisk] != load {
		t.Fatalf("tiny-b %+v: want its load from disk, %v s, measured", got, load)
	}
	if ps := resident(); !holds(ps, "tiny-b") || holds(ps, "tiny") {
		t.Fatalf("the engine holds %v: want tiny-b, not tiny", ps)
	}

	// A request for tiny-b is served by the engine, here, once.
	res := ask("switch-b", "tiny-b")
	if res.WorkerID != id || res.Model != "tiny-b" || res.Simulated || res.Usage.CompletionTokens == 0 {
		t.Fatalf("tiny-b's result %+v: want served by the engine on %s", res, id)
	}
	if n := storedResults(t, st, "switch-b"); n != 1 {
		t.Fatalf("%d final results for switch-b, want exactly one", n)
	}
	t.Logf("switch tiny → tiny-b on Ollama: drain %.3f s, load from disk %.3f s (measured); tiny then cold in page_cache, tier_s %.3f s",
		drain, load, func() float64 { a, _ := modelState(hb, "tiny"); return a.TierSeconds[schemas.TierPageCache] }())
}
