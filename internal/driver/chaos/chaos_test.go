package chaos

import (
	"context"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/switchyard-ai/switchyard/internal/adapter/trail"
)

func TestConfigRefusesBadInput(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "switchyard")
	if err := os.WriteFile(bin, nil, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		cfg  Config
		want string
	}{
		{"no binary", Config{Duration: time.Second}, "no switchyard binary"},
		{"missing binary", Config{Binary: bin + "-gone", Duration: time.Second}, "binary"},
		{"no duration", Config{Binary: bin}, "--duration"},
		{"negative rate", Config{Binary: bin, Duration: time.Second, Rate: -1}, "negative"},
		{"unknown role", Config{Binary: bin, Duration: time.Second, Roles: []string{"gateway"}}, `unknown role "gateway"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Run(context.Background(), tc.cfg)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want an error containing %q", err, tc.want)
			}
		})
	}
}

// TestShortChaos runs a 40 s drill on the real binary: a NATS node, the
// active router (or its standby), a worker and an admitter are killed
// with SIGKILL in turn and restarted while loadgen runs, and nothing
// acknowledged may be lost or answered twice.
func TestShortChaos(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary and runs 3 NATS nodes and 7 services for about a minute")
	}
	dir := t.TempDir()
	bin := filepath.Join(dir, "switchyard")
	build := exec.Command("go", "build", "-o", bin, "./cmd/switchyard")
	build.Dir = filepath.Join("..", "..", "..")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	logs := filepath.Join(dir, "run")
	rep, err := Run(ctx, Config{Binary: bin, Dir: logs, Duration: 40 * time.Second, Rate: 6, Seed: 7,
		KillEvery: 3 * time.Second, Down: 3 * time.Second, Quiet: 4 * time.Second,
		Roles: []string{RoleNATS, RoleRouter, RoleWorker, RoleAdmitter},
		Log:   slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("submitted %d completed %d (%.3f) failed %d shed %d lost %d duplicates %d; critical %.3f; errors %v; kills %v",
		rep.Submitted, rep.Completed, rep.CompletedShare, rep.Failed, rep.Shed, rep.Lost, rep.Duplicates,
		rep.SLOAttainmentByPriority["critical"], rep.ErrorsByCode, rep.KillsBy)
	for _, k := range rep.Kills {
		t.Logf("kill %s %s leader=%v back after %.1fs", k.Role, k.Name, k.Leader, k.BackAfterS)
	}
	for _, e := range rep.Exits {
		t.Logf("exited on its own and restarted: %s (%s)", e.Name, e.LastLog)
	}
	if rep.Submitted == 0 {
		t.Fatal("nothing submitted")
	}
	if rep.Lost != 0 || rep.Duplicates != 0 {
		t.Errorf("lost %d, duplicates %d: want 0 and 0", rep.Lost, rep.Duplicates)
		for _, id := range rep.LostIDs {
			t.Logf("lost request's trail: %s", trail.Format(id, rep.LostTrails[id]))
		}
		// What loadgen said of its reconciliation with RESULTS.
		if b, err := os.ReadFile(filepath.Join(logs, "loadgen.log")); err == nil {
			for _, line := range strings.Split(string(b), "\n") {
				if strings.Contains(line, "WARN") || strings.Contains(line, "ERROR") {
					t.Logf("loadgen: %s", line)
				}
			}
		}
	}
	if rep.KillsBy[RoleNATS] == 0 || rep.KillsBy[RoleRouter] == 0 {
		t.Errorf("kills %v: the drill must have killed a NATS node and a router", rep.KillsBy)
	}
	if rep.Submitted != rep.Completed+rep.Rejected+rep.Shed+rep.Failed+rep.Lost {
		t.Errorf("counters do not add up: %+v", rep.Summary)
	}
}
