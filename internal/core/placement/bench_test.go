package placement

import (
	"runtime"
	"slices"
	"testing"
	"time"
)

// BenchmarkPlace is one placement over 1,000 workers with 100,000 indexed
// blocks. Targets: p99 <= 50 µs, 0 allocs/op.
func BenchmarkPlace(b *testing.B) {
	f, reqs := Synthetic(SyntheticConfig{Workers: 1000, Blocks: 100000, Requests: 512, Seed: 1}, now)
	p := New(BenchCost(), Options{})
	for i := range reqs {
		p.Place(f, &reqs[i], now)
	}
	lat := make([]time.Duration, 0, b.N)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		t := time.Now()
		p.Place(f, &reqs[i%len(reqs)], now)
		lat = append(lat, time.Since(t))
	}
	b.StopTimer()
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)/2].Nanoseconds())/1e3, "p50_us")
	b.ReportMetric(float64(lat[len(lat)*99/100].Nanoseconds())/1e3, "p99_us")
	runtime.KeepAlive(f)
}

// BenchmarkPlaceWithBookings is BenchmarkPlace as the live router runs it:
// every placement books its worker and the booking from two placements ago
// is released, so the placer's copy of the fleet has slots to refresh on
// every call. Compare its p50 with BenchmarkPlace's in the same run.
func BenchmarkPlaceWithBookings(b *testing.B) {
	f, reqs := Synthetic(SyntheticConfig{Workers: 1000, Blocks: 100000, Requests: 512, Seed: 1}, now)
	p := New(BenchCost(), Options{})
	for i := range reqs {
		p.Place(f, &reqs[i], now)
	}
	var ids [2]string
	lat := make([]time.Duration, 0, b.N)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		r := &reqs[i%len(reqs)]
		t := time.Now()
		d := p.Place(f, r, now)
		lat = append(lat, time.Since(t))
		b.StopTimer()
		f.Unreserve(ids[i%2])
		ids[i%2] = ""
		if d.OK() {
			prefill, out, blocks := d.Booking(r.PromptTokens, r.OutputTokens)
			ids[i%2] = reqs[(i+len(reqs)/2)%len(reqs)].ID
			if err := f.Reserve(d.Worker.ID, ids[i%2], r.Priority, prefill, out, blocks, now); err != nil {
				b.Fatal(err)
			}
		}
		b.StartTimer()
	}
	b.StopTimer()
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)/2].Nanoseconds())/1e3, "p50_us")
	b.ReportMetric(float64(lat[len(lat)*99/100].Nanoseconds())/1e3, "p99_us")
}

func TestSyntheticFleetPlaces(t *testing.T) {
	f, reqs := Synthetic(SyntheticConfig{Workers: 100, Blocks: 10000, Requests: 50, Seed: 2}, now)
	if f.Len() != 100 || f.Prefix().Entries() < 10000 {
		t.Fatalf("fleet %d workers, %d entries", f.Len(), f.Prefix().Entries())
	}
	p := New(BenchCost(), Options{})
	placed, cached := 0, 0
	for i := range reqs {
		d := p.Place(f, &reqs[i], now)
		if d.OK() {
			placed++
			if d.Terms.CachedTokens > 0 {
				cached++
			}
		}
	}
	if placed < len(reqs)*9/10 || cached == 0 {
		t.Fatalf("placed %d/%d, %d with a cached prefix", placed, len(reqs), cached)
	}
}

func TestNormalTail(t *testing.T) {
	for _, c := range []struct{ x, want float64 }{{0, 0.5}, {1, 0.158655}, {2, 0.0227501}, {-1, 0.841345}} {
		if got := normalTail(c.x); got-c.want > 3e-4 || c.want-got > 3e-4 {
			t.Fatalf("normalTail(%v) = %v, want %v", c.x, got, c.want)
		}
	}
}

// Pruning by the lower bound never changes the decision: a placer that
// keeps every candidate (and so never prunes) picks the same worker with
// the same breakdown, and the cheapest-first candidate lists agree.
func TestPruningKeepsTheWinner(t *testing.T) {
	f, reqs := Synthetic(SyntheticConfig{Workers: 300, Blocks: 30000, Requests: 200, Seed: 3}, now)
	pruned := New(BenchCost(), Options{})
	full := New(BenchCost(), Options{Explain: 1 << 20})
	skipped := 0
	for i := range reqs {
		a := pruned.Place(f, &reqs[i], now)
		aw, at, ac, as := a.Worker, a.Terms, append([]Candidate(nil), a.Candidates...), a.Skipped
		b := full.Place(f, &reqs[i], now)
		if aw != b.Worker || at != b.Terms {
			t.Fatalf("request %d: pruned picked %v, full %v", i, aw, b.Worker)
		}
		if b.Skipped != 0 || b.Considered != len(b.Candidates) {
			t.Fatalf("full placer skipped %d, kept %d of %d", b.Skipped, len(b.Candidates), b.Considered)
		}
		for k := range ac {
			if ac[k] != b.Candidates[k] {
				t.Fatalf("request %d: candidate %d differs", i, k)
			}
		}
		for k := 1; k < len(b.Candidates); k++ {
			if b.Candidates[k].Terms.TotalUSD < b.Candidates[k-1].Terms.TotalUSD {
				t.Fatalf("candidates not cheapest first")
			}
		}
		skipped += as
	}
	if skipped == 0 {
		t.Fatal("the lower bound never pruned a worker")
	}
}

// BenchmarkPlace10k is BenchmarkPlace at ten times the scale: 10,000
// workers and 1,000,000 indexed blocks (issue 16's target: p99 <= 30 µs).
func BenchmarkPlace10k(b *testing.B) {
	f, reqs := Synthetic(SyntheticConfig{Workers: 10000, Blocks: 1000000, Requests: 1024, Seed: 1}, now)
	p := New(BenchCost(), Options{})
	for i := range reqs {
		p.Place(f, &reqs[i], now)
	}
	lat := make([]time.Duration, 0, b.N)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		t := time.Now()
		p.Place(f, &reqs[i%len(reqs)], now)
		lat = append(lat, time.Since(t))
	}
	b.StopTimer()
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)/2].Nanoseconds())/1e3, "p50_us")
	b.ReportMetric(float64(lat[len(lat)*99/100].Nanoseconds())/1e3, "p99_us")
}
