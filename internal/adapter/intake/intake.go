// Package intake owns the first, pure step of admission: turning the raw
// bytes and headers of a submission into a decoded request with a tenant
// and an id, or into a specific error that still names the id the client
// will be listening on. It never panics on any input.
package intake

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nuid"

	"github.com/switchyard-ai/switchyard/internal/core/tokens"
	"github.com/switchyard-ai/switchyard/schemas"
	"github.com/switchyard-ai/switchyard/subjects"
)

// Submission is a decoded request with everything taken from the envelope.
type Submission struct {
	Tenant  string
	ID      string
	Format  schemas.Format
	Request schemas.Request
	// IDGenerated is set when neither the payload nor the Nats-Msg-Id
	// header carried an id.
	IDGenerated bool
	// BatchLane is set for submissions on sy.batch.<tenant>: bulk work,
	// always admitted on the batch class.
	BatchLane bool
}

// Failure is a submission that cannot be admitted. ID and Tenant are as
// good as could be recovered, so the error result reaches the client.
type Failure struct {
	Tenant string
	ID     string
	Format schemas.Format
	Err    *schemas.Error
	// DeadLetter is set when the bytes themselves are unusable (as opposed
	// to a well-formed request that breaks a rule), so the original goes to
	// the DLQ for inspection.
	DeadLetter bool
	// NoReply is set when there is no valid tenant, so no result subject.
	NoReply bool
}

// Decode parses one submission. headerID is the Nats-Msg-Id header (may be
// empty), contentType the Content-Type header.
func Decode(subject, contentType, headerID string, data []byte, maxBytes int) (Submission, *Failure) {
	tenant, batchLane, err := subjects.ParseIntake(subject)
	if err != nil {
		return Submission{}, &Failure{ID: headerID, NoReply: true, DeadLetter: true,
			Err: schemas.Errf(schemas.CodeInvalidTenant, "subject", "%v", err)}
	}
	id := ""
	if schemas.ValidID(headerID) {
		id = headerID
	}
	f, ferr := schemas.FormatFromContentType(contentType)
	fail := func(code, field, msg string, dead bool) (Submission, *Failure) {
		if id == "" {
			id = nuid.Next()
		}
		return Submission{}, &Failure{Tenant: tenant, ID: id, Format: f, DeadLetter: dead,
			Err: &schemas.Error{Code: code, Field: field, Message: msg}}
	}
	if ferr != nil {
		f = schemas.JSON
		return fail(schemas.CodeUnsupportedContentType, "", ferr.(*schemas.Error).Message, true)
	}
	if headerID != "" && id == "" {
		// Replacing it silently would leave the client waiting on a
		// result subject that never comes: the refusal goes out under the
		// header's own value when that can stand as a subject token (too
		// long, say), else under a generated id, and names the value.
		if subjects.ValidAnswerToken(headerID) {
			id = headerID
		}
		return fail(schemas.CodeInvalidID, schemas.HeaderMsgID, fmt.Sprintf("%s %q is not a valid request id: use 1-128 characters of [A-Za-z0-9_-]", schemas.HeaderMsgID, headerID), false)
	}
	if maxBytes > 0 && len(data) > maxBytes {
		return fail(schemas.CodeOversized, "", "message is "+strconv.Itoa(len(data))+" bytes, limit "+strconv.Itoa(maxBytes), true)
	}
	if len(strings.TrimSpace(string(data))) == 0 {
		return fail(schemas.CodeMalformed, "", "empty message body", true)
	}
	var req schemas.Request
	if err := schemas.Unmarshal(f, data, &req); err != nil {
		return fail(schemas.CodeMalformed, "", "cannot decode "+f.String()+" request: "+schemas.DecodeErrorText(err), true)
	}
	generated := false
	switch {
	case req.ID != "":
		if !schemas.ValidID(req.ID) {
			if id == "" && subjects.ValidAnswerToken(req.ID) {
				id = req.ID // answered where the client listens
			}
			return fail(schemas.CodeInvalidID, "id", "id must be 1-128 characters of [A-Za-z0-9_-]", false)
		}
		id = req.ID
	case id != "":
		req.ID = id
	default:
		id = nuid.Next()
		req.ID = id
		generated = true
	}
	if batchLane {
		// The lane is the promise: bulk work cannot jump the queue by
		// claiming a higher class.
		req.Priority = schemas.PriorityBatch
	}
	return Submission{Tenant: tenant, ID: id, Format: f, Request: req, IDGenerated: generated, BatchLane: batchLane}, nil
}

// Enrich computes what admission and placement need from the prompt: its
// token count and chained block hashes.
func Enrich(req *schemas.Request) (promptTokens int, blockHashes []uint64) {
	toks := tokens.Tokenize(req.PromptText())
	return len(toks), tokens.BlockHashes(toks)
}

// Admit builds the envelope for the router.
func Admit(s Submission, priority, model string, now, deadline time.Time) schemas.Admitted {
	n, hashes := Enrich(&s.Request)
	return schemas.Admitted{
		V:            schemas.Version,
		Request:      s.Request,
		Tenant:       s.Tenant,
		Priority:     priority,
		Model:        model,
		SubmittedAt:  now,
		Deadline:     deadline,
		PromptTokens: n,
		BlockHashes:  hashes,
		ResultFormat: s.Format.String(),
		TTFTTargetMs: s.Request.TTFTTargetMs,
		TPOTTargetMs: s.Request.TPOTTargetMs,
	}
}
