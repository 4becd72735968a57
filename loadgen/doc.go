// Package loadgen owns Switchyard's synthetic load: the demo's mixed
// multi-tenant workload (shared system prompts, repeated prompts, agentic
// workflows some of which are doomed, `model: auto` requests and an
// overload burst), generated deterministically from a seed. Trace readers
// live in loadgen/traces and result accounting in loadgen/tally.
package loadgen
