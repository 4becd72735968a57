package admission

import (
	"errors"
	"testing"
	"time"

	"github.com/switchyard-ai/switchyard/schemas"
)

// FuzzDecodeRequest feeds arbitrary bytes through both wire decoders and
// Validate: nothing may panic, and every refusal must be a *schemas.Error
// with a code, because that is what the client receives.
func FuzzDecodeRequest(f *testing.F) {
	seeds := []string{
		`{"model":"llama-3.1-8b","prompt":"hi","max_tokens":8}`,
		`{"model":"auto","messages":[{"role":"user","content":"x"}],"max_tokens":1,"temperature":0}`,
		`{"model":"m","prompt":"p","messages":[{"role":"user","content":"x"}],"max_tokens":1}`,
		`{"model":"m","prompt":"p","max_tokens":-1}`,
		`{"model":"m","prompt":"p","max_tokens":5,"workflow":{"id":"w","step":3,"of":2}}`,
		`{"model":"m","prompt":"p","max_tokens":5,"deadline":"1999-01-01T00:00:00Z"}`,
		`{"model":"m","prompt":"p","max_tokens":5,"priority":"urgent"}`,
		`{"id":"bad id!","model":"m","prompt":"p","max_tokens":5}`,
		`{"v":99}`, `{}`, `[]`, `null`, `{"model":1}`, "\x81\xa5model\xa1m", "\xc1", "",
	}
	for _, s := range seeds {
		f.Add([]byte(s))
	}
	req := schemas.Request{Model: "llama-3.1-8b", Prompt: "hello", MaxTokens: 4}
	f.Add(schemas.MustMarshal(schemas.Msgpack, req))
	now := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	known := func(m string) bool { return m == "llama-3.1-8b" || m == "m" }
	tenants, err := NewTenants(Config{Default: Profile{Priority: schemas.PriorityStandard, AllowAuto: true}})
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		for _, format := range []schemas.Format{schemas.JSON, schemas.Msgpack} {
			e := decodeAndValidate(format, data, now, known)
			if e == nil {
				// A valid request must also go through Decide without a
				// panic, and any refusal there must be coded too.
				var r schemas.Request
				_ = schemas.Unmarshal(format, data, &r)
				d := Decide(Input{Now: now, Tenant: "fuzz", Request: &r, Tenants: tenants, Known: known})
				if (d.Action == ActionReject || d.Action == ActionShed) && (d.Error == nil || d.Error.Code == "") {
					t.Fatalf("Decide refused without a coded error: %+v", d)
				}
				continue
			}
			var se *schemas.Error
			if !errors.As(e, &se) || se.Code == "" || se.Message == "" {
				t.Fatalf("format %v: refusal %v (%T) is not a coded *schemas.Error", format, e, e)
			}
		}
	})
}

// decodeAndValidate is the admitter's decode path: a decode failure is a
// malformed error, anything decoded is validated.
func decodeAndValidate(format schemas.Format, data []byte, now time.Time, known schemas.ModelLookup) error {
	var r schemas.Request
	if err := schemas.Unmarshal(format, data, &r); err != nil {
		return schemas.Errf(schemas.CodeMalformed, "", "%s: %v", format, err)
	}
	if e := r.Validate(now, known, schemas.Limits{}); e != nil {
		return e
	}
	return nil
}
