package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/switchyard-ai/switchyard/internal/adapter/gguf"
	"github.com/switchyard-ai/switchyard/internal/core/stats"
	"github.com/switchyard-ai/switchyard/internal/testkit/enginetest"
	"github.com/switchyard-ai/switchyard/schemas"
	"github.com/switchyard-ai/switchyard/services/client"
	"github.com/switchyard-ai/switchyard/services/stack"
	"github.com/switchyard-ai/switchyard/subjects"
)

// PrefixBenchResult is `switchyard bench engine --prefix --json`'s last
// line: the same shared-prefix workload sent through Switchyard twice, in
// one run, each time to two fresh Ollama engines behind two workers —
// once placed by Switchyard's router and once by its round-robin
// baseline (stack.Config.Policy, the router's --policy; nothing else
// differs) — and what the engines evaluated and how fast the first token
// came under each.
type PrefixBenchResult struct {
	Prefix PrefixArms `json:"prefix"`

	Engine   string         `json:"engine"`
	Model    string         `json:"model"`
	Workload PrefixWorkload `json:"workload"`
	// FewerPromptEvalTokensPct is how many fewer prompt tokens the engines
	// evaluated under Switchyard than under round-robin, in percent of
	// round-robin's.
	FewerPromptEvalTokensPct float64 `json:"fewer_prompt_eval_tokens_pct"`
	// TTFTP50Ratio is round-robin's TTFT p50 over Switchyard's.
	TTFTP50Ratio float64 `json:"ttft_p50_ratio"`
	Simulated    bool    `json:"simulated"`
}

// PrefixArms are the two policies' figures, in the contract's order.
type PrefixArms struct {
	Switchyard PrefixArm `json:"switchyard"`
	RoundRobin PrefixArm `json:"round-robin"`
}

// PrefixArm is one policy's run of the workload.
type PrefixArm struct {
	// PromptEvalTokens are the prompt tokens the engines evaluated: the
	// sum, over every request, of the runner's own count of the prompt
	// inputs its slot cache did not cover (enginetest.SlotLoad.Remaining).
	// Ollama v0.6.5's prompt_eval_count is the whole prompt, cached or
	// not (PromptTokens below), so it cannot say this.
	PromptEvalTokens int     `json:"prompt_eval_tokens"`
	TTFTP50Ms        float64 `json:"ttft_p50_ms"`
	TTFTP99Ms        float64 `json:"ttft_p99_ms"`
	TotalP50Ms       float64 `json:"total_p50_ms"`
	Requests         int     `json:"requests"`
	// PromptTokens is the sum of Ollama's prompt_eval_count as the
	// results carried it (usage.prompt_tokens): every prompt's whole
	// length. CachedPromptTokens is the part the engines' slot caches
	// held; the two differences add up: PromptTokens − CachedPromptTokens
	// = PromptEvalTokens.
	PromptTokens       int `json:"prompt_tokens"`
	CachedPromptTokens int `json:"cached_prompt_tokens"`
	// Workers is, per worker, how many requests it served and how many
	// distinct system prompts they carried.
	Workers map[string]PrefixWorker `json:"workers"`
}

// PrefixWorker is one worker's share of an arm.
type PrefixWorker struct {
	Requests      int `json:"requests"`
	SystemPrompts int `json:"system_prompts"`
}

// PrefixWorkload describes the workload and the engines' cache settings.
type PrefixWorkload struct {
	Requests      int `json:"requests"`
	SystemPrompts int `json:"system_prompts"`
	SystemChars   int `json:"system_chars"`
	Users         int `json:"users"`
	MaxTokens     int `json:"max_tokens"`
	// Slots is OLLAMA_NUM_PARALLEL of each engine; MultiUserCache is
	// OLLAMA_MULTIUSER_CACHE (docs/engines.md, "Ollama's prompt cache").
	Slots          int  `json:"slots"`
	MultiUserCache bool `json:"multiuser_cache"`
	// Concurrency is how many turns are in flight at once.
	Concurrency int `json:"concurrency"`
	// GapMs is the think time between one turn's result and the next.
	GapMs int64  `json:"gap_ms"`
	Seed  uint64 `json:"seed"`
}

// prefixModel is the generated model both arms serve: big enough that
// evaluating a system prompt costs far more than the control plane adds
// (so TTFT shows what the cache saved), small enough for a shared CPU.
var prefixModel = gguf.TinyOptions{Seed: 1, Layers: 4, Embed: 128, Heads: 4, KVHeads: 2, FF: 256}

// runBenchEnginePrefix is `bench engine --prefix`.
func runBenchEnginePrefix(ctx context.Context, args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("bench engine --prefix", flag.ContinueOnError)
	fs.Bool("prefix", true, "measure prefix affinity (this mode)")
	url := fs.String("openai-url", "", "not supported: --prefix starts its own engines, whose logs say what they evaluated")
	model := fs.String("model", "tiny", "the name the generated model is served under")
	gpu := fs.String("gpu", "cpu", "the hardware the engines run on (catalog name)")
	requests := fs.Int("requests", 96, "user turns, sent one at a time; the same sequence under each policy")
	systemPrompts := fs.Int("system-prompts", 4, "distinct long system prompts")
	systemChars := fs.Int("system-chars", 640, "characters per system prompt (the generated model has a token per character)")
	users := fs.Int("users", 32, "users, each bound to one system prompt; a turn is a random user's short question after its system prompt")
	maxTokens := fs.Int("max-tokens", 8, "max_tokens of every request")
	slots := fs.Int("slots", 2, "OLLAMA_NUM_PARALLEL of each engine: the prompts its cache holds")
	multiUser := fs.Bool("multiuser-cache", true, "OLLAMA_MULTIUSER_CACHE: a new prompt takes the least recently used slot, keeping the others")
	concurrency := fs.Int("concurrency", 1, "users in flight at once: each sends its next turn once the last has answered")
	gap := fs.Duration("gap", 600*time.Millisecond, "a user's think time: the pause after one turn's result before the next turn (at least a worker heartbeat, 500 ms, or the router places against a heartbeat that still counts the last request)")
	seed := fs.Uint64("seed", 1, "seed of the system prompts' words and of the turns' order")
	asJSON := fs.Bool("json", false, "print the result as one JSON line last")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *url != "" {
		return errors.New("bench engine --prefix starts its own Ollama engines (the runner's log is where each says what it evaluated); --openai-url is not supported with --prefix")
	}
	if *requests < 1 || *systemPrompts < 1 || *users < 1 || *maxTokens < 1 || *slots < 1 || *systemChars < 1 || *concurrency < 1 {
		return errors.New("--requests, --system-prompts, --system-chars, --users, --max-tokens, --slots and --concurrency must be >= 1")
	}
	if *gap < 0 {
		return errors.New("--gap must be >= 0")
	}
	if *users < *systemPrompts {
		return fmt.Errorf("--users %d < --system-prompts %d: every system prompt needs a user", *users, *systemPrompts)
	}
	w := PrefixWorkload{Requests: *requests, SystemPrompts: *systemPrompts, SystemChars: *systemChars, Users: *users,
		MaxTokens: *maxTokens, Slots: *slots, MultiUserCache: *multiUser, Concurrency: *concurrency, GapMs: gap.Milliseconds(), Seed: *seed}
	turns := prefixTurns(w)
	res := PrefixBenchResult{Model: *model, Workload: w,
		Engine: fmt.Sprintf("2 × ollama %s (pinned, started here, fresh for each policy) serving a generated %d-layer model", enginetest.OllamaVersion, prefixModel.Layers)}
	fmt.Fprintf(stdout, "prefix: %d turns of %d users over %d system prompts of %d chars; 2 engines, %d slots each, multiuser cache %v\n",
		w.Requests, w.Users, w.SystemPrompts, w.SystemChars, w.Slots, w.MultiUserCache)
	for _, arm := range []struct {
		policy string
		out    *PrefixArm
	}{{"switchyard", &res.Prefix.Switchyard}, {"round-robin", &res.Prefix.RoundRobin}} {
		a, err := runPrefixArm(ctx, arm.policy, *model, *gpu, w, turns)
		if err != nil {
			return fmt.Errorf("bench engine --prefix: policy %s: %w", arm.policy, err)
		}
		*arm.out = a
		fmt.Fprintf(stdout, "%-11s prompt tokens evaluated %d of %d (cached %d) | TTFT p50 %.1f ms p99 %.1f ms | total p50 %.1f ms | per worker %s\n",
			arm.policy, a.PromptEvalTokens, a.PromptTokens, a.CachedPromptTokens, a.TTFTP50Ms, a.TTFTP99Ms, a.TotalP50Ms, workerShares(a.Workers))
	}
	sy, rr := res.Prefix.Switchyard, res.Prefix.RoundRobin
	if rr.PromptEvalTokens > 0 {
		res.FewerPromptEvalTokensPct = 100 * float64(rr.PromptEvalTokens-sy.PromptEvalTokens) / float64(rr.PromptEvalTokens)
	}
	if sy.TTFTP50Ms > 0 {
		res.TTFTP50Ratio = rr.TTFTP50Ms / sy.TTFTP50Ms
	}
	fmt.Fprintf(stdout, "switchyard evaluated %.1f %% fewer prompt tokens than round-robin; TTFT p50 round-robin/switchyard %.2f×\n",
		res.FewerPromptEvalTokensPct, res.TTFTP50Ratio)
	if *asJSON {
		return json.NewEncoder(stdout).Encode(res)
	}
	return nil
}

// prefixTurn is one user's turn: its system prompt and the whole prompt.
type prefixTurn struct {
	user, system int
	prompt       string
}

// prefixWords are the system prompts' vocabulary: instructions read as
// instructions, though the generated model understands none of them.
var prefixWords = strings.Fields(`you are a careful assistant for the support desk answer briefly cite the
policy section refuse anything unsafe keep a friendly tone never invent order numbers ask for the account
email when needed summarise the customer's problem first then offer at most three steps escalate billing
disputes to a human agent mention the refund window of thirty days use plain words avoid jargon`)

// prefixTurns builds the workload: w.SystemPrompts system prompts of
// w.SystemChars characters, users bound to them in turn (user u to
// prompt u mod P), and w.Requests turns of uniformly random users, each
// its system prompt followed by a short question of its own. The same
// options give the same turns, so both policies get one sequence.
func prefixTurns(w PrefixWorkload) []prefixTurn {
	rng := rand.New(rand.NewPCG(w.Seed, 0x5eed))
	systems := make([]string, w.SystemPrompts)
	for i := range systems {
		var b strings.Builder
		fmt.Fprintf(&b, "System prompt %d.", i+1)
		for b.Len() < w.SystemChars {
			b.WriteByte(' ')
			b.WriteString(prefixWords[rng.IntN(len(prefixWords))])
		}
		systems[i] = b.String()[:w.SystemChars]
	}
	turns := make([]prefixTurn, w.Requests)
	asked := make([]int, w.Users)
	for i := range turns {
		u := rng.IntN(w.Users)
		asked[u]++
		s := u % w.SystemPrompts
		turns[i] = prefixTurn{user: u, system: s,
			prompt: fmt.Sprintf("%s\n\nUser %d, question %d: what about %s %s?", systems[s], u, asked[u],
				prefixWords[rng.IntN(len(prefixWords))], prefixWords[rng.IntN(len(prefixWords))])}
	}
	return turns
}

// runPrefixArm runs the turns through a fresh system placed by policy:
// two new engines (empty caches), two workers, one request at a time.
func runPrefixArm(ctx context.Context, policy, model, gpu string, w PrefixWorkload, turns []prefixTurn) (PrefixArm, error) {
	logs := &tailBuffer{max: 8 << 10}
	engines, err := enginetest.StartN(ctx, 2, enginetest.Options{NumParallel: w.Slots, MultiUserCache: w.MultiUserCache, Debug: true, Log: logs})
	if err != nil {
		return PrefixArm{}, err
	}
	defer func() {
		for _, e := range engines {
			e.Stop()
		}
	}()
	urls := make([]string, len(engines))
	for i, e := range engines {
		opts := prefixModel
		opts.Name = model
		if err := e.CreateTiny(ctx, model, opts); err != nil {
			return PrefixArm{}, err
		}
		// Load the model before the workers describe the engine, so they
		// start with it hot.
		if err := e.Ready(ctx, model); err != nil {
			return PrefixArm{}, fmt.Errorf("engine %d does not answer: %w (log: %s)", i, err, logs)
		}
		urls[i] = e.URL
	}
	fleet, cat, err := engineFleet(ctx, "openai", strings.Join(urls, ","), gpu, model)
	if err != nil {
		return PrefixArm{}, err
	}
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	st, cl, err := benchStack(ctx, stack.Config{Fleet: fleet, Catalog: cat, Logger: quiet, Policy: policy}, "bench-engine-prefix")
	if err != nil {
		return PrefixArm{}, err
	}
	defer st.Close()
	if err := awaitHeartbeats(ctx, st, st.WorkerIDs()); err != nil {
		return PrefixArm{}, err
	}
	if r, err := cl.Do(ctx, "bench", &schemas.Request{ID: "bench-prefix-warm", Model: model, Prompt: "warm up", MaxTokens: 1}); err != nil || r.Status != schemas.StatusOK {
		return PrefixArm{}, fmt.Errorf("the switchyard stack does not answer: %+v %v", r, err)
	}
	marks := make([]int, len(engines))
	for i, e := range engines {
		loads, err := e.SlotLoads()
		if err != nil {
			return PrefixArm{}, err
		}
		marks[i] = len(loads)
	}
	a := PrefixArm{Requests: len(turns), Workers: map[string]PrefixWorker{}}
	done, err := sendTurns(ctx, cl, model, w, turns)
	if err != nil {
		return PrefixArm{}, err
	}
	var ttft, total []float64
	systems := map[string]map[int]bool{}
	for i, s := range done {
		ttft, total = append(ttft, msOf(s.ttft)), append(total, msOf(s.total))
		a.PromptTokens += s.result.Usage.PromptTokens
		id := s.result.WorkerID
		sh := a.Workers[id]
		sh.Requests++
		a.Workers[id] = sh
		if systems[id] == nil {
			systems[id] = map[int]bool{}
		}
		systems[id][turns[i].system] = true
	}
	for id, sh := range a.Workers {
		sh.SystemPrompts = len(systems[id])
		a.Workers[id] = sh
	}
	a.TTFTP50Ms, a.TTFTP99Ms = stats.QuantileOf(ttft, 0.5), stats.QuantileOf(ttft, 0.99)
	a.TotalP50Ms = stats.QuantileOf(total, 0.5)
	loads, err := measuredLoads(ctx, engines, marks, len(turns))
	if err != nil {
		return PrefixArm{}, fmt.Errorf("%w (log: %s)", err, logs)
	}
	prompt := 0
	for _, l := range loads {
		a.PromptEvalTokens += l.Remaining
		a.CachedPromptTokens += l.Used
		prompt += l.Prompt
	}
	// Each log line is one request's prompt as the runner met it; if they
	// do not add up to what the results say the engines were asked, the
	// lines are not these requests' (a probe, a retry) and the figure
	// would be wrong.
	if prompt != a.PromptTokens {
		return PrefixArm{}, fmt.Errorf("the engines logged %d prompt tokens for the %d turns, the results report %d: the runner's cache lines do not match the requests", prompt, len(turns), a.PromptTokens)
	}
	return a, nil
}

// sendTurns sends the turns through Switchyard from w.Concurrency users
// at once, each taking the next turn when its last one has answered and
// it has thought for w.GapMs, and returns each turn's timings.
func sendTurns(ctx context.Context, cl *client.Client, model string, w PrefixWorkload, turns []prefixTurn) ([]viaSwitchyard, error) {
	out := make([]viaSwitchyard, len(turns))
	var (
		mu    sync.Mutex
		next  int
		first error
		wg    sync.WaitGroup
	)
	take := func() (int, bool) {
		mu.Lock()
		defer mu.Unlock()
		if first != nil || next == len(turns) {
			return 0, false
		}
		next++
		return next - 1, true
	}
	for u := 0; u < w.Concurrency; u++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for n := 0; ; n++ {
				if n > 0 && w.GapMs > 0 {
					select {
					case <-ctx.Done():
						return
					case <-time.After(time.Duration(w.GapMs) * time.Millisecond):
					}
				}
				i, ok := take()
				if !ok {
					return
				}
				s, err := throughSwitchyard(ctx, cl, fmt.Sprintf("bench-prefix-%d", i), model, turns[i].prompt, w.MaxTokens)
				mu.Lock()
				if err != nil && first == nil {
					first = fmt.Errorf("turn %d: %w", i, err)
				}
				out[i] = s
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if first == nil {
		first = ctx.Err()
	}
	return out, first
}

// measuredLoads waits (the runner's log passes through the server's)
// until the engines have logged want cache-slot loads past marks, and
// returns those.
func measuredLoads(ctx context.Context, engines []*enginetest.Ollama, marks []int, want int) ([]enginetest.SlotLoad, error) {
	deadline := time.Now().Add(5 * time.Second)
	for {
		var got []enginetest.SlotLoad
		for i, e := range engines {
			loads, err := e.SlotLoads()
			if err != nil {
				return nil, err
			}
			got = append(got, loads[marks[i]:]...)
		}
		if len(got) == want {
			return got, nil
		}
		if len(got) > want || time.Now().After(deadline) {
			return nil, fmt.Errorf("the engines logged %d cache-slot loads for %d requests", len(got), want)
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// awaitHeartbeats waits until every worker has heartbeated twice since
// now, so the router has them all before the first measured placement
// (else Switchyard would place the first system prompts on whichever
// worker it heard first, and round-robin would skip one).
func awaitHeartbeats(ctx context.Context, st *stack.Stack, workers []string) error {
	nc, err := st.Connect("bench-engine-prefix-heartbeats")
	if err != nil {
		return err
	}
	defer nc.Close()
	var mu sync.Mutex
	seen := map[string]int{}
	sub, err := nc.Subscribe(subjects.HeartbeatAll, func(m *nats.Msg) {
		if _, w, err := subjects.ParseHeartbeat(m.Subject); err == nil {
			mu.Lock()
			seen[w]++
			mu.Unlock()
		}
	})
	if err != nil {
		return err
	}
	defer sub.Unsubscribe()
	deadline := time.Now().Add(30 * time.Second)
	for {
		mu.Lock()
		ready := true
		for _, w := range workers {
			if seen[w] < 2 {
				ready = false
			}
		}
		mu.Unlock()
		if ready {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("not every worker of %v heartbeated twice within 30 s (seen %v)", workers, seen)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

func workerShares(ws map[string]PrefixWorker) string {
	ids := make([]string, 0, len(ws))
	for id := range ws {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	parts := make([]string, len(ids))
	for i, id := range ids {
		parts[i] = fmt.Sprintf("%s %d req / %d system prompts", id, ws[id].Requests, ws[id].SystemPrompts)
	}
	return strings.Join(parts, ", ")
}

// tailBuffer keeps the last max bytes written, for an error's context.
type tailBuffer struct {
	mu  sync.Mutex
	max int
	b   []byte
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.b = append(t.b, p...)
	if over := len(t.b) - t.max; over > 0 {
		t.b = append(t.b[:0], t.b[over:]...)
	}
	return len(p), nil
}

func (t *tailBuffer) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return string(t.b)
}
