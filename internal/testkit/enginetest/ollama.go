// Package enginetest runs a real inference engine for tests and benchmarks:
// Ollama (llama.cpp inside), pinned by .ci/install-tools.sh into
// .tools/bin, started on a free loopback port with its own temporary model
// directory, serving tiny Llama models that internal/adapter/gguf generates (no
// model is downloaded). Its tests drive the whole system — NATS client,
// admitter, router, worker with the openai backend — against that engine.
//
// Nothing here is simulated: the engine tokenizes, runs the model on the CPU
// and streams real tokens; only the model's weights are random.
package enginetest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/switchyard-ai/switchyard/internal/adapter/backend/openai"
	"github.com/switchyard-ai/switchyard/internal/adapter/freeport"
	"github.com/switchyard-ai/switchyard/internal/adapter/gguf"
)

// OllamaVersion is the pinned release; .ci/install-tools.sh installs it.
const OllamaVersion = "v0.6.5"

// ErrNoOllama is returned by FindOllama when no binary is installed.
var ErrNoOllama = errors.New("ollama not installed; run .ci/install-tools.sh")

// FindOllama returns the ollama binary: the pinned one in the repository's
// .tools/bin first (what install-tools put there), else one on PATH.
func FindOllama() (string, error) {
	if root, err := repoRoot(); err == nil {
		p := filepath.Join(root, ".tools", "bin", "ollama")
		if st, err := os.Stat(p); err == nil && !st.IsDir() {
			return p, nil
		}
	}
	if p, err := exec.LookPath("ollama"); err == nil {
		return p, nil
	}
	return "", ErrNoOllama
}

func repoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("go.mod not found")
		}
		dir = parent
	}
}

// Options configure an Ollama server.
type Options struct {
	// Binary is the ollama executable (FindOllama when empty).
	Binary string
	// Dir holds the models, the generated GGUF files and the server's
	// home; a new temporary directory (removed by Stop) when empty.
	Dir string
	// NumParallel is OLLAMA_NUM_PARALLEL, the sequences one loaded model
	// serves at once (1 when 0).
	NumParallel int
	// MaxLoaded is OLLAMA_MAX_LOADED_MODELS (2 when 0).
	MaxLoaded int
	// Addr is the listen address; a free loopback port when empty.
	Addr string
	// Log receives the server's output (discarded when nil).
	Log io.Writer
	// MultiUserCache is OLLAMA_MULTIUSER_CACHE: the runner keeps one
	// prompt per slot and starts each new prompt in the least recently
	// used free slot, copying into it the longest prefix any slot holds.
	// Without it the runner takes the free slot sharing the longest
	// prefix, the first on a tie, so one request at a time always lands
	// in slot 0 and the engine remembers only its last prompt.
	MultiUserCache bool
	// Debug is OLLAMA_DEBUG: the runner then logs, per request, the
	// prompt tokens its cache covered and the ones it evaluated
	// (SlotLoads).
	Debug bool
}

// Ollama is one running `ollama serve`.
type Ollama struct {
	// URL is the server root, e.g. http://127.0.0.1:41234.
	URL  string
	Addr string

	bin, dir string
	ownDir   bool
	opts     Options

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{}

	slots *slotLog
}

// Start runs `ollama serve` and waits until it answers.
func Start(ctx context.Context, o Options) (*Ollama, error) {
	if o.Binary == "" {
		b, err := FindOllama()
		if err != nil {
			return nil, err
		}
		o.Binary = b
	}
	s := &Ollama{bin: o.Binary, dir: o.Dir, opts: o}
	if s.dir == "" {
		d, err := os.MkdirTemp("", "switchyard-ollama-")
		if err != nil {
			return nil, fmt.Errorf("enginetest: %w", err)
		}
		s.dir, s.ownDir = d, true
	}
	if err := os.MkdirAll(filepath.Join(s.dir, "models"), 0o755); err != nil {
		return nil, fmt.Errorf("enginetest: %w", err)
	}
	s.Addr = o.Addr
	if s.Addr == "" {
		// Another process could still bind it before ollama does; start
		// then fails loudly.
		addr, err := freeport.Addr()
		if err != nil {
			return nil, fmt.Errorf("enginetest: %w", err)
		}
		s.Addr = addr
	}
	s.URL = "http://" + s.Addr
	if err := s.start(ctx); err != nil {
		s.cleanup()
		return nil, err
	}
	return s, nil
}

func (s *Ollama) env() []string {
	par := max(1, s.opts.NumParallel)
	loaded := s.opts.MaxLoaded
	if loaded <= 0 {
		loaded = 2
	}
	env := os.Environ()
	if s.opts.MultiUserCache {
		env = append(env, "OLLAMA_MULTIUSER_CACHE=1")
	}
	if s.opts.Debug {
		env = append(env, "OLLAMA_DEBUG=1")
	}
	return append(env,
		"OLLAMA_HOST="+s.Addr,
		"OLLAMA_MODELS="+filepath.Join(s.dir, "models"),
		"HOME="+s.dir, // its key pair and history stay in the temporary tree
		"OLLAMA_NUM_PARALLEL="+strconv.Itoa(par),
		"OLLAMA_MAX_LOADED_MODELS="+strconv.Itoa(loaded),
		"OLLAMA_NOPRUNE=1",
		"OLLAMA_NOHISTORY=1",
	)
}

func (s *Ollama) start(ctx context.Context) error {
	cmd := exec.Command(s.bin, "serve")
	cmd.Env = s.env()
	out := s.opts.Log
	if out == nil {
		out = io.Discard
	}
	if s.opts.Debug {
		s.mu.Lock()
		if s.slots == nil {
			s.slots = &slotLog{}
		}
		s.mu.Unlock()
		out = io.MultiWriter(out, s.slots)
	}
	cmd.Stdout, cmd.Stderr = out, out
	// Its own process group, so Stop also ends the runner it spawns.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("enginetest: start ollama: %w", err)
	}
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	s.mu.Lock()
	s.cmd, s.done = cmd, done
	s.mu.Unlock()
	client := openai.New(s.URL, "")
	wait, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	for {
		if _, err := client.OllamaVersion(wait); err == nil {
			return nil
		}
		select {
		case <-done:
			return fmt.Errorf("enginetest: ollama serve exited before answering on %s", s.Addr)
		case <-wait.Done():
			s.signal(syscall.SIGKILL)
			return fmt.Errorf("enginetest: ollama serve did not answer on %s: %w", s.Addr, wait.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

func (s *Ollama) signal(sig syscall.Signal) {
	s.mu.Lock()
	cmd := s.cmd
	s.mu.Unlock()
	if cmd != nil && cmd.Process != nil {
		syscall.Kill(-cmd.Process.Pid, sig) // the whole group: server and runners
	}
}

// Kill ends the server and its runners at once (SIGKILL), as a crash
// would, and waits for the server process to be gone.
func (s *Ollama) Kill() {
	s.signal(syscall.SIGKILL)
	s.waitExit(10 * time.Second)
}

// Restart starts the server again on the same address and models after
// Kill or Stop.
func (s *Ollama) Restart(ctx context.Context) error {
	s.Kill()
	return s.start(ctx)
}

func (s *Ollama) waitExit(d time.Duration) bool {
	s.mu.Lock()
	done := s.done
	s.mu.Unlock()
	if done == nil {
		return true
	}
	select {
	case <-done:
		return true
	case <-time.After(d):
		return false
	}
}

// Stop ends the server gracefully (SIGTERM, then SIGKILL after 10 s) and
// removes the temporary directory Start made.
func (s *Ollama) Stop() {
	s.signal(syscall.SIGTERM)
	if !s.waitExit(10 * time.Second) {
		s.Kill()
	}
	// Runners outlive a server killed first; the group kill takes them.
	s.signal(syscall.SIGKILL)
	s.cleanup()
}

func (s *Ollama) cleanup() {
	if s.ownDir {
		os.RemoveAll(s.dir)
	}
}

// Client returns an openai backend client for model on this server.
func (s *Ollama) Client(model string) *openai.Client { return openai.New(s.URL, model) }

// CreateTiny writes a TinyLlama GGUF with the given options and registers
// it as model name (`ollama create name -f Modelfile`).
func (s *Ollama) CreateTiny(ctx context.Context, name string, o gguf.TinyOptions) error {
	f, err := gguf.TinyLlama(o)
	if err != nil {
		return err
	}
	path := filepath.Join(s.dir, name+".gguf")
	var buf bytes.Buffer
	if err := f.Write(&buf); err != nil {
		return err
	}
	if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
		return fmt.Errorf("enginetest: %w", err)
	}
	// The prompt alone, no chat markup: the model has no chat template and
	// a request's tokens are exactly its text's. One thread: llama.cpp's
	// worker threads spin while they wait, and on a small shared machine
	// several of them slow a model this size down a hundredfold.
	modelfile := filepath.Join(s.dir, name+".Modelfile")
	if err := os.WriteFile(modelfile, []byte("FROM "+path+"\nTEMPLATE {{ .Prompt }}\nPARAMETER num_thread 1\n"), 0o644); err != nil {
		return fmt.Errorf("enginetest: %w", err)
	}
	cctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(cctx, s.bin, "create", name, "-f", modelfile)
	cmd.Env = s.env()
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("enginetest: ollama create %s: %w: %s", name, err, lastLine(out))
	}
	return nil
}

func lastLine(b []byte) string {
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	return lines[len(lines)-1]
}

// Ready waits until the server answers a one-token completion for model,
// which also loads it.
func (s *Ollama) Ready(ctx context.Context, model string) error {
	c := s.Client(model)
	_, err := c.Generate(ctx, openai.Request{Prompt: "a", MaxTokens: 1}, nil)
	return err
}

// CPUTime is the processor time the server and its runners have used so
// far (user and system, from /proc): what tells a runner still generating
// from an idle one, whatever the engine's own API says.
func (s *Ollama) CPUTime() (time.Duration, error) {
	s.mu.Lock()
	cmd := s.cmd
	s.mu.Unlock()
	if cmd == nil || cmd.Process == nil {
		return 0, errors.New("enginetest: ollama is not running")
	}
	group := cmd.Process.Pid // Start put the server and its runners in its own group
	procs, err := os.ReadDir("/proc")
	if err != nil {
		return 0, fmt.Errorf("enginetest: %w", err)
	}
	var ticks int64
	for _, p := range procs {
		if _, err := strconv.Atoi(p.Name()); err != nil {
			continue
		}
		stat, err := os.ReadFile(filepath.Join("/proc", p.Name(), "stat"))
		if err != nil {
			continue // gone since the listing
		}
		// The command name may hold spaces and parentheses: fields are
		// counted from its closing one (proc(5): pgrp is field 5, utime 14,
		// stime 15).
		i := bytes.LastIndexByte(stat, ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(string(stat[i+1:]))
		if len(f) < 13 {
			continue
		}
		if pgrp, _ := strconv.Atoi(f[2]); pgrp != group {
			continue
		}
		utime, _ := strconv.ParseInt(f[11], 10, 64)
		stime, _ := strconv.ParseInt(f[12], 10, 64)
		ticks += utime + stime
	}
	// USER_HZ is 100 on every Linux ABI Go supports.
	return time.Duration(ticks) * 10 * time.Millisecond, nil
}

// Busy is the share of one core the server and its runners use over d.
func (s *Ollama) Busy(d time.Duration) (float64, error) {
	before, err := s.CPUTime()
	if err != nil {
		return 0, err
	}
	start := time.Now()
	time.Sleep(d)
	after, err := s.CPUTime()
	if err != nil {
		return 0, err
	}
	return float64(after-before) / float64(time.Since(start)), nil
}

// StartN starts n servers with the same options, each on its own port and
// in its own directory (o.Addr and o.Dir must be empty); on an error the
// ones already started are stopped.
func StartN(ctx context.Context, n int, o Options) ([]*Ollama, error) {
	if o.Addr != "" || o.Dir != "" {
		return nil, errors.New("enginetest: StartN gives each server its own address and directory; leave Addr and Dir empty")
	}
	out := make([]*Ollama, 0, n)
	for i := 0; i < n; i++ {
		s, err := Start(ctx, o)
		if err != nil {
			for _, started := range out {
				started.Stop()
			}
			return nil, fmt.Errorf("enginetest: server %d of %d: %w", i+1, n, err)
		}
		out = append(out, s)
	}
	return out, nil
}

// SlotLoad is one request's prompt as the runner's cache met it, from
// its debug line "loading cache slot" (llamarunner/cache.go,
// LoadCacheSlot): Prompt tokens in all, Used of them already in the
// slot's KV cache, Remaining the ones it then evaluated. Ollama's own
// prompt_eval_count (and the OpenAI endpoint's usage.prompt_tokens) is
// the whole prompt whatever the cache held — v0.6.5 counts the inputs
// before the cached ones are cut — so this line is the only place the
// engine says what it evaluated.
type SlotLoad struct {
	Slot, Cached, Prompt, Used, Remaining int
}

// SlotLoads returns every cache-slot load the runner has logged since the
// server started (it needs Options.Debug), oldest first.
func (s *Ollama) SlotLoads() ([]SlotLoad, error) {
	s.mu.Lock()
	l := s.slots
	s.mu.Unlock()
	if l == nil {
		return nil, errors.New("enginetest: the runner's cache-slot loads are logged only with Options.Debug")
	}
	return l.loads()
}

// slotLog reads the server's output for the runner's "loading cache
// slot" lines. Writes may split lines anywhere; a line is parsed once
// whole.
type slotLog struct {
	mu      sync.Mutex
	partial []byte
	got     []SlotLoad
	bad     error
}

func (l *slotLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.partial = append(l.partial, p...)
	for {
		i := bytes.IndexByte(l.partial, '\n')
		if i < 0 {
			break
		}
		line := string(l.partial[:i])
		l.partial = l.partial[i+1:]
		if !strings.Contains(line, `msg="loading cache slot"`) {
			continue
		}
		load, err := parseSlotLoad(line)
		if err != nil && l.bad == nil {
			l.bad = err
		}
		if err == nil {
			l.got = append(l.got, load)
		}
	}
	return len(p), nil
}

func (l *slotLog) loads() ([]SlotLoad, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]SlotLoad(nil), l.got...), l.bad
}

// parseSlotLoad reads one slog text line such as
//
//	time=… level=DEBUG source=cache.go:104 msg="loading cache slot" id=0 cache=523 prompt=540 used=500 remaining=40
func parseSlotLoad(line string) (SlotLoad, error) {
	fields := map[string]int{}
	for _, f := range strings.Fields(line) {
		k, v, ok := strings.Cut(f, "=")
		if !ok {
			continue
		}
		switch k {
		case "id", "cache", "prompt", "used", "remaining":
			n, err := strconv.Atoi(v)
			if err != nil {
				return SlotLoad{}, fmt.Errorf("enginetest: cache-slot line %q: %s=%q: %w", line, k, v, err)
			}
			fields[k] = n
		}
	}
	for _, k := range []string{"id", "cache", "prompt", "used", "remaining"} {
		if _, ok := fields[k]; !ok {
			return SlotLoad{}, fmt.Errorf("enginetest: cache-slot line %q lacks %s= (has the runner's log format changed?)", line, k)
		}
	}
	l := SlotLoad{Slot: fields["id"], Cached: fields["cache"], Prompt: fields["prompt"], Used: fields["used"], Remaining: fields["remaining"]}
	if l.Used+l.Remaining != l.Prompt {
		return SlotLoad{}, fmt.Errorf("enginetest: cache-slot line %q: used %d + remaining %d is not the prompt's %d", line, l.Used, l.Remaining, l.Prompt)
	}
	return l, nil
}
