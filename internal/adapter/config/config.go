// Package config owns reading the operator's configuration files — the
// tenant profiles and the GPU/model catalog overrides — from disk and
// handing them to the pure core (internal/core/admission, internal/core/catalog),
// which parses and validates but never touches the filesystem.
package config

import (
	"fmt"
	"os"

	"github.com/switchyard-ai/switchyard/internal/core/admission"
	"github.com/switchyard-ai/switchyard/internal/core/catalog"
)

// LoadTenants reads and validates a tenants JSON file.
func LoadTenants(path string) (*admission.Tenants, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("tenants: %w", err)
	}
	t, err := admission.ParseTenants(b)
	if err != nil {
		return nil, fmt.Errorf("tenants %s: %w", path, err)
	}
	return t, nil
}

// LoadCatalog returns the built-in catalog with the JSON file at path
// merged over it (catalog.Merge); an empty path returns the built-in one.
func LoadCatalog(path string) (*catalog.Catalog, error) {
	if path == "" {
		return catalog.Default(), nil
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("catalog: %w", err)
	}
	c, err := catalog.Merge(b)
	if err != nil {
		return nil, fmt.Errorf("catalog %s: %w", path, err)
	}
	return c, nil
}
