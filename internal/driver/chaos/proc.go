package chaos

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"time"
)

// proc is one service process: the switchyard binary with fixed arguments,
// its stderr (the slog log) and stdout appended to files in the run's
// directory, so a restart continues the same log.
type proc struct {
	name    string
	role    string
	args    []string
	logPath string
	outPath string
	// ready is a line the process logs once it serves; "" means ready
	// at start.
	ready string

	cmd  *exec.Cmd
	done chan struct{}
	// starts counts how often the process was started, for log offsets.
	starts int
	// logFrom is the log's size at the latest start: readiness is judged
	// on what this incarnation wrote.
	logFrom int64
}

func (p *proc) start(bin string) error {
	lf, err := os.OpenFile(p.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("chaos: %s log: %w", p.name, err)
	}
	of, err := os.OpenFile(p.outPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		lf.Close()
		return fmt.Errorf("chaos: %s stdout: %w", p.name, err)
	}
	if st, err := lf.Stat(); err == nil {
		p.logFrom = st.Size()
	}
	p.starts++
	fmt.Fprintf(lf, "--- chaos: start %d of %s at %s\n", p.starts, p.name, time.Now().UTC().Format(time.RFC3339Nano))
	cmd := exec.Command(bin, p.args...)
	cmd.Stdout, cmd.Stderr = of, lf
	cmd.SysProcAttr = sysProcAttr()
	if err := cmd.Start(); err != nil {
		lf.Close()
		of.Close()
		return fmt.Errorf("chaos: start %s: %w", p.name, err)
	}
	p.cmd, p.done = cmd, make(chan struct{})
	go func(done chan struct{}) {
		_ = cmd.Wait()
		lf.Close()
		of.Close()
		close(done)
	}(p.done)
	return nil
}

// running reports whether the latest incarnation is alive.
func (p *proc) running() bool {
	if p.cmd == nil {
		return false
	}
	select {
	case <-p.done:
		return false
	default:
		return true
	}
}

// kill sends SIGKILL — no shutdown hook, no drain — and waits for the exit.
func (p *proc) kill() {
	if !p.running() {
		return
	}
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
	<-p.done
}

// stop asks for a clean exit (SIGTERM) and kills after grace.
func (p *proc) stop(grace time.Duration) {
	if !p.running() {
		return
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(grace):
		p.kill()
	}
}

// logSince is what this incarnation logged.
func (p *proc) logSince() []byte {
	b, err := os.ReadFile(p.logPath)
	if err != nil || int64(len(b)) < p.logFrom {
		return nil
	}
	return b[p.logFrom:]
}

// waitReady polls the log for the ready line until ctx ends or the
// process exits.
func (p *proc) waitReady(ctx context.Context) error {
	if p.ready == "" {
		return nil
	}
	for !bytes.Contains(p.logSince(), []byte(p.ready)) {
		if !p.running() {
			return fmt.Errorf("chaos: %s exited before it was ready:\n%s", p.name, p.tail(10))
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("chaos: %s not ready (%q not logged): %w", p.name, p.ready, ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
	return nil
}

// tail is the last n lines of the log, for error messages.
func (p *proc) tail(n int) string { return TailFile(p.logPath, n) }

// TailFile is the last n lines of the file at path (a process's log), or
// the error that kept it from being read: for failure messages, here and
// in the fault tests' harness.
func TailFile(path string, n int) string {
	f, err := os.Open(path)
	if err != nil {
		return err.Error()
	}
	defer f.Close()
	var lines []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		lines = append(lines, sc.Text())
	}
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// lastOut is the last non-empty line of stdout (loadgen's JSON summary).
func (p *proc) lastOut() string {
	b, err := os.ReadFile(p.outPath)
	if err != nil {
		return ""
	}
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	return strings.TrimSpace(lines[len(lines)-1])
}
