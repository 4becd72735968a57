package cache

import (
	"crypto/sha256"
	"encoding/base32"
	"encoding/hex"
	"encoding/json"
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

// KeyFields names the schemas.Request fields, by JSON name, that can change
// the answer and so are part of every cache key: the model (the key's own
// argument), the prompt or messages, and the generation parameters
// answerParams encodes. NotKeyFields names the fields that cannot change
// the answer. Every field is in one of the two, which a test checks, so a
// field added to the request is classified before it can be served a
// cached answer computed without it.
var (
	KeyFields = []string{"model", "prompt", "messages", "max_tokens", "temperature", "seed",
		"top_p", "stop", "response_format", "tools"}
	NotKeyFields = []string{
		"v", "id", // the wire version and the request's own name
		"priority", "deadline_ms", "deadline", "ttft_target_ms", "tpot_target_ms", // when, not what
		"workflow", "session_id", // the semantic scope carries them (see SemanticParts)
		"prefix_hint", "stream", "no_cache", "metadata", // placement, delivery and bookkeeping
	}
)

// answerParams is the canonical text of the generation parameters that
// shape an answer beside the model and prompt: max_tokens, temperature,
// top_p, seed, stop, response_format and tools. An unset parameter is "-",
// never its default, so a request that leaves temperature to the engine
// does not share an entry with one that names a value. response_format
// and tools are JSON with sorted keys (encoding/json's map order), so two
// encodings of one value agree.
func answerParams(r *schemas.Request) string {
	f := func(v *float64) string {
		if v == nil {
			return "-"
		}
		return strconv.FormatFloat(*v, 'g', -1, 64)
	}
	seed := "-"
	if r.Seed != nil {
		seed = strconv.FormatInt(*r.Seed, 10)
	}
	j := func(v any) string {
		b, err := json.Marshal(v)
		if err != nil {
			// Not JSON-encodable (a NaN inside a tool schema): a key no
			// other request can share, so the request is never answered
			// from another's entry.
			return "!" + err.Error()
		}
		return string(b)
	}
	stop, _ := json.Marshal(r.Stop)
	return strings.Join([]string{
		"max_tokens=" + strconv.Itoa(r.MaxTokens),
		"temperature=" + f(r.Temperature),
		"top_p=" + f(r.TopP),
		"seed=" + seed,
		"stop=" + string(stop),
		"response_format=" + j(r.ResponseFormat),
		"tools=" + j(r.Tools),
	}, "\x00")
}

// Sampled reports whether a request samples its answer: a temperature
// above 0, or none (OpenAI's default is 1), with no seed to fix the draw.
// Its answer is one draw of many; a replay would repeat that draw to a
// caller who asked for a fresh one.
func Sampled(r *schemas.Request) bool { return !r.Deterministic() }

// Cacheable says whether either cache may answer or store r under p, and
// why not when it may not. A sampled request is served from cache only
// when the tenant asks for it (Policy.AllowSampled).
func Cacheable(r *schemas.Request, p Policy) (bool, string) {
	switch {
	case !p.Enabled():
		return false, "cache off for tenant"
	case r.NoCache:
		return false, "request sets no_cache"
	case Sampled(r) && !p.AllowSampled:
		return false, "sampled request (temperature above 0 or unset, and no seed): not served from cache unless the tenant sets cache.allow_sampled"
	}
	return true, ""
}

// AnswerKey is the exact cache's KV key of r's answer: tenant, model, the
// whitespace-normalised prompt and every generation parameter
// (answerParams). Whether r may use it is Cacheable's question.
func AnswerKey(tenant, model string, r *schemas.Request) string {
	// v2: v1 keys left out top_p, stop, response_format and tools; a v1
	// entry is never read again and expires with the bucket TTL.
	d := Digest("exact/v2", tenant, model, Normalize(r.PromptText()), answerParams(r))
	return "x." + tenantKey(tenant) + "." + d
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
	if ok, why := Cacheable(r, p); !ok {
		return false, why
	}
	switch {
	case p.Mode != ModeSemantic:
		return false, "semantic cache off for tenant"
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
	// The generation parameters are part of the scope, not of the
	// similarity: a near-duplicate prompt may share an answer, a different
	// max_tokens, stop or temperature may not. v2: v1 scopes left them out.
	scope = Digest("semantic/v2", tenant, model, embedder, history.String(), wfID, tool, r.SessionID, answerParams(r))[:24]
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
