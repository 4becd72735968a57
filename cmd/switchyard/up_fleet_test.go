package main

import (
	"testing"

	"github.com/switchyard-ai/switchyard/schemas"
)

// TestParseFleetRoles: `up --fleet` takes a role per pool, and a fleet with
// roles gives every worker a link so any of them may take a leg.
func TestParseFleetRoles(t *testing.T) {
	cases := []struct {
		in        string
		roles     []string
		link      string
		wantError bool
	}{
		{"h100:2", []string{"", ""}, "", false},
		{"h100:1@prefill,a100-80g:2@decode", []string{schemas.RolePrefill, schemas.RoleDecode, schemas.RoleDecode}, "ib-ndr", false},
		{"h100:1@prefill,h100:1", []string{schemas.RolePrefill, ""}, "ib-ndr", false},
		{"h100:1@sideways", nil, "", true},
		{"h100:x@prefill", nil, "", true},
	}
	for _, tc := range cases {
		got, err := parseFleet(tc.in, "llama-3.1-8b", "bf16")
		if (err != nil) != tc.wantError {
			t.Fatalf("parseFleet(%q): error %v, want error %v", tc.in, err, tc.wantError)
		}
		if tc.wantError {
			continue
		}
		if len(got) != len(tc.roles) {
			t.Fatalf("parseFleet(%q): %d workers, want %d", tc.in, len(got), len(tc.roles))
		}
		for i, w := range got {
			if w.Role != tc.roles[i] || w.Link != tc.link {
				t.Fatalf("parseFleet(%q)[%d]: role %q link %q, want %q %q", tc.in, i, w.Role, w.Link, tc.roles[i], tc.link)
			}
		}
	}
}

// TestParseFleetModels: an entry may name its own model (gpu:count=model),
// the rest serve the command's; an empty name is refused.
func TestParseFleetModels(t *testing.T) {
	got, err := parseFleet("h100:2,h100:1=qwen2.5-7b@both", "llama-3.1-8b", "bf16")
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"llama-3.1-8b", "llama-3.1-8b", "qwen2.5-7b"}
	if len(got) != len(want) {
		t.Fatalf("%d workers, want %d", len(got), len(want))
	}
	for i, w := range got {
		if w.Model != want[i] || w.GPU != "h100" {
			t.Errorf("worker %d: %s on %s, want %s on h100", i, w.Model, w.GPU, want[i])
		}
	}
	if got[2].Role != schemas.RoleBoth {
		t.Errorf("role %q, want both", got[2].Role)
	}
	if _, err := parseFleet("h100:1=", "llama-3.1-8b", "bf16"); err == nil {
		t.Error("an empty model name was taken")
	}
}
