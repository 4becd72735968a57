package gateway

import (
	"net/http"

	"github.com/switchyard-ai/switchyard/schemas"
)

// OpenAI error types, as the `type` field of the error object. OpenAI
// clients switch on the HTTP status; these strings are for humans and logs.
const (
	TypeInvalidRequest = "invalid_request_error"
	TypePermission     = "permission_error"
	TypeNotFound       = "not_found_error"
	TypeRateLimit      = "rate_limit_error"
	TypeQuota          = "insufficient_quota"
	TypeTimeout        = "timeout_error"
	TypeServer         = "server_error"
	TypeOverloaded     = "overloaded_error"
)

// Codes the gateway itself raises, beside the schemas codes it passes on.
const (
	CodeInvalidAPIKey    = "invalid_api_key"
	CodeModelNotFound    = "model_not_found"         // OpenAI's name for schemas.CodeUnknownModel
	CodeContextExceeded  = "context_length_exceeded" // OpenAI's name for schemas.CodeContextTooLong
	CodeNotFound         = "not_found"
	CodeMethodNotAllowed = "method_not_allowed"
	CodeUnavailable      = "bus_unavailable"
)

// ErrorObject is OpenAI's error object.
type ErrorObject struct {
	Message string  `json:"message"`
	Type    string  `json:"type"`
	Param   *string `json:"param"`
	Code    *string `json:"code"`
}

// ErrorBody is the JSON body of every error response, and of the error
// event of a stream that fails after it started.
type ErrorBody struct {
	Error ErrorObject `json:"error"`
}

// APIError is an error response: status, body and, for the statuses that
// ask the client to come back later, the Retry-After seconds.
type APIError struct {
	Status     int
	RetryAfter int
	Body       ErrorBody
}

// NewError builds an APIError.
func NewError(status int, typ, code, param, message string) APIError {
	o := ErrorObject{Message: message, Type: typ}
	if code != "" {
		o.Code = &code
	}
	if param != "" {
		o.Param = &param
	}
	return APIError{Status: status, Body: ErrorBody{Error: o}}
}

// Unauthorized is the 401 for a missing or unknown API key.
func Unauthorized(message string) APIError {
	return NewError(http.StatusUnauthorized, TypeInvalidRequest, CodeInvalidAPIKey, "", message)
}

// BadRequest is a 400 with a Switchyard code.
func BadRequest(code, param, message string) APIError {
	return NewError(http.StatusBadRequest, TypeInvalidRequest, code, param, message)
}

// Retry-After seconds for the retryable refusals. Shedding and quota are
// both short-horizon conditions (queue depth, a per-second rate); a client
// that waits a second sees a different queue. A budget is per period, so
// no Retry-After: retrying soon cannot help.
const (
	RetryAfterShed  = 1
	RetryAfterQuota = 1
	RetryAfterRetry = 1
)

// FromError maps a Switchyard error to the HTTP status and OpenAI error
// object an OpenAI client expects. The Switchyard code is kept in `code`
// except where OpenAI has a well-known name for the same condition that
// client libraries act on (model_not_found, context_length_exceeded).
func FromError(e *schemas.Error) APIError {
	if e == nil {
		return NewError(http.StatusInternalServerError, TypeServer, schemas.CodeInternal, "", "result failed without an error")
	}
	st, typ, code, ra := http.StatusBadRequest, TypeInvalidRequest, e.Code, 0
	switch e.Code {
	case schemas.CodeUnknownModel:
		st, typ, code = http.StatusNotFound, TypeNotFound, CodeModelNotFound
	case schemas.CodeContextTooLong:
		code = CodeContextExceeded
	case schemas.CodeUnsupportedContentType:
		st = http.StatusUnsupportedMediaType
	case schemas.CodeOversized, schemas.CodePromptTooLarge:
		st = http.StatusRequestEntityTooLarge
	case schemas.CodeUnknownTenant, schemas.CodeInvalidTenant:
		// The key is known here but the admitter has no such tenant: the
		// credential does not grant access to anything.
		st, code = http.StatusUnauthorized, e.Code
	case schemas.CodePriorityNotAllowed, schemas.CodeModelNotAllowed:
		st, typ = http.StatusForbidden, TypePermission
	case schemas.CodeQuotaExceeded:
		st, typ, ra = http.StatusTooManyRequests, TypeRateLimit, RetryAfterQuota
	case schemas.CodeShed:
		st, typ, ra = http.StatusTooManyRequests, TypeRateLimit, RetryAfterShed
	case schemas.CodeBudgetExhausted:
		st, typ = http.StatusTooManyRequests, TypeQuota
	case schemas.CodeDeadlineExceeded, schemas.CodeWorkflowDoomed:
		st, typ = http.StatusGatewayTimeout, TypeTimeout
	case schemas.CodeCancelled:
		// nginx's "client closed request": nobody was reading the answer.
		st, typ = 499, TypeInvalidRequest
	case schemas.CodeUnplaceable:
		// No GPU in the fleet can ever serve it: retrying cannot help.
		st = http.StatusUnprocessableEntity
	case schemas.CodeRetryBudget:
		st, typ, ra = http.StatusServiceUnavailable, TypeOverloaded, RetryAfterRetry
	case schemas.CodeWorkerFailed, schemas.CodeBackendError:
		st, typ = http.StatusBadGateway, TypeServer
	case schemas.CodeInternal:
		st, typ = http.StatusInternalServerError, TypeServer
	}
	ae := NewError(st, typ, code, e.Field, e.Message)
	ae.RetryAfter = ra
	return ae
}

// FromResult maps a final result that is not ok to its error response. ok
// is false for a successful result.
func FromResult(r schemas.Result) (APIError, bool) {
	if r.Status == schemas.StatusOK {
		return APIError{}, false
	}
	if r.Error != nil {
		return FromError(r.Error), true
	}
	// A result without an error object still says why by its status.
	code := schemas.CodeInternal
	switch r.Status {
	case schemas.StatusShed:
		code = schemas.CodeShed
	case schemas.StatusRejected:
		code = schemas.CodeMalformed
	}
	return FromError(&schemas.Error{Code: code, Message: "request " + r.Status}), true
}
