package engine

import (
	"errors"
	"strings"
	"testing"

	"github.com/switchyard-ai/switchyard/internal/core/perf"
	"github.com/switchyard-ai/switchyard/schemas"
)

func modelReplica(t testing.TB, model string) perf.Replica {
	t.Helper()
	r, err := perf.NewReplica(nil, "h100", model, "bf16", 1)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// TestShelfChange: a change to a parked model sleeps the serving engine in
// host memory and parks it, and serves the parked model's engine — made
// from the template on its first switch, its load started from its tier,
// the serving engine's budgets and speculation carried over. A change to a
// model not parked, to the serving one, or while the serving engine still
// runs sequences changes nothing.
func TestShelfChange(t *testing.T) {
	const qwen, small = "qwen2.5-7b", "llama-3.2-3b"
	for _, tc := range []struct {
		name     string
		to       string
		parked   map[string]string // model → tier
		running  bool              // the serving engine runs a sequence
		wantErr  error             // nil: the change is made
		anyErr   bool              // an error not of a kind a shell tells apart
		wantFrom string
	}{
		{name: "to a model asleep in host memory", to: qwen, parked: map[string]string{qwen: schemas.TierHost}, wantFrom: schemas.TierHost},
		{name: "to a model in the page cache", to: small, parked: map[string]string{qwen: schemas.TierHost, small: schemas.TierPageCache}, wantFrom: schemas.TierPageCache},
		{name: "names compare as commands do", to: "QWEN2.5-7B", parked: map[string]string{qwen: schemas.TierDisk}, wantFrom: schemas.TierDisk},
		{name: "to a model not parked", to: small, parked: map[string]string{qwen: schemas.TierHost}, wantErr: ErrNotParked},
		{name: "on an empty shelf", to: qwen, wantErr: ErrNotParked},
		{name: "while the old engine runs sequences", to: qwen, parked: map[string]string{qwen: schemas.TierHost}, running: true, wantErr: ErrRunning},
		{name: "to the serving model", to: "llama-3.1-8b", parked: map[string]string{qwen: schemas.TierHost}, anyErr: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := NewShelf(Config{KVBlocks: 1234, MaxBatch: 4})
			for m, tier := range tc.parked {
				if err := s.Park(modelReplica(t, m), tier); err != nil {
					t.Fatal(err)
				}
			}
			serving := newEngine(t, Config{})
			serving.SetBudgets(24, 3072)
			serving.SetSpecDecode(true)
			if tc.running {
				if err := serving.Add(seqOf("a", 1, 256, 64)); err != nil {
					t.Fatal(err)
				}
				serving.Step(t0)
				if serving.State().Running == 0 {
					t.Fatal("setup: the sequence is not running")
				}
			}
			ch, err := s.Change(tc.to, serving, t0)
			if tc.wantErr != nil || tc.anyErr {
				if err == nil || (tc.wantErr != nil && !errors.Is(err, tc.wantErr)) {
					t.Fatalf("Change(%s) = %v, want %v", tc.to, err, tc.wantErr)
				}
				// Nothing changed: the serving engine still serves, hot,
				// and the shelf holds what it held, no engine made.
				if st := serving.State(); st.Weights != schemas.WeightHot || (tc.running && st.Running == 0) {
					t.Errorf("serving engine after a refused change: %s, %d running", st.Weights, st.Running)
				}
				if s.Len() != len(tc.parked) || s.Parked("llama-3.1-8b") {
					t.Errorf("shelf after a refused change: %d parked (want %d), serving model parked %v", s.Len(), len(tc.parked), s.Parked("llama-3.1-8b"))
				}
				for _, p := range s.parked {
					if p.eng != nil {
						t.Errorf("refused change made an engine for %s", p.rep.Model.Name)
					}
				}
				return
			}
			if err != nil {
				t.Fatalf("Change(%s): %v", tc.to, err)
			}
			if ch.Engine == nil || ch.Engine == serving {
				t.Fatalf("Change returned engine %p (serving %p)", ch.Engine, serving)
			}
			if !strings.EqualFold(ch.Replica.Model.Name, tc.to) || ch.Engine.rep.Model.Name != ch.Replica.Model.Name {
				t.Errorf("serves %s (engine %s), want %s", ch.Replica.Model.Name, ch.Engine.rep.Model.Name, tc.to)
			}
			if ch.From != tc.wantFrom || ch.LoadSeconds != ch.Replica.TierSeconds(tc.wantFrom) || ch.LoadSeconds <= 0 {
				t.Errorf("from %s in %.2fs, want from %s in %.2fs", ch.From, ch.LoadSeconds, tc.wantFrom, ch.Replica.TierSeconds(tc.wantFrom))
			}
			st := ch.Engine.State()
			if st.Weights != schemas.WeightLoading || st.MaxBatch != 24 || st.TokenBudget != 3072 || !st.SpecDecode {
				t.Errorf("new engine: %s, batch %d, budget %d, spec %v; want loading with the old engine's 24, 3072, true",
					st.Weights, st.MaxBatch, st.TokenBudget, st.SpecDecode)
			}
			if st.KVBlocksTotal != 1234 {
				t.Errorf("new engine's KV pool %d blocks, want the template's 1234", st.KVBlocksTotal)
			}
			if serving.Tier() != schemas.TierHost || serving.State().Weights != schemas.WeightSleeping {
				t.Errorf("old engine %s in %s, want asleep in host memory", serving.State().Weights, serving.Tier())
			}
			if s.Parked(tc.to) || !s.Parked("llama-3.1-8b") || s.Len() != len(tc.parked) {
				t.Errorf("shelf after the change: %s parked %v, llama parked %v, %d parked", tc.to, s.Parked(tc.to), s.Parked("llama-3.1-8b"), s.Len())
			}
			// Back again: the old engine, asleep, serves once more (a wake
			// from host memory, its budgets its own).
			back, err := s.Change("llama-3.1-8b", ch.Engine, t0)
			if err != nil {
				t.Fatal(err)
			}
			if back.Engine != serving || back.From != schemas.TierHost || !s.Parked(tc.to) {
				t.Errorf("back: engine %p (want %p) from %s, %s parked %v", back.Engine, serving, back.From, tc.to, s.Parked(tc.to))
			}
		})
	}
}

// TestShelfAnnotate: the heartbeat lists the serving model first and then
// every parked model, by name, with its tier and the load from it; a model
// that served here and was put to sleep is listed asleep in host memory.
// The free HBM is capped at what the serving engine's reservation leaves.
func TestShelfAnnotate(t *testing.T) {
	type entry struct {
		name, tier, state string
	}
	for _, tc := range []struct {
		name   string
		parked map[string]string
		change string // a change made before the heartbeat
		want   []entry
	}{
		{name: "nothing parked", want: []entry{{"llama-3.1-8b", schemas.TierHBM, schemas.WeightHot}}},
		{name: "two parked", parked: map[string]string{"qwen2.5-7b": schemas.TierHost, "llama-3.2-3b": schemas.TierPageCache},
			want: []entry{{"llama-3.1-8b", schemas.TierHBM, schemas.WeightHot}, {"llama-3.2-3b", schemas.TierPageCache, schemas.WeightCold},
				{"qwen2.5-7b", schemas.TierHost, schemas.WeightSleeping}}},
		{name: "after a change", parked: map[string]string{"qwen2.5-7b": schemas.TierDisk, "llama-3.2-3b": schemas.TierRemote}, change: "qwen2.5-7b",
			want: []entry{{"qwen2.5-7b", schemas.TierHBM, schemas.WeightLoading}, {"llama-3.1-8b", schemas.TierHost, schemas.WeightSleeping},
				{"llama-3.2-3b", schemas.TierRemote, schemas.WeightAbsent}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := NewShelf(Config{})
			for m, tier := range tc.parked {
				if err := s.Park(modelReplica(t, m), tier); err != nil {
					t.Fatal(err)
				}
			}
			serving := newEngine(t, Config{})
			if tc.change != "" {
				ch, err := s.Change(tc.change, serving, t0)
				if err != nil {
					t.Fatal(err)
				}
				serving = ch.Engine
			}
			var hb schemas.Heartbeat
			serving.FillHeartbeat(&hb)
			free := hb.HBMFreeBytes
			s.Annotate(&hb)
			if len(hb.Models) != len(tc.want) {
				t.Fatalf("models %+v, want %+v", hb.Models, tc.want)
			}
			for i, w := range tc.want {
				m := hb.Models[i]
				if m.Name != w.name || m.Tier != w.tier || m.State != w.state {
					t.Errorf("model %d: %s %s in %s, want %s %s in %s", i, m.Name, m.State, m.Tier, w.name, w.state, w.tier)
				}
				if i > 0 {
					if want := modelReplica(t, w.name).TierSeconds(w.tier); m.LoadSeconds != want || want <= 0 {
						t.Errorf("%s load_s %.3f, want %.3f from %s", m.Name, m.LoadSeconds, want, w.tier)
					}
				}
			}
			if len(tc.want) > 1 {
				if reserved := uint64(float64(hb.HBMTotalBytes) * perf.DefaultMemUtil); hb.HBMFreeBytes > hb.HBMTotalBytes-reserved {
					t.Errorf("free HBM %d of %d: want at most what the reservation leaves", hb.HBMFreeBytes, hb.HBMTotalBytes)
				}
			} else if hb.HBMFreeBytes != free {
				t.Errorf("free HBM %d, want %d untouched with nothing parked", hb.HBMFreeBytes, free)
			}
		})
	}
	// A worker with no shelf heartbeats as one with nothing parked.
	var nilShelf *Shelf
	var hb schemas.Heartbeat
	nilShelf.Annotate(&hb)
	if len(hb.Models) != 0 || nilShelf.Parked("qwen2.5-7b") || nilShelf.Len() != 0 {
		t.Errorf("nil shelf: %+v", hb.Models)
	}
}

// TestShelfParkRefusesHBM: a parked model's weights are off the GPU.
func TestShelfParkRefusesHBM(t *testing.T) {
	s := NewShelf(Config{})
	for _, tier := range []string{schemas.TierHBM, "nowhere", ""} {
		if err := s.Park(modelReplica(t, "qwen2.5-7b"), tier); err == nil {
			t.Errorf("Park at %q: no error", tier)
		}
	}
	if s.Len() != 0 {
		t.Errorf("%d parked after refusals", s.Len())
	}
}
