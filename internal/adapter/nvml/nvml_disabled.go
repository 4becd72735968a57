//go:build !nvml

package nvml

// Probe reports ErrUnavailable: this binary was built without the nvml tag.
func Probe() (Info, error) { return Info{}, ErrUnavailable }
