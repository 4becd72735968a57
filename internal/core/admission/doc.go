// Package admission owns the admitter's decisions: whether a request is
// done at all, done from cache, done on a smaller model or a cheaper pool,
// done later, or refused — and why. Every decision is a pure, deterministic
// function of (state, input, now): the admitter service only moves bytes
// between NATS and these functions, and the simulator and replay run the
// same code with virtual time.
//
// One concern per file:
//
//	tenants.go  tenant profiles from a JSON file; unknown-tenant policy; priority rules
//	quota.go    token buckets (requests and tokens per minute) and spend budgets
//	estimate.go predicted latency and GPU-seconds of a request (pluggable)
//	move.go     complexity estimate, model ladder, cheaper-pool hint ("Move")
//	shed.go     predicted wait per priority class from queue depth; shedding ("Delay")
//	defer.go    deferral of batch work to troughs ("Delay")
//	decide.go   Decide: the checks above in their documented order
//
// The order of checks and every error code are documented in
// docs/admission.md.
package admission
