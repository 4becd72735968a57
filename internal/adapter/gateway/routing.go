package gateway

import (
	"net/http"
	"strconv"
	"strings"

	"github.com/switchyard-ai/switchyard/schemas"
)

// Routing headers. Each may instead be given as a key of the body's
// `metadata` object (MetaPriority ...); a header wins over metadata because
// it is set by the caller's infrastructure (a proxy, an agent framework),
// which knows the budget better than the prompt-building code does.
const (
	HeaderPriority     = "X-Switchyard-Priority"
	HeaderDeadlineMs   = "X-Switchyard-Deadline-Ms"
	HeaderWorkflowID   = "X-Switchyard-Workflow-Id"
	HeaderWorkflowStep = "X-Switchyard-Workflow-Step"
	HeaderWorkflowOf   = "X-Switchyard-Workflow-Of"
	// HeaderWorkflowDeadlineMs is the whole workflow's budget.
	HeaderWorkflowDeadlineMs = "X-Switchyard-Workflow-Deadline-Ms"
	// HeaderSessionID pins a conversation for prefix-cache affinity.
	HeaderSessionID = "X-Switchyard-Session-Id"
	// HeaderRequestID is echoed on every response: the id of the request on
	// the bus, for tracing it through EVENTS and RESULTS.
	HeaderRequestID = "X-Switchyard-Request-Id"
)

// Metadata keys that carry routing context in the body.
const (
	MetaPriority           = "priority"
	MetaDeadlineMs         = "deadline_ms"
	MetaWorkflowID         = "workflow_id"
	MetaWorkflowStep       = "workflow_step"
	MetaWorkflowOf         = "workflow_of"
	MetaWorkflowDeadlineMs = "workflow_deadline_ms"
	MetaSessionID          = "session_id"
)

// Routing is the scheduling context of one HTTP request.
type Routing struct {
	Priority   string
	DeadlineMs int64
	Workflow   *schemas.Workflow
	SessionID  string
	// Metadata is the body's metadata less the routing keys, passed on.
	Metadata map[string]string
}

// ParseRouting reads priority, deadline, workflow and session from h, then
// from meta for whatever the headers left unset. It checks syntax only
// (integers, a known priority class, a coherent workflow); policy (may this
// tenant use critical?) is the admitter's.
func ParseRouting(h http.Header, meta map[string]string) (Routing, *schemas.Error) {
	get := func(header, key string) (string, string) {
		if v := strings.TrimSpace(h.Get(header)); v != "" {
			return v, header
		}
		return strings.TrimSpace(meta[key]), "metadata." + key
	}
	var r Routing
	if v, field := get(HeaderPriority, MetaPriority); v != "" {
		v = strings.ToLower(v)
		if schemas.PriorityRank(v) < 0 {
			return Routing{}, schemas.Errf(schemas.CodeInvalidPriority, field, "unknown priority %q; use one of %s", v, strings.Join(schemas.Priorities, ", "))
		}
		r.Priority = v
	}
	if v, field := get(HeaderDeadlineMs, MetaDeadlineMs); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n <= 0 {
			return Routing{}, schemas.Errf(schemas.CodeInvalidDeadline, field, "deadline must be a positive integer of milliseconds, got %q", v)
		}
		r.DeadlineMs = n
	}
	wfID, idField := get(HeaderWorkflowID, MetaWorkflowID)
	stepS, stepField := get(HeaderWorkflowStep, MetaWorkflowStep)
	ofS, ofField := get(HeaderWorkflowOf, MetaWorkflowOf)
	wdlS, wdlField := get(HeaderWorkflowDeadlineMs, MetaWorkflowDeadlineMs)
	if wfID != "" {
		w := &schemas.Workflow{ID: wfID, Step: 1}
		if !schemas.ValidID(wfID) {
			return Routing{}, schemas.Errf(schemas.CodeInvalidWorkflow, idField, "workflow id must be 1-128 characters of [A-Za-z0-9_-]")
		}
		var err *schemas.Error
		if w.Step, err = positiveInt(stepS, stepField, 1); err != nil {
			return Routing{}, err
		}
		if w.Of, err = positiveInt(ofS, ofField, 0); err != nil {
			return Routing{}, err
		}
		if w.Of > 0 && w.Step > w.Of {
			return Routing{}, schemas.Errf(schemas.CodeInvalidWorkflow, stepField, "workflow step %d of %d is inconsistent", w.Step, w.Of)
		}
		dl, err := positiveInt(wdlS, wdlField, 0)
		if err != nil {
			return Routing{}, err
		}
		w.DeadlineMs = int64(dl)
		r.Workflow = w
	} else if stepS != "" || ofS != "" || wdlS != "" {
		return Routing{}, schemas.Errf(schemas.CodeInvalidWorkflow, idField, "workflow step, of or deadline given without a workflow id")
	}
	r.SessionID, _ = get(HeaderSessionID, MetaSessionID)
	for k, v := range meta {
		switch k {
		case MetaPriority, MetaDeadlineMs, MetaWorkflowID, MetaWorkflowStep, MetaWorkflowOf, MetaWorkflowDeadlineMs, MetaSessionID:
			continue
		}
		if r.Metadata == nil {
			r.Metadata = make(map[string]string, len(meta))
		}
		r.Metadata[k] = v
	}
	return r, nil
}

func positiveInt(s, field string, def int) (int, *schemas.Error) {
	if s == "" {
		return def, nil
	}
	n, err := strconv.Atoi(s)
	if err != nil || n <= 0 {
		return 0, schemas.Errf(schemas.CodeInvalidWorkflow, field, "%s must be a positive integer, got %q", field, s)
	}
	return n, nil
}
