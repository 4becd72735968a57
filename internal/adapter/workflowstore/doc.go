// Package workflowstore keeps workflow State (internal/core/workflow) in a
// JetStream KV bucket: one entry per (tenant, workflow), one small index
// entry per step request so a Result, which carries only the request id,
// finds its workflow. Every change is one of the core's pure transitions,
// re-applied under compare-and-set when another writer got there first, so
// several admitters and result watchers never lose a step.
package workflowstore
