package sim

import (
	"context"
	"testing"
)

// TestFleetMixesCheapestFirst: candidates come cheapest first, priced at
// the catalog's $/h, with each family's shapes.
func TestFleetMixesCheapestFirst(t *testing.T) {
	price := map[string]float64{"h100": 3, "a100-80g": 1.8}
	ms := FleetMixes([]string{"h100", "a100-80g"}, 3, "ib-ndr", func(g string) float64 { return price[g] })
	fam := map[string]int{}
	for i, m := range ms {
		fam[m.Family]++
		if i > 0 && m.PricePerHour < ms[i-1].PricePerHour {
			t.Fatalf("%s ($%.2f) after %s ($%.2f): not cheapest first", m.Fleet, m.PricePerHour, ms[i-1].Fleet, ms[i-1].PricePerHour)
		}
	}
	// 2 generations × 3 sizes; 4 ordered pairs × 3 (p+d ≤ 3); 1 unordered pair × 3.
	if fam[FamilyHomogeneous] != 6 || fam[FamilySplit] != 12 || fam[FamilyMixed] != 3 {
		t.Fatalf("families %v; want 6 homogeneous, 12 split, 3 mixed", fam)
	}
	if ms[0].Fleet != "a100-80g:1" || ms[0].PricePerHour != 1.8 {
		t.Fatalf("cheapest candidate %s at $%.2f; want a100-80g:1 at $1.80", ms[0].Fleet, ms[0].PricePerHour)
	}
}

// TestCheapestFleetsStopsAtFirstServing: each family stops at its first
// fleet that serves the trace, so what follows it is never run.
func TestCheapestFleetsStopsAtFirstServing(t *testing.T) {
	tr := mooncakeSlice(t, 120)
	runs := []CapacityRun{{Seed: 1, Config: Config{Model: "llama-3.1-8b"}, Trace: tr}}
	cands := FleetMixes([]string{"h100"}, 4, "", CatalogPrice(runs[0].Config))
	out, err := CheapestFleets(context.Background(), runs, cands, "switchyard", CapacitySearch{MinHighRequests: -1})
	if err != nil {
		t.Fatal(err)
	}
	served := map[string]int{}
	for _, o := range out {
		if o.Serves {
			served[o.Family]++
		}
	}
	for fam, n := range served {
		if n != 1 {
			t.Fatalf("family %s served %d times; the search stops at the first", fam, n)
		}
	}
	if served[FamilyHomogeneous] != 1 {
		t.Fatalf("no homogeneous H100 fleet of up to 4 served 120 Mooncake requests: %+v", out)
	}
	t.Logf("%d tried: %+v", len(out), out)
}
