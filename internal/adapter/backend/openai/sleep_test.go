package openai

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/switchyard-ai/switchyard/schemas"
)

// fakeSleepyVLLM answers vLLM's sleep mode endpoints as its documentation
// and api_router.py describe them (sleep.go): each memory tag (weights,
// kv_cache) is awake or asleep; level 1 keeps the weights' contents in
// host memory, level 2 forgets them, so after a level-2 sleep the weights
// must be woken, then reloaded, before the engine serves correctly.
// is_sleeping is true while any tag sleeps. It records every call.
type fakeSleepyVLLM struct {
	mu sync.Mutex
	// asleep marks the sleeping tags; weightsLost is set by a level-2
	// sleep and cleared by reload_weights.
	asleep      map[string]bool
	weightsLost bool
	calls       []string
}

func (f *fakeSleepyVLLM) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, r.Method+" "+r.URL.RequestURI())
	switch {
	case r.Method == http.MethodPost && r.URL.Path == "/sleep":
		level := r.URL.Query().Get("level")
		if level == "" {
			level = "1" // api_router.py's default
		}
		switch level {
		case "1":
		case "2":
			f.weightsLost = true
		default:
			http.Error(w, "bad level", http.StatusInternalServerError)
			return
		}
		f.asleep["weights"], f.asleep["kv_cache"] = true, true
	case r.Method == http.MethodPost && r.URL.Path == "/wake_up":
		tags := r.URL.Query()["tags"]
		if len(tags) == 0 {
			tags = []string{"weights", "kv_cache"}
		}
		for _, t := range tags {
			delete(f.asleep, t)
		}
	case r.Method == http.MethodPost && r.URL.Path == "/collective_rpc":
		var body struct {
			Method string `json:"method"`
		}
		if err := json.NewDecoder(r.Body).Decode(&body); err != nil || body.Method != "reload_weights" {
			http.Error(w, "want {\"method\":\"reload_weights\"}", http.StatusBadRequest)
			return
		}
		if f.asleep["weights"] {
			// The weights' memory must be allocated before it is filled.
			http.Error(w, "weights are asleep", http.StatusInternalServerError)
			return
		}
		f.weightsLost = false
	case r.Method == http.MethodGet && r.URL.Path == "/is_sleeping":
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(map[string]bool{"is_sleeping": len(f.asleep) > 0})
		return
	default:
		http.NotFound(w, r)
		return
	}
	w.WriteHeader(http.StatusOK)
}

// serving reports whether the engine would answer with its real weights.
func (f *fakeSleepyVLLM) serving() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.asleep) == 0 && !f.weightsLost
}

// TestSleepAndWake: both levels sleep and wake through the documented
// calls, and the engine serves its own weights afterwards; is_sleeping
// reads each state back.
func TestSleepAndWake(t *testing.T) {
	cases := []struct {
		level     int
		tier      string
		wakeCalls []string
	}{
		{SleepOffload, schemas.TierHost, []string{"POST /wake_up"}},
		{SleepDiscard, schemas.TierPageCache, []string{"POST /wake_up?tags=weights", "POST /collective_rpc", "POST /wake_up?tags=kv_cache"}},
	}
	for _, tc := range cases {
		t.Run(tc.tier, func(t *testing.T) {
			fake := &fakeSleepyVLLM{asleep: map[string]bool{}}
			srv := httptest.NewServer(fake)
			defer srv.Close()
			c := New(srv.URL, "m")
			ctx := context.Background()
			if got := SleepTier(tc.level); got != tc.tier {
				t.Fatalf("SleepTier(%d) = %q, want %q", tc.level, got, tc.tier)
			}
			if err := c.Sleep(ctx, tc.level); err != nil {
				t.Fatal(err)
			}
			if s, err := c.IsSleeping(ctx); err != nil || !s {
				t.Fatalf("after sleep: is_sleeping %v, %v", s, err)
			}
			fake.mu.Lock()
			fake.calls = nil
			fake.mu.Unlock()
			d, err := c.Wake(ctx, tc.level)
			if err != nil {
				t.Fatal(err)
			}
			if d <= 0 {
				t.Fatalf("wake took %v", d)
			}
			fake.mu.Lock()
			calls := strings.Join(fake.calls, ", ")
			fake.mu.Unlock()
			if calls != strings.Join(tc.wakeCalls, ", ") {
				t.Fatalf("wake calls %s, want %s", calls, strings.Join(tc.wakeCalls, ", "))
			}
			if s, err := c.IsSleeping(ctx); err != nil || s {
				t.Fatalf("after wake: is_sleeping %v, %v", s, err)
			}
			if !fake.serving() {
				t.Fatal("awake but without its weights")
			}
		})
	}
}

// TestSleepModeErrors: a server without the dev-mode endpoints, a level
// vLLM has not, and an is_sleeping answer without its field are clear
// errors, not a silent success.
func TestSleepModeErrors(t *testing.T) {
	ctx := context.Background()
	bare := httptest.NewServer(http.NotFoundHandler())
	defer bare.Close()
	c := New(bare.URL, "m")
	if err := c.Sleep(ctx, SleepOffload); !errors.Is(err, ErrNoSleepMode) {
		t.Fatalf("sleep on a server without sleep mode: %v", err)
	}
	if _, err := c.Wake(ctx, SleepOffload); !errors.Is(err, ErrNoSleepMode) {
		t.Fatalf("wake on a server without sleep mode: %v", err)
	}
	if _, err := c.IsSleeping(ctx); !errors.Is(err, ErrNoSleepMode) {
		t.Fatalf("is_sleeping on a server without sleep mode: %v", err)
	}
	if err := c.Sleep(ctx, 3); err == nil || !strings.Contains(err.Error(), "level 3") {
		t.Fatalf("sleep level 3: %v", err)
	}
	if _, err := c.Wake(ctx, 0); err == nil {
		t.Fatal("wake from level 0 accepted")
	}
	odd := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Write([]byte(`{"sleeping": true}`))
	}))
	defer odd.Close()
	if _, err := New(odd.URL, "m").IsSleeping(ctx); err == nil || !strings.Contains(err.Error(), "is_sleeping") {
		t.Fatalf("an answer without is_sleeping: %v", err)
	}
	failing := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "CUDA out of memory", http.StatusInternalServerError)
	}))
	defer failing.Close()
	if _, err := New(failing.URL, "m").Wake(ctx, SleepOffload); err == nil || !strings.Contains(err.Error(), "CUDA out of memory") {
		t.Fatalf("a failed wake: %v", err)
	}
}
