package worker

import (
	"os"
	"syscall"
)

// openForRead opens path for a read past the page cache where the
// filesystem allows it, reporting whether it did.
func openForRead(path string) (*os.File, bool, error) {
	if f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_DIRECT, 0); err == nil {
		return f, true, nil
	}
	f, err := os.Open(path)
	return f, false, err
}
