package nvml

import (
	"errors"
	"testing"
)

func TestCatalogName(t *testing.T) {
	tests := map[string]string{
		"NVIDIA H200":             "h200",
		"NVIDIA H100 80GB HBM3":   "h100",
		"NVIDIA H100 PCIe":        "h100",
		"NVIDIA A100-SXM4-40GB":   "a100-40g",
		"NVIDIA A100-SXM4-80GB":   "a100-80g",
		"NVIDIA A100 80GB PCIe":   "a100-80g",
		"NVIDIA L4":               "l4",
		"NVIDIA L40S":             "l40s",
		"NVIDIA L40":              "",
		"NVIDIA B200":             "b200",
		"AMD Instinct MI300X":     "mi300x",
		"NVIDIA GeForce RTX 4090": "",
		"Tesla T4":                "",
	}
	for in, want := range tests {
		if got := CatalogName(in); got != want {
			t.Errorf("CatalogName(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestArchName(t *testing.T) {
	for a, want := range map[uint32]string{7: "ampere", 8: "ada", 9: "hopper", 10: "blackwell", 6: "unknown"} {
		if got := archName(a); got != want {
			t.Errorf("archName(%d) = %q", a, got)
		}
	}
}

// TestProbe runs everywhere: without the tag or a driver it must fail with
// ErrUnavailable (and not crash); with both it must describe a real GPU.
func TestProbe(t *testing.T) {
	info, err := Probe()
	if errors.Is(err, ErrUnavailable) {
		t.Logf("no NVML here: %v", err)
		return
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%+v catalog=%q", info, CatalogName(info.Name))
	if info.Name == "" || info.MemoryTotal == 0 || info.MemoryFree > info.MemoryTotal || info.Count < 1 || info.DriverVersion == "" {
		t.Errorf("implausible %+v", info)
	}
}
