package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/switchyard-ai/switchyard/loadgen"
	"github.com/switchyard-ai/switchyard/loadgen/tally"
	"github.com/switchyard-ai/switchyard/schemas"
	"github.com/switchyard-ai/switchyard/services/stack"
)

// TestLoadgenJSON drives a running system over TCP the way an operator
// would, and checks the --json contract: the last line is the tally's
// summary, every acknowledged request is accounted for, none lost or
// duplicated.
func TestLoadgenJSON(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the whole system for several seconds")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	st, err := stack.Start(ctx, stack.Config{Listen: "127.0.0.1:0", Workers: 3, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	var out bytes.Buffer
	args := []string{"--nats", st.URL, "--rate", "8", "--duration", "3s", "--json", "--tenants", "t1,t2,t3", "--seed", "7"}
	if err := runLoadgen(ctx, args, &out); err != nil {
		t.Fatalf("loadgen: %v", err)
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	var s tally.Summary
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &s); err != nil {
		t.Fatalf("last line is not the JSON summary: %v\n%s", err, out.String())
	}
	t.Logf("summary: %s", lines[len(lines)-1])
	if s.Submitted == 0 || s.Completed == 0 || s.Lost != 0 || s.Duplicates != 0 || !s.Check() {
		t.Fatalf("summary %+v: want submitted and completed > 0, lost 0, duplicates 0, counts adding up", s)
	}
	if !s.Simulated {
		t.Fatal("results from simulated workers must say so")
	}
}

func TestRetenant(t *testing.T) {
	cases := []struct {
		list     string
		names    []string
		wfTenant string
		wantErr  bool
	}{
		{list: "", names: []string{"acme", "globex", "initech", "umbrella"}},
		{list: "a", names: []string{"a"}, wfTenant: "a"},
		{list: "a, b ,c", names: []string{"a", "b", "c"}, wfTenant: "b"},
		{list: "a,b,c,d,e", names: []string{"a", "b", "c", "d", "e"}, wfTenant: "b"},
		{list: "a.b", wantErr: true},
		{list: " , ", wantErr: true},
	}
	for _, tc := range cases {
		wl := loadgen.DefaultWorkload(time.Second, 1)
		wf, err := retenant(&wl, tc.list)
		if (err != nil) != tc.wantErr {
			t.Fatalf("%q: err %v", tc.list, err)
		}
		if err != nil {
			continue
		}
		var got []string
		share := 0.0
		for _, m := range wl.Tenants {
			got = append(got, m.Name)
			share += m.Share
			if schemas.PriorityRank(m.Priority) < 0 || m.DeadlineMs <= 0 {
				t.Fatalf("%q: tenant %+v lost its class", tc.list, m)
			}
		}
		if strings.Join(got, ",") != strings.Join(tc.names, ",") || wf != tc.wfTenant || share < 0.999 || share > 1.001 {
			t.Fatalf("%q: tenants %v (shares sum %.3f), workflow tenant %q", tc.list, got, share, wf)
		}
	}
}
