package main

import (
	"flag"
	"io"
	"strings"
	"testing"
)

// TestAutoscaleFlags: --autoscale-from-zero starts the pools at zero and
// needs --autoscale; a negative minimum is refused with the flag's name.
func TestAutoscaleFlags(t *testing.T) {
	tests := []struct {
		args     []string
		fromZero bool
		planner  string
		shift    bool
		parked   string
		err      string
	}{
		{args: []string{"--autoscale"}},
		{args: []string{"--autoscale", "--autoscale-from-zero"}, fromZero: true},
		{args: []string{"--autoscale-from-zero"}, err: "needs --autoscale"},
		{args: []string{"--autoscale", "--autoscale-min", "-1"}, err: "--autoscale-min -1"},
		{args: []string{"--autoscale", "--planner", "keda-hpa"}, planner: "keda-hpa"},
		{args: []string{"--autoscale", "--planner", "dynamo-throughput"}, planner: "dynamo-throughput"},
		{args: []string{"--autoscale", "--planner", "nope"}, err: `--planner "nope"`},
		{args: []string{"--planner", "keda-hpa"}, err: "--planner needs --autoscale"},
		{args: []string{"--autoscale", "--shift-models"}, shift: true},
		{args: []string{"--autoscale", "--shift-models", "--parked-tier", "page_cache"}, shift: true, parked: "page_cache"},
		{args: []string{"--shift-models"}, err: "--shift-models needs --autoscale"},
		{args: []string{"--autoscale", "--parked-tier", "host"}, err: "--parked-tier needs --shift-models"},
		{args: []string{"--autoscale", "--shift-models", "--parked-tier", "hbm"}, err: `--parked-tier "hbm"`},
		{args: []string{"--autoscale", "--shift-models", "--planner", "keda-hpa"}, err: "only switchyard moves GPUs"},
		{args: []string{"--autoscale", "--shift-models", "--autoscale-from-zero"}, err: "--shift-models with --autoscale-from-zero"},
	}
	for _, tc := range tests {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			fs := flag.NewFlagSet("up", flag.ContinueOnError)
			fs.SetOutput(io.Discard)
			a := addAutoscaleFlags(fs, "autoscale")
			if err := fs.Parse(tc.args); err != nil {
				t.Fatal(err)
			}
			cc, err := a.config()
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("err %v, want one naming %q", err, tc.err)
				}
				return
			}
			if tc.planner == "" {
				tc.planner = "switchyard"
			}
			if err != nil || cc == nil || cc.FromZero != tc.fromZero || cc.Planner != tc.planner || cc.Control.ShiftModels != tc.shift || cc.ParkedTier != tc.parked {
				t.Fatalf("config %+v, err %v; want from zero %v", cc, err, tc.fromZero)
			}
		})
	}
}
