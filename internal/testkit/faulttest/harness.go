// Package faulttest owns Switchyard's process-level fault tests: the real
// binary, built once, run as separate processes (a NATS server, admitter,
// routers, workers, loadgen) on loopback, with processes killed by SIGKILL
// mid-run. Each test reads loadgen's --json summary (loadgen/tally) and
// checks lost 0, duplicates 0.
package faulttest

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/switchyard-ai/switchyard/internal/adapter/freeport"
	"github.com/switchyard-ai/switchyard/internal/driver/chaos"
)

// Build compiles cmd/switchyard into dir and returns the binary's path.
// moduleRoot is the repository root.
func Build(ctx context.Context, moduleRoot, dir string) (string, error) {
	bin := filepath.Join(dir, "switchyard")
	cmd := exec.CommandContext(ctx, "go", "build", "-o", bin, "./cmd/switchyard")
	cmd.Dir = moduleRoot
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build: %w\n%s", err, out)
	}
	return bin, nil
}

// FreePort returns a loopback port that was free a moment ago, outside
// the ephemeral range so no outgoing connection takes it meanwhile.
func FreePort() (int, error) { return freeport.Port() }

// Proc is one running process with its output in a log file.
type Proc struct {
	Name string
	Log  string
	Out  string
	cmd  *exec.Cmd
	done chan error
}

// Start runs bin with args: stderr (the slog log) to dir/name.log, stdout
// to dir/name.out.
func Start(bin, dir, name string, args ...string) (*Proc, error) {
	logPath := filepath.Join(dir, name+".log")
	f, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	o, err := os.Create(filepath.Join(dir, name+".out"))
	if err != nil {
		f.Close()
		return nil, err
	}
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = o, f
	if err := cmd.Start(); err != nil {
		f.Close()
		o.Close()
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	p := &Proc{Name: name, Log: logPath, Out: o.Name(), cmd: cmd, done: make(chan error, 1)}
	go func() { p.done <- cmd.Wait(); f.Close(); o.Close() }()
	return p, nil
}

// Kill sends SIGKILL: no shutdown hooks, no draining, no goodbye.
func (p *Proc) Kill() {
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
	<-p.done
	p.done <- nil
}

// Pause freezes the process (SIGSTOP): alive, its connections open, doing
// nothing — a worker wedged in a long GC pause or a stuck driver.
func (p *Proc) Pause() { _ = p.cmd.Process.Signal(syscall.SIGSTOP) }

// Resume lets a paused process run on (SIGCONT) from where it stopped.
func (p *Proc) Resume() { _ = p.cmd.Process.Signal(syscall.SIGCONT) }

// Stop asks the process to exit (SIGTERM) and kills it after grace.
func (p *Proc) Stop(grace time.Duration) {
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-p.done:
		p.done <- err
	case <-time.After(grace):
		p.Kill()
	}
}

// Wait waits for the process to exit by itself.
func (p *Proc) Wait(ctx context.Context) error {
	select {
	case err := <-p.done:
		p.done <- err
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Exited reports whether the process has ended.
func (p *Proc) Exited() bool {
	select {
	case err := <-p.done:
		p.done <- err
		return true
	default:
		return false
	}
}

// Contains reports whether the process's log holds s.
func (p *Proc) Contains(s string) bool {
	b, err := os.ReadFile(p.Log)
	return err == nil && bytes.Contains(b, []byte(s))
}

// WaitFor polls the log for s until ctx ends.
func (p *Proc) WaitFor(ctx context.Context, s string) error {
	for !p.Contains(s) {
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s: %q not in its log: %w", p.Name, s, ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
	return nil
}

// Tail returns the last n lines of the log, for failure messages.
func (p *Proc) Tail(n int) string { return chaos.TailFile(p.Log, n) }

// LastLine is the last line of stdout (loadgen's JSON summary).
func (p *Proc) LastLine() string { return strings.TrimSpace(chaos.TailFile(p.Out, 1)) }
