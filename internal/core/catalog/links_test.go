package catalog

import (
	"slices"
	"strings"
	"testing"
)

func TestDefaultLinks(t *testing.T) {
	// Per-direction, per-GPU figures from the vendors' spec sheets:
	// NVLink's bidirectional figure halved, a NIC's Gb/s over 8.
	want := map[string]float64{
		"nvlink4": 450, "nvlink3": 300, "ib-ndr": 50, "ib-hdr": 25,
		"roce-400": 50, "eth-100": 12.5, "eth-25": 3.125,
	}
	for name, gbps := range want {
		l, ok := LinkNamed(name)
		if !ok {
			t.Errorf("link %s missing", name)
			continue
		}
		if l.Name != name || l.GBps != gbps || l.Source == "" {
			t.Errorf("link %s: %+v, want %g GB/s with a source", name, l, gbps)
		}
		// A few µs of wire plus the software setup: never zero, never
		// more than a few ms.
		if l.LatencySeconds < 1e-6 || l.LatencySeconds > 5e-3 {
			t.Errorf("link %s: latency %g s out of range", name, l.LatencySeconds)
		}
		if l.NodeLocal != strings.HasPrefix(name, "nvlink") {
			t.Errorf("link %s: NodeLocal %v", name, l.NodeLocal)
		}
	}
	names := LinkNames()
	if !slices.IsSorted(names) {
		t.Errorf("LinkNames not sorted: %v", names)
	}
	for name := range want {
		if !slices.Contains(names, name) {
			t.Errorf("LinkNames lacks %s", name)
		}
	}
	if _, ok := LinkNamed("IB-NDR"); !ok {
		t.Error("LinkNamed is not case-insensitive")
	}
	for _, name := range []string{"", "token-ring"} {
		if _, ok := LinkNamed(name); ok {
			t.Errorf("LinkNamed(%q) ok", name)
		}
	}
}

func TestEffectiveLink(t *testing.T) {
	for _, tc := range []struct {
		a, b, want string // want "" = not ok
	}{
		{"ib-ndr", "ib-ndr", "ib-ndr"},
		{"ib-ndr", "eth-100", "eth-100"},
		{"eth-100", "ib-ndr", "eth-100"},
		{"ib-hdr", "ib-ndr", "ib-hdr"},
		// Equal bandwidth: the higher latency, whatever the order.
		{"ib-ndr", "roce-400", "roce-400"},
		{"roce-400", "ib-ndr", "roce-400"},
		{"nvlink4", "nvlink4", "nvlink4"},
		// Leaving the node: the network link, not NVLink.
		{"nvlink4", "ib-ndr", "ib-ndr"},
		{"eth-25", "nvlink3", "eth-25"},
		// Two NVLink generations are never one NVLink domain.
		{"nvlink3", "nvlink4", ""},
		{"", "ib-ndr", ""},
		{"ib-ndr", "", ""},
		{"ib-ndr", "carrier-pigeon", ""},
	} {
		l, ok := Default().EffectiveLink(tc.a, tc.b)
		if ok != (tc.want != "") || (ok && l.Name != tc.want) {
			t.Errorf("EffectiveLink(%q, %q) = %q, %v; want %q", tc.a, tc.b, l.Name, ok, tc.want)
		}
	}
}

func TestMergeLinks(t *testing.T) {
	c, err := Merge([]byte(`{"links": {"eth-100": {"gbps": 1.5625}, "cxl-x": {"gbps": 64, "latency_s": 0.0001, "source": "test"}}}`))
	if err != nil {
		t.Fatal(err)
	}
	if l, _ := c.Link("eth-100"); l.GBps != 1.5625 || l.LatencySeconds == 0 || l.Source == "" {
		t.Errorf("override kept the other fields? %+v", l)
	}
	if _, ok := c.Link("cxl-x"); !ok {
		t.Error("new link not added")
	}
	if l, _ := LinkNamed("eth-100"); l.GBps != 12.5 {
		t.Errorf("Merge changed the defaults: %+v", l)
	}
	if _, err := Merge([]byte(`{"links": {"bad": {"gbps": 0}}}`)); err == nil {
		t.Error("a link without bandwidth validated")
	}
	if _, err := Merge([]byte(`{"links": {"eth-100": {"gbs": 1}}}`)); err == nil {
		t.Error("a misspelt field was accepted")
	}
}
