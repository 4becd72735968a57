package main

import (
	"maps"
	"slices"
	"strings"
	"testing"
)

func TestParseQueueWeights(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want map[string]int
		err  string
	}{
		{in: "", want: nil},
		{in: "interactive=4,standard=1", want: map[string]int{"interactive": 4, "standard": 1}},
		{in: " critical=8 , batch=1", want: map[string]int{"critical": 8, "batch": 1}},
		{in: "premium=4", err: `"premium=4" is not class=weight`},
		{in: "interactive", err: `"interactive" is not class=weight`},
		{in: "interactive=0", err: `weight "0" of interactive is not a positive integer`},
		{in: "standard=x", err: `weight "x" of standard is not a positive integer`},
	} {
		got, err := parseQueueWeights(tc.in)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("parseQueueWeights(%q) error %v, want one containing %q", tc.in, err, tc.err)
			}
			continue
		}
		if err != nil || !maps.Equal(got, tc.want) {
			t.Errorf("parseQueueWeights(%q) = %v, %v; want %v", tc.in, got, err, tc.want)
		}
	}
}

func TestParseClasses(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want []string
		err  string
	}{
		{in: "", want: nil},
		{in: "standard", want: []string{"standard"}},
		{in: "interactive, standard,interactive", want: []string{"interactive", "standard"}},
		{in: "premium", err: `"premium" is not a class`},
		{in: "standard,", err: `"" is not a class`},
	} {
		got, err := parseClasses(tc.in)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("parseClasses(%q) error %v, want one containing %q", tc.in, err, tc.err)
			}
			continue
		}
		if err != nil || !slices.Equal(got, tc.want) {
			t.Errorf("parseClasses(%q) = %v, %v; want %v", tc.in, got, err, tc.want)
		}
	}
}
