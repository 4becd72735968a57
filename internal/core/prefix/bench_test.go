package prefix

import (
	"math/rand/v2"
	"syscall"
	"testing"
	"time"

	"github.com/switchyard-ai/switchyard/internal/core/tokens"
)

// benchIndex is an index shaped like placement's synthetic fleet: workers
// that hold 16 to 63 leading blocks of shared 64-block prompt families,
// entries (worker, block) pairs in all; and requests that extend a family
// with 20 blocks of their own.
func benchIndex(workers, entries int) (*Index, [][]uint64) {
	rng := rand.New(rand.NewPCG(1, 2))
	const chain = 64
	fam := make([][]uint64, entries/(chain*8)+1)
	for i := range fam {
		var parent uint64
		for j := 0; j < chain; j++ {
			parent = tokens.ChainHash(parent, []uint32{uint32(i), uint32(j)})
			fam[i] = append(fam[i], parent)
		}
	}
	ix := New(0)
	for ix.Entries() < entries {
		ix.Stored(int32(rng.IntN(workers)), fam[rng.IntN(len(fam))][:16+rng.IntN(chain-16)])
	}
	reqs := make([][]uint64, 1024)
	for i := range reqs {
		reqs[i] = append([]uint64(nil), fam[rng.IntN(len(fam))]...)
		for range 20 {
			reqs[i] = append(reqs[i], rng.Uint64())
		}
	}
	return ix, reqs
}

func benchmarkMatch(b *testing.B, workers, entries int) {
	ix, reqs := benchIndex(workers, entries)
	lens := make([]int32, ix.MaxWorker())
	var touched []int32
	b.ReportAllocs()
	b.ResetTimer()
	cpu := cpuTime()
	for i := 0; i < b.N; i++ {
		touched = ix.Match(reqs[i%len(reqs)], lens, touched[:0])
		for _, w := range touched {
			lens[w] = 0
		}
	}
	b.ReportMetric(float64((cpuTime()-cpu).Nanoseconds())/float64(b.N), "cpu-ns/op")
}

// cpuTime is the process's user CPU time: on a shared machine it leaves
// out the time other processes hold the CPU, which ns/op counts.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano())
}

// BenchmarkMatch1k and BenchmarkMatch10k are one request's match against
// the index of the placement benchmarks' fleets (bench placement's
// defaults and ten times them).
func BenchmarkMatch1k(b *testing.B)  { benchmarkMatch(b, 1000, 100000) }
func BenchmarkMatch10k(b *testing.B) { benchmarkMatch(b, 10000, 1000000) }
