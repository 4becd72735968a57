package cache

import (
	"crypto/sha256"
	"encoding/base32"
	"encoding/hex"
	"math"
	"regexp"
	"strconv"
	"strings"

	"github.com/switchyard-ai/switchyard/schemas"
)

// Normalize is the prompt normalisation the exact key hashes: runs of
// whitespace collapse to one space and the ends are trimmed. Case and
// punctuation are kept, because they can change a model's answer.
func Normalize(s string) string { return strings.Join(strings.Fields(s), " ") }

var safeKey = regexp.MustCompile(`^[A-Za-z0-9_-]+$`)

// tenantKey makes a tenant usable as a KV key token; see the workflow
// package for the same rule: plain tenants as they are, others base32
// behind '=' so that no two tenants share a key space.
func tenantKey(t string) string {
	if safeKey.MatchString(t) {
		return t
	}
	return "=" + base32.StdEncoding.WithPadding(base32.NoPadding).EncodeToString([]byte(t))
}

// Digest is the first 40 hex digits of a SHA-256 over parts, each
// length-prefixed, so ("ab","c") and ("a","bc") differ.
func Digest(parts ...string) string {
	h := sha256.New()
	for _, p := range parts {
		h.Write([]byte(strconv.Itoa(len(p))))
		h.Write([]byte{0})
		h.Write([]byte(p))
	}
	return hex.EncodeToString(h.Sum(nil))[:40]
}

// ExactKey is the KV key of a deterministic request's answer. ok is false
// for a request that is not deterministic: sampling at temperature > 0
// without a seed has no single right answer to replay.
func ExactKey(tenant, model string, r *schemas.Request) (key string, ok bool) {
	if !r.Deterministic() {
		return "", false
	}
	seed, temp := "-", "-"
	if r.Seed != nil {
		seed = strconv.FormatInt(*r.Seed, 10)
	}
	if r.Temperature != nil {
		temp = strconv.FormatFloat(*r.Temperature, 'g', -1, 64)
	}
	d := Digest("exact/v1", tenant, model, Normalize(r.PromptText()), strconv.Itoa(r.MaxTokens), seed, temp)
	return "x." + tenantKey(tenant) + "." + d, true
}

// SingleTurn reports whether a request is one question without history: a
// prompt, or system/developer messages plus exactly one user message.
func SingleTurn(r *schemas.Request) bool {
	if r.Prompt != "" {
		return true
	}
	users := 0
	for _, m := range r.Messages {
		switch m.Role {
		case "system", "developer":
		case "user":
			users++
		default:
			return false // assistant or tool turns: a conversation
		}
	}
	return users == 1
}

// SemanticEligible says whether a request may be served or stored by the
// semantic cache under p, and why not when it may not.
func SemanticEligible(r *schemas.Request, p Policy) (bool, string) {
	switch {
	case p.Mode != ModeSemantic:
		return false, "semantic cache off for tenant"
	case r.NoCache:
		return false, "request sets no_cache"
	case p.SemanticMultiTurn:
		return true, ""
	case r.Workflow != nil:
		return false, "workflow step: semantic cache is single-turn only unless the tenant opts in"
	case r.SessionID != "":
		return false, "session request: semantic cache is single-turn only unless the tenant opts in"
	case !SingleTurn(r):
		return false, "multi-turn conversation: semantic cache is single-turn only unless the tenant opts in"
	}
	return true, ""
}

// SemanticParts splits a request into the text to embed (the last user
// message, or the prompt) and the exact context it must share with a
// cached entry to be comparable at all.
func SemanticParts(tenant, model, embedder string, r *schemas.Request) (text, scope string) {
	var history strings.Builder
	if r.Prompt != "" {
		text = r.Prompt
	} else {
		last := -1
		for i, m := range r.Messages {
			if m.Role == "user" {
				last = i
			}
		}
		for i, m := range r.Messages {
			if i == last {
				text = m.Content
				continue
			}
			history.WriteString(m.Role)
			history.WriteByte(0)
			history.WriteString(Normalize(m.Content))
			history.WriteByte(0)
		}
	}
	wfID, tool := "", ""
	if r.Workflow != nil {
		wfID, tool = r.Workflow.ID, r.Workflow.ToolState
	}
	scope = Digest("semantic/v1", tenant, model, embedder, history.String(), wfID, tool, r.SessionID)[:24]
	return Normalize(text), "s." + tenantKey(tenant) + "." + scope
}

// Cosine is the cosine similarity of a and b, 0 when either is zero or
// their lengths differ.
func Cosine(a, b []float32) float64 {
	if len(a) != len(b) || len(a) == 0 {
		return 0
	}
	var dot, na, nb float64
	for i := range a {
		x, y := float64(a[i]), float64(b[i])
		dot += x * y
		na += x * x
		nb += y * y
	}
	if na == 0 || nb == 0 {
		return 0
	}
	return dot / math.Sqrt(na*nb)
}
