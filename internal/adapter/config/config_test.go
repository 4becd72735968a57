package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestLoadTenantsExample(t *testing.T) {
	ts, err := LoadTenants("../../../config/tenants.example.json")
	if err != nil {
		t.Fatal(err)
	}
	if _, e := ts.Lookup("acme"); e != nil {
		t.Fatalf("acme: %v", e)
	}
	if _, err := LoadTenants("no/such/file.json"); err == nil || !strings.Contains(err.Error(), "tenants") {
		t.Fatalf("missing file: %v", err)
	}
}

func TestLoadCatalog(t *testing.T) {
	p := filepath.Join(t.TempDir(), "cat.json")
	if err := os.WriteFile(p, []byte(`{"gpus":{"h100":{"price_per_hour":2.1}}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	c, err := LoadCatalog(p)
	if err != nil {
		t.Fatal(err)
	}
	if g, _ := c.GPU("h100"); g.PricePerHour != 2.1 {
		t.Fatalf("h100 price %v, want the override 2.1", g.PricePerHour)
	}
	if c, err := LoadCatalog(""); err != nil || c == nil {
		t.Fatalf("empty path: %v", err)
	}
	if err := os.WriteFile(p, []byte(`{"gpus":`), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadCatalog(p); err == nil || !strings.Contains(err.Error(), p) {
		t.Fatalf("bad file: %v", err)
	}
}
