package schemas

import "fmt"

// Error codes. Each is a stable, documented string a client can switch on.
const (
	CodeMalformed              = "malformed"                // the bytes do not decode
	CodeUnsupportedContentType = "unsupported_content_type" // Content-Type is neither JSON nor msgpack
	CodeInvalidID              = "invalid_id"
	CodeMissingModel           = "missing_model"
	CodeUnknownModel           = "unknown_model"
	CodeMissingPrompt          = "missing_prompt"
	CodeAmbiguousPrompt        = "ambiguous_prompt" // both prompt and messages
	CodeInvalidMessage         = "invalid_message"
	CodeInvalidMaxTokens       = "invalid_max_tokens"
	CodePromptTooLarge         = "prompt_too_large"
	CodeContextTooLong         = "context_too_long" // prompt + max_tokens beyond the model's context
	CodeInvalidPriority        = "invalid_priority"
	CodeInvalidDeadline        = "invalid_deadline"
	CodeInvalidWorkflow        = "invalid_workflow"
	CodeInvalidTemperature     = "invalid_temperature"
	CodeInvalidTopP            = "invalid_top_p"
	CodeOversized              = "oversized"
	CodeUnknownTenant          = "unknown_tenant"
	CodeInvalidTenant          = "invalid_tenant"
	CodePriorityNotAllowed     = "priority_not_allowed"
	CodeQuotaExceeded          = "quota_exceeded"
	CodeBudgetExhausted        = "budget_exhausted"
	CodeModelNotAllowed        = "model_not_allowed"

	CodeShed             = "shed"              // predicted to miss its deadline under current load
	CodeDeadlineExceeded = "deadline_exceeded" // its deadline passed before it could be computed
	CodeWorkflowDoomed   = "workflow_doomed"
	CodeCancelled        = "cancelled"
	CodeUnplaceable      = "unplaceable" // no GPU in the fleet can ever serve it
	CodeWorkerFailed     = "worker_failed"
	CodeRetryBudget      = "retry_budget_exhausted"
	CodeBackendError     = "backend_error"
	CodeInternal         = "internal"
)

// Error is a specific, named failure carried in a Result.
type Error struct {
	Code    string `json:"code"`
	Message string `json:"message"`
	// Field names the offending request field, when there is one.
	Field string `json:"field,omitempty"`
}

func (e *Error) Error() string {
	if e.Field != "" {
		return fmt.Sprintf("%s: %s (field %s)", e.Code, e.Message, e.Field)
	}
	return e.Code + ": " + e.Message
}

// Errf builds an *Error.
func Errf(code, field, format string, args ...any) *Error {
	return &Error{Code: code, Field: field, Message: fmt.Sprintf(format, args...)}
}

// StatusForCode says which final status an error code implies.
func StatusForCode(code string) string {
	switch code {
	case CodeShed:
		return StatusShed
	case CodeDeadlineExceeded, CodeWorkflowDoomed, CodeCancelled, CodeWorkerFailed,
		CodeRetryBudget, CodeBackendError, CodeInternal:
		return StatusFailed
	}
	return StatusRejected
}

// ClientError reports whether code says the request itself was wrong or not
// allowed for its tenant — it does not decode, fails validation, names a
// model or class the tenant may not use, is over its quota or budget. Such
// a result is not a service-level miss: the SLO figures leave it out, as an
// HTTP service's availability leaves out its 4xx answers. A cancel is not
// among them: the service cancels too (the running steps of a doomed
// workflow), and that is a miss.
func ClientError(code string) bool {
	switch code {
	case CodeMalformed, CodeUnsupportedContentType, CodeInvalidID, CodeMissingModel, CodeUnknownModel,
		CodeMissingPrompt, CodeAmbiguousPrompt, CodeInvalidMessage, CodeInvalidMaxTokens, CodePromptTooLarge,
		CodeContextTooLong, CodeInvalidPriority, CodeInvalidDeadline, CodeInvalidWorkflow, CodeInvalidTemperature,
		CodeInvalidTopP, CodeOversized, CodeUnknownTenant, CodeInvalidTenant, CodePriorityNotAllowed,
		CodeQuotaExceeded, CodeBudgetExhausted, CodeModelNotAllowed:
		return true
	}
	return false
}
