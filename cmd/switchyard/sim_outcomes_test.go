package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
)

// TestSimOutcomesFile: `sim --outcomes FILE` writes one JSON line per
// request of each run, named by policy, whose counts agree with the
// summary the same run prints.
func TestSimOutcomesFile(t *testing.T) {
	trace, err := filepath.Abs(filepath.Join("..", "..", "testdata", "traces", "azure_llm_2023_code_first1000.csv"))
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "outcomes.jsonl")
	var out bytes.Buffer
	err = runSim(context.Background(), []string{"--format", "azure", "--trace", trace, "--limit", "200", "--gpus", "h100:1",
		"--policies", "round-robin,switchyard", "--json", "--parallel", "2", "--outcomes", path}, &out)
	if err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	type tally struct{ requests, ok int }
	got := map[string]*tally{}
	ids := map[string]map[string]bool{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var l outcomeLine
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			t.Fatalf("line %q: %v", sc.Text(), err)
		}
		if l.ID == "" || l.Class == "" || l.Status == "" || l.Attempts < 1 || l.DoneS < l.SubmittedS {
			t.Fatalf("incomplete outcome %+v", l)
		}
		if got[l.Policy] == nil {
			got[l.Policy], ids[l.Policy] = &tally{}, map[string]bool{}
		}
		if ids[l.Policy][l.ID] {
			t.Fatalf("%s: %s written twice", l.Policy, l.ID)
		}
		ids[l.Policy][l.ID] = true
		got[l.Policy].requests++
		if l.Status == "ok" && l.SLOMet {
			got[l.Policy].ok++
		}
	}
	lines := bytes.Split(bytes.TrimSpace(out.Bytes()), []byte("\n"))
	var sum struct {
		Policies []struct {
			Name      string `json:"name"`
			Requests  int    `json:"requests"`
			Succeeded int    `json:"succeeded"`
		} `json:"policies"`
	}
	if err := json.Unmarshal(lines[len(lines)-1], &sum); err != nil {
		t.Fatalf("summary line: %v", err)
	}
	if len(sum.Policies) != 2 {
		t.Fatalf("%d policies in the summary", len(sum.Policies))
	}
	for _, p := range sum.Policies {
		g := got[p.Name]
		if g == nil || g.requests != p.Requests || g.ok != p.Succeeded {
			t.Errorf("%s: outcomes file has %+v, summary %d requests, %d succeeded", p.Name, g, p.Requests, p.Succeeded)
		}
	}
}
