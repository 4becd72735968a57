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
