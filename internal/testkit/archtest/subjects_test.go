package archtest

import (
	"errors"
	"go/ast"
	"go/build"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// knownWireLiterals are the subject, header and consumer-name literals
// still spelled outside subjects/, keyed "<file> <literal>", with why.
var knownWireLiterals = map[string]string{
	"internal/core/control/wire.go sy.ctl.replicas.*":    "the controller's wildcards; internal/core/control was being edited by another engineer when subjects/ took the rest",
	"internal/core/control/wire.go sy.ctl.shed.*":        "the controller's wildcards; internal/core/control was being edited by another engineer when subjects/ took the rest",
	"internal/core/routing/journal.go Sy-Journal-Inputs": "services/router sets it as routing.HeaderJournalInputs; moves with the router's next edit",
	"internal/driver/chaos/chaos.go router-":             "the chaos drill names a router's consumer; internal/driver/chaos was being edited by another engineer",
}

// wireLiteral reports whether a string literal spells a piece of the wire
// contract that subjects/ owns: a subject, a Switchyard or NATS header, or
// a consumer-name prefix.
func wireLiteral(s string) bool {
	return strings.HasPrefix(s, "sy.") || strings.HasPrefix(s, "Sy-") || strings.HasPrefix(s, "Nats-") ||
		s == "worker-" || s == "router-"
}

// wireLiterals returns the wire literals in one parsed file.
func wireLiterals(f *ast.File) []string {
	var out []string
	ast.Inspect(f, func(n ast.Node) bool {
		lit, ok := n.(*ast.BasicLit)
		if !ok || lit.Kind != token.STRING {
			return true
		}
		if s, err := strconv.Unquote(lit.Value); err == nil && wireLiteral(s) {
			out = append(out, s)
		}
		return true
	})
	return out
}

// TestSubjectsOwnTheWireNames fails when a subject, header or consumer
// name is spelled as a literal anywhere but subjects/ (and schemas/, which
// owns the codec's Content-Type and the dedup Nats-Msg-Id).
func TestSubjectsOwnTheWireNames(t *testing.T) {
	rootDir, _ := moduleRoot(t)
	occurred := map[string]bool{}
	fset := token.NewFileSet()
	for _, top := range []string{"internal", "services", "cmd", "loadgen"} {
		err := filepath.WalkDir(filepath.Join(rootDir, top), func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if !d.IsDir() {
				return nil
			}
			if d.Name() == "testdata" || strings.HasPrefix(d.Name(), ".") || strings.HasPrefix(d.Name(), "_") {
				return filepath.SkipDir
			}
			bp, err := build.Default.ImportDir(p, 0)
			var noGo *build.NoGoError
			if errors.As(err, &noGo) {
				return nil
			}
			if err != nil {
				return err
			}
			for _, name := range slices.Concat(bp.GoFiles, bp.CgoFiles) {
				file := filepath.Join(p, name)
				f, err := parser.ParseFile(fset, file, nil, parser.SkipObjectResolution)
				if err != nil {
					return err
				}
				rel, err := filepath.Rel(rootDir, file)
				if err != nil {
					return err
				}
				rel = filepath.ToSlash(rel)
				for _, lit := range wireLiterals(f) {
					key := rel + " " + lit
					if _, known := knownWireLiterals[key]; known {
						occurred[key] = true
						continue
					}
					t.Errorf("%s spells %q: subjects, headers and consumer names belong in subjects/", rel, lit)
				}
			}
			return nil
		})
		if err != nil {
			t.Fatalf("walking %s/: %v", top, err)
		}
	}
	reportStale(t, knownWireLiterals, occurred, "known wire literal", "knownWireLiterals")
}

func TestWireLiteralsFound(t *testing.T) {
	tests := []struct {
		name string
		src  string
		want []string
	}{
		{"clean", `package p
import "github.com/x/sy.y"
const service = "admitter"
var doc = "see sy_leases"`, nil},
		{"subject, header, consumer prefix", `package p
const a = "sy.ctl.shed.*"
func f(h map[string]string, id string) string { h["Sy-Events"] = "1"; h["Nats-Schedule"] = "@at"; return "worker-" + id }`,
			[]string{"sy.ctl.shed.*", "Sy-Events", "Nats-Schedule", "worker-"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f, err := parser.ParseFile(token.NewFileSet(), "synthetic.go", tc.src, 0)
			if err != nil {
				t.Fatal(err)
			}
			if got := wireLiterals(f); !slices.Equal(got, tc.want) {
				t.Errorf("got %q, want %q", got, tc.want)
			}
		})
	}
}
