// Package archtest owns the import fence of Switchyard's internal/ tree.
// A package's kind is the folder it lives in — internal/core (the pure
// decisions), internal/adapter (I/O), internal/driver (runs the core
// outside the services: the simulator, the chaos drill), internal/testkit
// (helpers for tests) — plus the wire contracts schemas/ and subjects/ at
// the module's top. A test fails when a package crosses the line its kind
// draws: a core package that imports NATS, the network or the operating
// system, reads the wall clock, or imports a non-core package; anything
// under internal/ importing services/; production code importing a test
// kit; a package outside the layout. A second test holds subjects/ to
// owning the wire names: a subject, header or consumer-name literal spelled
// anywhere else under internal/, services/, cmd/ or loadgen/ fails it.
//
// The package holds no production code: everything is in its tests, so it
// is run by `go test ./internal/testkit/archtest/`. A crossing that is known
// and accepted for now must be listed with its reason; an entry that no
// longer occurs fails too, so the list only shrinks.
package archtest
