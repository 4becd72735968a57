package cache

import (
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/switchyard-ai/switchyard/schemas"
)

func f64(v float64) *float64 { return &v }
func i64(v int64) *int64     { return &v }

// Every request field is either in the key or named as not changing the
// answer: a field added to schemas.Request fails here until someone
// decides which, so no new parameter is silently left out of the key.
func TestKeyFieldsClassifyEveryRequestField(t *testing.T) {
	rt := reflect.TypeOf(schemas.Request{})
	for i := range rt.NumField() {
		name, _, _ := strings.Cut(rt.Field(i).Tag.Get("json"), ",")
		in, out := slices.Contains(KeyFields, name), slices.Contains(NotKeyFields, name)
		switch {
		case in && out:
			t.Errorf("field %q is in both KeyFields and NotKeyFields", name)
		case !in && !out:
			t.Errorf("field %q of schemas.Request is in neither KeyFields nor NotKeyFields: decide whether it changes the answer", name)
		}
	}
}

func base() schemas.Request {
	return schemas.Request{ID: "r1", Model: "m", Prompt: "Name a colour.", MaxTokens: 16, Temperature: f64(0)}
}

// A request that differs from another in anything that changes the answer
// never shares its exact key or its semantic scope; one that differs only
// in how or when it is delivered shares both.
func TestAnswerKeyHonoursTheRequest(t *testing.T) {
	cases := []struct {
		name string
		mut  func(r *schemas.Request)
		same bool
	}{
		{"max_tokens", func(r *schemas.Request) { r.MaxTokens = 3 }, false},
		{"temperature", func(r *schemas.Request) { r.Temperature = f64(0.7); r.Seed = i64(1) }, false},
		{"temperature unset", func(r *schemas.Request) { r.Temperature = nil; r.Seed = i64(1) }, false},
		{"seed", func(r *schemas.Request) { r.Seed = i64(42) }, false},
		{"top_p", func(r *schemas.Request) { r.TopP = f64(0.5) }, false},
		{"stop", func(r *schemas.Request) { r.Stop = []string{"\n"} }, false},
		{"another stop", func(r *schemas.Request) { r.Stop = []string{"."} }, false},
		{"tools", func(r *schemas.Request) {
			r.Tools = []map[string]any{{"type": "function", "function": map[string]any{"name": "get_weather"}}}
		}, false},
		{"response_format", func(r *schemas.Request) { r.ResponseFormat = map[string]any{"type": "json_object"} }, false},
		{"prompt", func(r *schemas.Request) { r.Prompt = "Name a color." }, false},
		{"whitespace", func(r *schemas.Request) { r.Prompt = "  Name a\tcolour. " }, true},
		{"id", func(r *schemas.Request) { r.ID = "r2" }, true},
		{"stream", func(r *schemas.Request) { r.Stream = true }, true},
		{"priority and deadline", func(r *schemas.Request) { r.Priority = "batch"; r.DeadlineMs = 5000 }, true},
		{"metadata", func(r *schemas.Request) { r.Metadata = map[string]string{"k": "v"} }, true},
	}
	b := base()
	bKey := AnswerKey("acme", "m", &b)
	_, bScope := SemanticParts("acme", "m", "e", &b)
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := base()
			c.mut(&r)
			key := AnswerKey("acme", "m", &r)
			_, scope := SemanticParts("acme", "m", "e", &r)
			if (key == bKey) != c.same {
				t.Errorf("exact key shared = %v, want %v", key == bKey, c.same)
			}
			if c.name != "prompt" && c.name != "whitespace" && (scope == bScope) != c.same {
				t.Errorf("semantic scope shared = %v, want %v", scope == bScope, c.same)
			}
		})
	}
	// The same tool list decoded from JSON and built by hand (or decoded
	// from msgpack, where numbers arrive as integers) is one key.
	x, y := base(), base()
	x.Tools = []map[string]any{{"type": "function", "n": float64(2)}}
	y.Tools = []map[string]any{{"n": int64(2), "type": "function"}}
	if AnswerKey("acme", "m", &x) != AnswerKey("acme", "m", &y) {
		t.Error("one tool list in two encodings made two keys")
	}
}

func TestCacheableSampling(t *testing.T) {
	on := Policy{Mode: ModeSemantic}
	sampledOK := Policy{Mode: ModeSemantic, AllowSampled: true}
	cases := []struct {
		name string
		temp *float64
		seed *int64
		no   bool
		p    Policy
		want bool
	}{
		{"temperature 0", f64(0), nil, false, on, true},
		{"seeded sample", f64(1), i64(7), false, on, true},
		{"temperature 1, no seed", f64(1), nil, false, on, false},
		{"temperature unset, no seed (OpenAI's default is 1)", nil, nil, false, on, false},
		{"sampled, tenant allows it", f64(1), nil, false, sampledOK, true},
		{"no_cache beats allow_sampled", f64(1), nil, true, sampledOK, false},
		{"cache off", f64(0), nil, false, Policy{Mode: ModeOff}, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := base()
			r.Temperature, r.Seed, r.NoCache = c.temp, c.seed, c.no
			got, why := Cacheable(&r, c.p)
			if got != c.want || (!got && why == "") {
				t.Fatalf("Cacheable = %v (%q), want %v", got, why, c.want)
			}
			// The semantic cache never admits what Cacheable refuses.
			if sem, _ := SemanticEligible(&r, c.p); sem && !got {
				t.Fatal("semantic cache eligible for a request that may not be cached")
			}
		})
	}
}
