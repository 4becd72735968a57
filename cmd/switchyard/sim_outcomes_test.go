package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
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
		if l.PromptTokens <= 0 || l.OutputTokens <= 0 || l.TTFTTargetMs <= 0 || (l.Status == "ok" && l.OutputTokens > 1 && l.ITLMs <= 0) {
			t.Fatalf("outcome without the request's size, targets or ITL: %+v", l)
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

// TestSimDecisionsFile: `sim --autoscale --decisions FILE` writes each
// control decision of the autoscaled run as a JSON line, in virtual time
// order, with every pool's rate and replica counts; the scale-ups it logs
// are the run's.
func TestSimDecisionsFile(t *testing.T) {
	trace, err := filepath.Abs(filepath.Join("..", "..", "testdata", "traces", "azure_llm_2023_code_first1000.csv"))
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "decisions.jsonl")
	var out bytes.Buffer
	err = runSim(context.Background(), []string{"--format", "azure", "--trace", trace, "--limit", "400", "--rate-scale", "8",
		"--gpus", "h100:1", "--policies", "switchyard", "--autoscale", "--autoscale-only", "--json", "--decisions", path}, &out)
	if err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	lines := bytes.Split(bytes.TrimSpace(data), []byte("\n"))
	last, ups := -1.0, 0
	for _, raw := range lines {
		var d decisionLine
		if err := json.Unmarshal(raw, &d); err != nil {
			t.Fatalf("line %q: %v", raw, err)
		}
		if d.Policy != "switchyard+autoscale" || len(d.Pools) != 1 || d.AtS < last {
			t.Fatalf("decision %+v after %.1f s", d, last)
		}
		last = d.AtS
		for _, c := range d.Changes {
			from, err1 := strconv.Atoi(c.From)
			to, err2 := strconv.Atoi(c.To)
			if c.Kind == "replicas" && err1 == nil && err2 == nil && to > from {
				ups++
			}
		}
	}
	summary := bytes.Split(bytes.TrimSpace(out.Bytes()), []byte("\n"))
	var sum struct {
		Policies []struct {
			Autoscale struct {
				Decisions int `json:"decisions"`
				ScaleUps  int `json:"scale_ups"`
			} `json:"autoscale"`
		} `json:"policies"`
	}
	if err := json.Unmarshal(summary[len(summary)-1], &sum); err != nil || len(sum.Policies) != 1 {
		t.Fatalf("summary line: %v", err)
	}
	if as := sum.Policies[0].Autoscale; as.Decisions != len(lines) || as.ScaleUps == 0 || as.ScaleUps != ups {
		t.Fatalf("file: %d decisions, %d scale-ups; summary %+v", len(lines), ups, as)
	}
}

// TestSimOutcomesWorkflows: on agentic traffic each outcome names its
// workflow, its step and the workflow's deadline, enough to recount from
// the file alone which workflows succeeded (every step ok, the last done
// within the deadline of the first's arrival) and get the summary's
// tasks_succeeded.
func TestSimOutcomesWorkflows(t *testing.T) {
	path := filepath.Join(t.TempDir(), "outcomes.jsonl")
	var out bytes.Buffer
	err := runSim(context.Background(), []string{"--format", "agentic", "--workflows-per-sec", "1.5", "--gen-duration", "1m",
		"--gpus", "h100:1", "--policies", "switchyard", "--json", "--outcomes", path}, &out)
	if err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	type wf struct {
		steps, of      int
		first, lastEnd float64
		deadline       float64
		allOK          bool
	}
	wfs := map[string]*wf{}
	for _, raw := range bytes.Split(bytes.TrimSpace(data), []byte("\n")) {
		var l outcomeLine
		if err := json.Unmarshal(raw, &l); err != nil {
			t.Fatalf("line %q: %v", raw, err)
		}
		if l.Workflow == "" || l.WorkflowStep < 1 || l.WorkflowStep > l.WorkflowSteps || l.WorkflowDeadlineS <= 0 {
			t.Fatalf("agentic outcome without its workflow: %+v", l)
		}
		w := wfs[l.Workflow]
		if w == nil {
			w = &wf{of: l.WorkflowSteps, deadline: l.WorkflowDeadlineS, allOK: true}
			wfs[l.Workflow] = w
		}
		w.steps++
		w.allOK = w.allOK && l.Status == "ok"
		if l.WorkflowStep == 1 {
			w.first = l.SubmittedS
		}
		w.lastEnd = max(w.lastEnd, l.DoneS)
	}
	ok := 0
	for _, w := range wfs {
		if w.steps == w.of && w.allOK && w.lastEnd-w.first <= w.deadline {
			ok++
		}
	}
	lines := bytes.Split(bytes.TrimSpace(out.Bytes()), []byte("\n"))
	var sum struct {
		Policies []struct {
			Tasks          int `json:"tasks"`
			TasksSucceeded int `json:"tasks_succeeded"`
		} `json:"policies"`
	}
	if err := json.Unmarshal(lines[len(lines)-1], &sum); err != nil || len(sum.Policies) != 1 {
		t.Fatalf("summary line: %v", err)
	}
	if p := sum.Policies[0]; p.Tasks != len(wfs) || p.TasksSucceeded != ok {
		t.Fatalf("file: %d workflows, %d succeeded; summary %d tasks, %d succeeded", len(wfs), ok, p.Tasks, p.TasksSucceeded)
	}
}
