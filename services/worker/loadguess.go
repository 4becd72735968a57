package worker

import (
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"time"
	"unsafe"
)

// A cold model's load time on a real engine, before this engine has
// loaded it once.
//
// The roofline's cold load (perf.Replica.LoadSeconds) models a vLLM
// process on a GPU: a process start, a read from NVMe, a compile and CUDA
// graphs, about 24 s whatever the model. For an engine that loads models
// on demand (Ollama) that said 24 s for a 487 KB model whose real load
// took 0.53 s; the router read it as load_s, held every request for the
// model past its 20 s deadline, and the model never loaded, so no real
// load ever replaced the guess (issue 31). A cold load on such an engine
// is its runner starting and the model's file being read, so the guess is
// the runner's start plus the model's size on disk (Ollama's /api/tags)
// over this host's read speed, measured once per process. The first real
// load replaces it (engineState.loadSeconds).

// runnerStartSeconds is Ollama v0.6.5 starting the llama.cpp runner for a
// model: the 0.53 s issue 31 measured for a 487 KB model, whose read is
// negligible, on a loaded 2-core machine.
const runnerStartSeconds = 0.5

// assumedReadBytesPerSec stands in when the host's read speed cannot be
// measured: a slow SATA disk's, so the guess errs long, not short.
const assumedReadBytesPerSec = 100e6

// readSpeed is how fast this host reads a file.
type readSpeed struct {
	BytesPerSec float64
	// Direct is set when the read bypassed the page cache (O_DIRECT): the
	// storage's own speed. Otherwise the figure is the page cache's, an
	// optimistic bound for a model file that is not cached.
	Direct bool
	// Source says what was read, or why nothing was.
	Source string
}

var hostRead struct {
	once sync.Once
	s    readSpeed
}

// hostReadSpeed measures, once per process, how fast this host reads its
// own executable (tens of MB on the same storage as the engine's models
// in a typical install; the engine's files may live elsewhere, which the
// first real load corrects).
func hostReadSpeed() readSpeed {
	hostRead.once.Do(func() {
		exe, err := os.Executable()
		if err == nil {
			hostRead.s, err = measureReadSpeed(exe, 64<<20, 300*time.Millisecond)
		}
		if err != nil {
			hostRead.s = readSpeed{BytesPerSec: assumedReadBytesPerSec, Source: "assumed (" + err.Error() + ")"}
		}
	})
	return hostRead.s
}

// readBlock is the unit of a direct read: a multiple of every device's
// logical block, and large enough that the syscalls cost nothing.
const readBlock = 1 << 20

// measureReadSpeed reads up to limit bytes of path, for at most budget,
// past the page cache where the filesystem allows it.
func measureReadSpeed(path string, limit int64, budget time.Duration) (readSpeed, error) {
	f, direct, err := openForRead(path)
	if err != nil {
		return readSpeed{}, fmt.Errorf("read speed: %w", err)
	}
	defer f.Close()
	// O_DIRECT needs a buffer aligned to the device's block.
	raw := make([]byte, readBlock+4096)
	off := int((4096 - uintptr(unsafe.Pointer(&raw[0]))%4096) % 4096)
	buf := raw[off : off+readBlock]
	start := time.Now()
	var n int64
	for n < limit && time.Since(start) < budget {
		k, err := f.Read(buf)
		n += int64(k)
		if errors.Is(err, io.EOF) || (err == nil && k == 0) {
			break
		}
		if err != nil {
			if direct && n == 0 {
				// Opened O_DIRECT but the filesystem refuses direct reads
				// (tmpfs, some overlays): read through the page cache.
				f.Close()
				if f, err = os.Open(path); err != nil {
					return readSpeed{}, fmt.Errorf("read speed: %w", err)
				}
				direct = false
				start = time.Now()
				continue
			}
			return readSpeed{}, fmt.Errorf("read speed: reading %s: %w", path, err)
		}
	}
	el := time.Since(start).Seconds()
	if n < readBlock || el <= 0 {
		return readSpeed{}, fmt.Errorf("read speed: %s gave %d bytes, too few to time", path, n)
	}
	return readSpeed{BytesPerSec: float64(n) / el, Direct: direct, Source: fmt.Sprintf("%s (%d MB read)", path, n>>20)}, nil
}

// coldLoadGuess is the guessed cold load of a model of size bytes on the
// engine; 0 bytes (unknown) gives only the runner's start.
func coldLoadGuess(size int64, rs readSpeed) float64 {
	if size <= 0 || rs.BytesPerSec <= 0 {
		return runnerStartSeconds
	}
	return runnerStartSeconds + float64(size)/rs.BytesPerSec
}
