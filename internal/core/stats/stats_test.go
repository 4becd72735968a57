package stats

import "testing"

func TestQuantile(t *testing.T) {
	for _, tc := range []struct {
		name string
		xs   []float64
		q    float64
		want float64
	}{
		{"empty is zero", nil, 0.99, 0},
		{"one value", []float64{7}, 0.5, 7},
		{"median of even count interpolates", []float64{1, 2, 3, 4}, 0.5, 2.5},
		{"p0 is the minimum", []float64{1, 2, 3}, 0, 1},
		{"p100 is the maximum", []float64{1, 2, 3}, 1, 3},
		{"p99 of 1..101 is 100", seq(101), 0.99, 100},
		{"p90 between ranks", []float64{0, 10}, 0.9, 9},
		{"q above 1 clamps", []float64{1, 2}, 1.5, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := Quantile(tc.xs, tc.q); got != tc.want {
				t.Fatalf("Quantile(%v, %g) = %g, want %g", tc.xs, tc.q, got, tc.want)
			}
		})
	}
}

func TestQuantileOfLeavesInputUnsorted(t *testing.T) {
	xs := []float64{3, 1, 2}
	if got := QuantileOf(xs, 0.5); got != 2 {
		t.Fatalf("median %g, want 2", got)
	}
	if xs[0] != 3 {
		t.Fatalf("input reordered: %v", xs)
	}
}

func seq(n int) []float64 {
	out := make([]float64, n)
	for i := range out {
		out[i] = float64(i + 1)
	}
	return out
}
