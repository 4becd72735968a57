package worker

import (
	"strings"
	"testing"
)

// TestGPUMismatch: a real-engine worker whose --gpu names another catalog
// GPU than the device NVML reports is told so (placement and cost read the
// configured profile); a matching device, a PCIe variant of the same chip
// and a device the catalog does not know say nothing.
func TestGPUMismatch(t *testing.T) {
	for _, tc := range []struct {
		name, configured, device string
		want                     string // substring of the reason; "" for none
	}{
		{"same GPU", "h100", "NVIDIA H100 80GB HBM3", ""},
		{"PCIe variant of the same chip", "h100", "NVIDIA H100 PCIe", ""},
		{"A100 40 GB is not the 80 GB entry", "a100-80g", "NVIDIA A100-SXM4-40GB", "the catalog's a100-40g"},
		{"another generation", "h100", "NVIDIA H200", "--gpu is h100 but NVML reports \"NVIDIA H200\""},
		{"not in the catalog", "h100", "NVIDIA GeForce GTX 1080", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := gpuMismatch(tc.configured, tc.device)
			if (tc.want == "") != (got == "") || !strings.Contains(got, tc.want) {
				t.Fatalf("gpuMismatch(%q, %q) = %q, want %q", tc.configured, tc.device, got, tc.want)
			}
		})
	}
}
