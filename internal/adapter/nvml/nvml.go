// Package nvml owns real GPU telemetry: it asks the NVIDIA driver (NVML,
// through github.com/NVIDIA/go-nvml) what GPU a worker runs on, how much
// memory is free and how busy it is, and maps the NVML name onto the
// catalog's GPU names so that a real worker reports the same profile the
// simulator uses.
//
// NVML needs cgo and the driver's libnvidia-ml.so.1, so it is compiled in
// only with the build tag `nvml` (go build -tags nvml). Without the tag, or
// when the library or driver is missing, Probe returns ErrUnavailable and
// the worker says plainly that it simulates. A failed nvml.Init is final:
// calling any other NVML function after it kills the process with a symbol
// lookup error (verified on a driverless machine, gpu-model.md §9), so the
// enabled build touches nothing else unless Init succeeded.
package nvml

import (
	"errors"
	"strings"
)

// ErrUnavailable means no NVML telemetry: built without the nvml tag, or no
// driver/library/permission on this machine.
var ErrUnavailable = errors.New("nvml: unavailable")

// Info describes GPU 0 of the machine.
type Info struct {
	Name string // as NVML reports it, e.g. "NVIDIA H200"
	// Arch is the catalog's generation name: ampere, ada, hopper,
	// blackwell (or "unknown").
	Arch           string
	MemoryTotal    uint64 // bytes
	MemoryFree     uint64 // bytes
	UtilizationGPU float64
	DriverVersion  string
	// Count is the number of GPUs visible to the process.
	Count int
}

// archName maps NVML's DEVICE_ARCH_* values (nvml.h) onto catalog names.
func archName(a uint32) string {
	switch a {
	case 7:
		return "ampere"
	case 8:
		return "ada"
	case 9:
		return "hopper"
	case 10:
		return "blackwell"
	}
	return "unknown"
}

// CatalogName maps an NVML device name onto a catalog GPU name, or "" when
// the part is not in the catalog. PCIe and NVL variants map onto the SXM
// entry of the same chip, which overstates their bandwidth somewhat.
func CatalogName(nvmlName string) string {
	n := strings.ToUpper(nvmlName)
	has := func(tok string) bool {
		for _, f := range strings.FieldsFunc(n, func(r rune) bool { return r == ' ' || r == '-' || r == '_' }) {
			if f == tok {
				return true
			}
		}
		return false
	}
	switch {
	case has("H200"):
		return "h200"
	case has("H100"):
		return "h100"
	case has("B200"):
		return "b200"
	case has("A100"):
		if strings.Contains(n, "40GB") {
			return "a100-40g"
		}
		return "a100-80g"
	case has("L40S"):
		return "l40s"
	case has("L4"):
		return "l4"
	case strings.Contains(n, "MI300X"):
		return "mi300x"
	}
	return ""
}
