// Package workflow owns Switchyard's view of multi-step agentic workflows:
// which steps of a workflow have started, finished or failed, the
// workflow's overall deadline, and the decision whether the workflow is
// doomed.
//
// Everything here is pure: functions of a State snapshot and the time, with
// no I/O, so the simulator and replay can run it — the doom verdict
// (doom.go), the deadline split (budget.go) and the state machine
// (transitions.go: a step starts, a result lands, a step is refused).
// internal/adapter/workflowstore persists State in a JetStream KV bucket and
// re-applies those transitions under compare-and-set, so several admitters
// and result watchers can update one workflow without losing a step.
//
// Why this exists: an agentic task succeeds only if every step does, so
// computing step 7 of a workflow whose step 3 failed for good, or that can
// no longer finish before its deadline, is GPU time spent on a task that
// cannot succeed. Refusing those steps early (and cancelling the running
// ones) is the cheapest way to raise cost per successful task.
package workflow
