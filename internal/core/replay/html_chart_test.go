package replay

import (
	"regexp"
	"strings"
	"testing"
	"time"
)

// TestAttainmentChartKeepsEqualSeriesVisible: three series all at 1.0 are
// drawn as three distinct lines (different y, different dashes), not one
// line hiding the other two colours.
func TestAttainmentChartKeepsEqualSeriesVisible(t *testing.T) {
	t0 := time.Date(2026, 12, 2, 0, 0, 0, 0, time.UTC)
	var ss []Series
	for _, class := range []string{"critical", "interactive", "batch"} {
		s := Series{Tenant: "acme", Class: class}
		for i := range 4 {
			s.Points = append(s.Points, SeriesPoint{Start: t0.Add(time.Duration(i) * time.Minute), Requests: 10, SLOMet: 10})
		}
		ss = append(ss, s)
	}
	var b strings.Builder
	attainmentChart(&b, ss)
	lines := regexp.MustCompile(`<polyline [^>]*stroke-dasharray="([^"]*)" points="[0-9.]+,([0-9.]+) `).FindAllStringSubmatch(b.String(), -1)
	if len(lines) != 3 {
		t.Fatalf("%d polylines, want 3:\n%s", len(lines), b.String())
	}
	ys, dashes := map[string]bool{}, map[string]bool{}
	for _, l := range lines {
		dashes[l[1]], ys[l[2]] = true, true
	}
	if len(ys) != 3 || len(dashes) != 3 {
		t.Fatalf("series at the same value share y %v / dashes %v: one hides the others", ys, dashes)
	}
}
