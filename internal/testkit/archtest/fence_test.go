package archtest

import (
	"bufio"
	"errors"
	"fmt"
	"go/ast"
	"go/build"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
)

// kind is what a package is for, and so what it may depend on.
type kind string

const (
	// core packages are pure decisions: functions of their inputs and of
	// the time they are handed, so the simulator and replay can run them.
	core kind = "core"
	// contract packages are the wire vocabulary every kind shares
	// (schemas, subjects); subjects also provisions the streams.
	contract kind = "contract"
	// adapter packages do I/O: the bus, stores, engines, HTTP.
	adapter kind = "adapter"
	// driver packages run the core outside the services (the simulator,
	// the chaos drill).
	driver kind = "driver"
	// testkit packages are helpers for tests only.
	testkit kind = "testkit"
)

// kindOf gives a package its kind from where it lives, so the layout is the
// manifest: internal/<kind>/... for every package under internal/, and the
// wire contracts (schemas, subjects) at the module's top. rel is the path
// relative to the module root; ok is false for a package outside the
// layout, which the fence reports.
func kindOf(rel string) (k kind, ok bool) {
	switch rel {
	case "schemas", "subjects":
		return contract, true
	}
	folder, rest, _ := strings.Cut(strings.TrimPrefix(rel, "internal/"), "/")
	if !strings.HasPrefix(rel, "internal/") || rest == "" {
		return "", false
	}
	switch folder {
	case "core":
		return core, true
	case "adapter":
		return adapter, true
	case "driver":
		return driver, true
	case "testkit":
		return testkit, true
	}
	return "", false
}

// knownExceptions are today's crossings, each with why it is still there.
// The key is "<package> <rule> <target>" as violation.key spells it. The
// relayout removed the last ones (the composition root moved to
// services/stack; the workflow and cache stores to internal/adapter); an
// entry added here must say why the crossing cannot be undone yet.
var knownExceptions = map[string]string{}

// forbiddenForCore reports whether a core package may not import path:
// NATS, the network and the operating system are the shells' business.
func forbiddenForCore(path string) bool {
	for _, p := range []string{"net", "os", "syscall", "github.com/nats-io"} {
		if path == p || strings.HasPrefix(path, p+"/") {
			return true
		}
	}
	return false
}

// clockReads are the package time functions that read or wait on the wall
// clock. A core package is handed "now" by its caller instead.
var clockReads = map[string]bool{
	"Now": true, "Since": true, "Until": true, "Sleep": true, "After": true,
	"AfterFunc": true, "Tick": true, "NewTimer": true, "NewTicker": true,
}

// violation is one crossing of the fence.
type violation struct {
	pkg    string // module-relative package path
	rule   string // imports-io, imports-services, imports-non-core, imports-testkit, reads-clock
	target string // the import path or the time function
	pos    string // file:line of the first occurrence
}

func (v violation) key() string { return v.pkg + " " + v.rule + " " + v.target }

func (v violation) String() string { return v.pos + ": " + v.key() }

// checkFile returns the crossings in one parsed non-test file of pkg.
// module is the module path, so imports of the module's own packages can
// be told from the rest; kinds gives each of them its kind.
func checkFile(fset *token.FileSet, f *ast.File, pkg string, pkgKind kind, module string, kinds func(rel string) (kind, bool)) []violation {
	var out []violation
	add := func(rule, target string, at token.Pos) {
		p := fset.Position(at)
		out = append(out, violation{pkg: pkg, rule: rule, target: target, pos: filepath.Base(p.Filename) + ":" + strconv.Itoa(p.Line)})
	}
	timeName := ""
	for _, imp := range f.Imports {
		path, err := strconv.Unquote(imp.Path.Value)
		if err != nil {
			continue
		}
		if path == "time" {
			timeName = "time"
			if imp.Name != nil {
				timeName = imp.Name.Name
			}
		}
		rel, own := strings.CutPrefix(path, module+"/")
		if pkgKind == core && forbiddenForCore(path) {
			add("imports-io", path, imp.Pos())
		}
		if !own {
			continue
		}
		if strings.HasPrefix(pkg, "internal/") && (rel == "services" || strings.HasPrefix(rel, "services/")) {
			add("imports-services", rel, imp.Pos())
		}
		k, known := kinds(rel)
		if pkgKind == core && known && k != core && k != contract {
			add("imports-non-core", rel, imp.Pos())
		}
		if pkgKind != testkit && known && k == testkit {
			add("imports-testkit", rel, imp.Pos())
		}
	}
	if pkgKind == core && timeName != "" && timeName != "_" && timeName != "." {
		ast.Inspect(f, func(n ast.Node) bool {
			sel, ok := n.(*ast.SelectorExpr)
			if !ok {
				return true
			}
			if id, ok := sel.X.(*ast.Ident); ok && id.Name == timeName && id.Obj == nil && clockReads[sel.Sel.Name] {
				add("reads-clock", "time."+sel.Sel.Name, sel.Pos())
			}
			return true
		})
	}
	return out
}

// moduleRoot walks up from the working directory to go.mod and returns the
// root and the module path.
func moduleRoot(t *testing.T) (dir, module string) {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatalf("working directory: %v", err)
	}
	for {
		f, err := os.Open(filepath.Join(dir, "go.mod"))
		if err == nil {
			defer f.Close()
			sc := bufio.NewScanner(f)
			for sc.Scan() {
				if m, ok := strings.CutPrefix(strings.TrimSpace(sc.Text()), "module "); ok {
					return dir, strings.Trim(strings.TrimSpace(m), `"`)
				}
			}
			t.Fatalf("%s/go.mod has no module line", dir)
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatal("no go.mod above the working directory")
		}
		dir = parent
	}
}

// sourcePackage is one directory's non-test Go files, as the default
// build context selects them.
type sourcePackage struct {
	rel   string
	files []string
}

// listPackages returns every package under internal/ plus the contracts.
func listPackages(t *testing.T, rootDir string) []sourcePackage {
	t.Helper()
	var dirs []string
	err := filepath.WalkDir(filepath.Join(rootDir, "internal"), func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == "testdata" || strings.HasPrefix(d.Name(), ".") || strings.HasPrefix(d.Name(), "_")) {
			return filepath.SkipDir
		}
		if d.IsDir() {
			dirs = append(dirs, p)
		}
		return nil
	})
	if err != nil {
		t.Fatalf("walking internal/: %v", err)
	}
	dirs = append(dirs, filepath.Join(rootDir, "schemas"), filepath.Join(rootDir, "subjects"))
	var pkgs []sourcePackage
	for _, d := range dirs {
		bp, err := build.Default.ImportDir(d, 0)
		var noGo *build.NoGoError
		if errors.As(err, &noGo) {
			// Test-only packages (archtest itself) have no non-test
			// files; they still need a kind, checked below.
			if len(bp.TestGoFiles)+len(bp.XTestGoFiles) == 0 {
				continue
			}
		} else if err != nil {
			t.Fatalf("reading package %s: %v", d, err)
		}
		rel, err := filepath.Rel(rootDir, d)
		if err != nil {
			t.Fatal(err)
		}
		sp := sourcePackage{rel: filepath.ToSlash(rel)}
		for _, f := range slices.Concat(bp.GoFiles, bp.CgoFiles) {
			sp.files = append(sp.files, filepath.Join(d, f))
		}
		pkgs = append(pkgs, sp)
	}
	return pkgs
}

// TestImportFence checks every package against the rules of its kind.
func TestImportFence(t *testing.T) {
	rootDir, module := moduleRoot(t)
	pkgs := listPackages(t, rootDir)
	occurred := map[string]bool{}
	fset := token.NewFileSet()
	for _, p := range pkgs {
		k, ok := kindOf(p.rel)
		if !ok {
			t.Errorf("package %s is outside the layout: put it under internal/core, internal/adapter, internal/driver or internal/testkit (see docs/architecture.md)", p.rel)
			continue
		}
		for _, file := range p.files {
			f, err := parser.ParseFile(fset, file, nil, 0)
			if err != nil {
				t.Fatalf("parsing %s: %v", file, err)
			}
			for _, v := range checkFile(fset, f, p.rel, k, module, kindOf) {
				if _, known := knownExceptions[v.key()]; known {
					occurred[v.key()] = true
					continue
				}
				t.Errorf("%s/%s (a %s package)", p.rel, v, k)
			}
		}
	}
	reportStale(t, knownExceptions, occurred, "known exception", "knownExceptions")
}

// reportStale fails t for every key of known that did not occur: a list of
// known exceptions only shrinks, so a fixed one must leave it. what names
// an entry in the message, list the variable to remove it from.
func reportStale(t *testing.T, known map[string]string, occurred map[string]bool, what, list string) {
	t.Helper()
	var stale []string
	for key := range known {
		if !occurred[key] {
			stale = append(stale, key)
		}
	}
	sort.Strings(stale)
	for _, key := range stale {
		t.Errorf("%s %q no longer occurs: remove it from %s", what, key, list)
	}
}

// TestCheckerCatchesViolations runs the checker on synthetic sources, so
// the fence is shown to fail on each kind of crossing and to pass clean
// code, not only on today's tree.
func TestCheckerCatchesViolations(t *testing.T) {
	const module = "example.com/m"
	kinds := map[string]kind{
		"internal/pure":    core,
		"internal/store":   adapter,
		"internal/kit":     testkit,
		"internal/adapter": adapter,
		"schemas":          contract,
	}
	tests := []struct {
		name string
		pkg  string
		src  string
		want []string // violation keys, in source order
	}{
		{
			name: "clean core: time as a value, schemas import",
			pkg:  "internal/pure",
			src: `package pure
import ("time"; "example.com/m/schemas")
func Late(now, deadline time.Time) bool { _ = schemas.X; return now.After(deadline) }`,
		},
		{
			name: "core imports NATS, net/http and os",
			pkg:  "internal/pure",
			src: `package pure
import ("github.com/nats-io/nats.go"; "net/http"; "os"; "os/exec"; "network/ok")`,
			want: []string{
				"internal/pure imports-io github.com/nats-io/nats.go",
				"internal/pure imports-io net/http",
				"internal/pure imports-io os",
				"internal/pure imports-io os/exec",
			},
		},
		{
			name: "core reads the clock, also through a renamed import",
			pkg:  "internal/pure",
			src: `package pure
import clock "time"
func f() { _ = clock.Now(); clock.Sleep(1); _ = clock.Since(clock.Time{}); g := clock.Now; _ = g }`,
			want: []string{
				"internal/pure reads-clock time.Now",
				"internal/pure reads-clock time.Sleep",
				"internal/pure reads-clock time.Since",
				"internal/pure reads-clock time.Now",
			},
		},
		{
			name: "a local variable named time is not the package",
			pkg:  "internal/pure",
			src: `package pure
type clock struct{}
func (clock) Now() int { return 0 }
func f() int { time := clock{}; return time.Now() }`,
		},
		{
			name: "core imports an adapter",
			pkg:  "internal/pure",
			src: `package pure
import "example.com/m/internal/store"`,
			want: []string{"internal/pure imports-non-core internal/store"},
		},
		{
			name: "adapter imports services and a test kit",
			pkg:  "internal/adapter",
			src: `package adapter
import ("example.com/m/services/client"; "example.com/m/internal/kit"; "os"; "time")
func f() { time.Sleep(1) }`,
			want: []string{
				"internal/adapter imports-services services/client",
				"internal/adapter imports-testkit internal/kit",
			},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			fset := token.NewFileSet()
			// Object resolution on, as in a real parse, so a local named
			// "time" resolves to its declaration and is told apart.
			f, err := parser.ParseFile(fset, "synthetic.go", tc.src, 0)
			if err != nil {
				t.Fatalf("parsing the synthetic source: %v", err)
			}
			var got []string
			lookup := func(rel string) (kind, bool) { k, ok := kinds[rel]; return k, ok }
			for _, v := range checkFile(fset, f, tc.pkg, kinds[tc.pkg], module, lookup) {
				got = append(got, v.key())
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("violations:\n got %s\nwant %s", fmt.Sprint(got), fmt.Sprint(tc.want))
			}
		})
	}
}

// TestKindFromFolder pins the layout rule the fence relies on: the folder
// under internal/ is the kind, and nothing else is in the layout.
func TestKindFromFolder(t *testing.T) {
	tests := []struct {
		rel  string
		want kind
		ok   bool
	}{
		{"internal/core/routing", core, true},
		{"internal/core/placement", core, true},
		{"internal/adapter/bus", adapter, true},
		{"internal/adapter/backend/vllmkv", adapter, true},
		{"internal/driver/sim", driver, true},
		{"internal/testkit/bustest", testkit, true},
		{"schemas", contract, true},
		{"subjects", contract, true},
		{"internal/routing", "", false}, // the flat layout before the relayout
		{"internal/core", "", false},    // a kind folder is not a package
		{"internal/misc/x", "", false},
		{"services/router", "", false},
	}
	for _, tc := range tests {
		got, ok := kindOf(tc.rel)
		if got != tc.want || ok != tc.ok {
			t.Errorf("kindOf(%q) = %q, %v; want %q, %v", tc.rel, got, ok, tc.want, tc.ok)
		}
	}
}
