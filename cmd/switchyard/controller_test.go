package main

import (
	"context"
	"io"
	"maps"
	"strings"
	"testing"
)

// TestParseInventory: --inventory gpu=count[,...], each count at least 1,
// a GPU named once; a malformed entry is refused naming it.
func TestParseInventory(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want map[string]int
		err  string
	}{
		{in: "", want: map[string]int{}},
		{in: "h100=4", want: map[string]int{"h100": 4}},
		{in: "h100=4, a100-80g=2", want: map[string]int{"h100": 4, "a100-80g": 2}},
		{in: "h100", err: `"h100": want gpu=count`},
		{in: "h100=0", err: `"h100=0"`},
		{in: "=3", err: `"=3"`},
		{in: "h100=x", err: `"h100=x"`},
		{in: "h100=1,h100=2", err: "named twice"},
	} {
		got, err := parseInventory(tc.in)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("parseInventory(%q) = %v, %v; want an error saying %q", tc.in, got, err, tc.err)
			}
			continue
		}
		if err != nil || !maps.Equal(got, tc.want) {
			t.Errorf("parseInventory(%q) = %v, %v; want %v", tc.in, got, err, tc.want)
		}
	}
}

// The controller command refuses --shift-models without an inventory and
// an inventory without --shift-models, before it connects anywhere.
func TestControllerShiftFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		err  string
	}{
		{[]string{"--shift-models"}, "--shift-models needs --inventory"},
		{[]string{"--inventory", "h100=2"}, "--inventory needs --shift-models"},
		{[]string{"--shift-models", "--inventory", "h100=none"}, `--inventory "h100=none"`},
	} {
		err := runController(context.Background(), tc.args, io.Discard)
		if err == nil || !strings.Contains(err.Error(), tc.err) {
			t.Errorf("controller %v: %v, want an error saying %q", tc.args, err, tc.err)
		}
	}
}
