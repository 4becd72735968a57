// Package archtest owns the import fence of Switchyard's internal/ tree:
// a manifest saying which kind each package is (the pure decision core,
// the shared wire contracts, I/O adapters, drivers, test kits and the
// composition root) and a test that fails when a package crosses the
// line its kind draws — a core package that imports NATS, the network or
// the operating system, or reads the wall clock; anything under
// internal/ importing services/; production code importing a test kit.
// A second test holds subjects/ to owning the wire names: a subject,
// header or consumer-name literal spelled anywhere else under internal/,
// services/, cmd/ or loadgen/ fails it.
//
// The package holds no production code: everything is in its tests, so
// it is run by `go test ./internal/archtest/`. A new package under
// internal/ must be given a kind in the manifest, and a crossing that is
// known and accepted for now must be listed with its reason; an entry
// that no longer occurs fails too, so the list only shrinks.
package archtest
