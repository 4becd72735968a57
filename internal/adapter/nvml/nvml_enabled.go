//go:build nvml

package nvml

import (
	"fmt"
	"sync"

	gonvml "github.com/NVIDIA/go-nvml/pkg/nvml"
)

// mu serialises Init/Shutdown pairs: NVML reference-counts Init, but a
// concurrent Shutdown between another caller's Init and its queries would
// pull the library out from under it.
var mu sync.Mutex

// Probe initialises NVML, reads GPU 0 and shuts NVML down again.
func Probe() (Info, error) {
	mu.Lock()
	defer mu.Unlock()
	if ret := gonvml.Init(); ret != gonvml.SUCCESS {
		// Nothing else may be called now (see the package comment).
		return Info{}, fmt.Errorf("%w: nvml init: %v", ErrUnavailable, ret)
	}
	defer gonvml.Shutdown()
	var info Info
	if v, ret := gonvml.SystemGetDriverVersion(); ret == gonvml.SUCCESS {
		info.DriverVersion = v
	}
	count, ret := gonvml.DeviceGetCount()
	if ret != gonvml.SUCCESS {
		return Info{}, fmt.Errorf("%w: device count: %v", ErrUnavailable, ret)
	}
	if count == 0 {
		return Info{}, fmt.Errorf("%w: no GPUs visible", ErrUnavailable)
	}
	info.Count = count
	dev, ret := gonvml.DeviceGetHandleByIndex(0)
	if ret != gonvml.SUCCESS {
		return Info{}, fmt.Errorf("nvml: device 0: %v", ret)
	}
	if info.Name, ret = dev.GetName(); ret != gonvml.SUCCESS {
		return Info{}, fmt.Errorf("nvml: name: %v", ret)
	}
	info.Arch = "unknown"
	if a, ret := dev.GetArchitecture(); ret == gonvml.SUCCESS {
		info.Arch = archName(uint32(a))
	}
	mem, ret := dev.GetMemoryInfo()
	if ret != gonvml.SUCCESS {
		return Info{}, fmt.Errorf("nvml: memory: %v", ret)
	}
	info.MemoryTotal, info.MemoryFree = mem.Total, mem.Free
	// Utilization is not supported on some parts and in MIG mode; leave 0.
	if u, ret := dev.GetUtilizationRates(); ret == gonvml.SUCCESS {
		info.UtilizationGPU = float64(u.Gpu) / 100
	}
	return info, nil
}
