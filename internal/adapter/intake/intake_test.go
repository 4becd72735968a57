package intake

import (
	"strings"
	"testing"
	"time"

	"github.com/switchyard-ai/switchyard/schemas"
	"github.com/switchyard-ai/switchyard/subjects"
)

func TestDecode(t *testing.T) {
	mp, _ := schemas.Marshal(schemas.Msgpack, schemas.Request{Model: "m", Prompt: "p", MaxTokens: 1})
	tests := []struct {
		name       string
		subject    string
		ct, hdrID  string
		body       []byte
		wantID     string
		wantCode   string
		deadLetter bool
		noReply    bool
	}{
		{name: "payload id wins", subject: "sy.submit.acme", hdrID: "h1", body: []byte(`{"id":"p1","model":"m","prompt":"x","max_tokens":1}`), wantID: "p1"},
		{name: "header id", subject: "sy.submit.acme", hdrID: "h1", body: []byte(`{"model":"m","prompt":"x","max_tokens":1}`), wantID: "h1"},
		{name: "msgpack", subject: "sy.submit.acme", ct: schemas.ContentMsgpack, hdrID: "m1", body: mp, wantID: "m1"},
		{name: "malformed keeps header id", subject: "sy.submit.acme", hdrID: "h2", body: []byte(`{"model":`), wantID: "h2", wantCode: schemas.CodeMalformed, deadLetter: true},
		{name: "empty body", subject: "sy.submit.acme", hdrID: "h3", body: nil, wantID: "h3", wantCode: schemas.CodeMalformed, deadLetter: true},
		{name: "bad content type", subject: "sy.submit.acme", ct: "text/xml", hdrID: "h4", body: []byte(`<x/>`), wantID: "h4", wantCode: schemas.CodeUnsupportedContentType, deadLetter: true},
		{name: "oversized", subject: "sy.submit.acme", hdrID: "h5", body: make([]byte, 100), wantID: "h5", wantCode: schemas.CodeOversized, deadLetter: true},
		{name: "bad payload id", subject: "sy.submit.acme", body: []byte(`{"id":"a b","model":"m"}`), wantCode: schemas.CodeInvalidID},
		// Issue 20: an invalid Nats-Msg-Id is refused, not silently replaced.
		{name: "bad header id", subject: "sy.submit.acme", hdrID: "bad id.with.dots", body: []byte(`{"model":"m","prompt":"x","max_tokens":1}`), wantCode: schemas.CodeInvalidID},
		{name: "not a submit subject", subject: "sy.submit.a.b", body: []byte(`{}`), wantCode: schemas.CodeInvalidTenant, deadLetter: true, noReply: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			max := 0
			if tc.name == "oversized" {
				max = 10
			}
			sub, fail := Decode(tc.subject, tc.ct, tc.hdrID, tc.body, max)
			if tc.wantCode == "" {
				if fail != nil {
					t.Fatalf("unexpected failure %+v", fail.Err)
				}
				if sub.ID != tc.wantID || sub.Request.ID != tc.wantID || sub.Tenant != "acme" {
					t.Fatalf("got %+v", sub)
				}
				return
			}
			if fail == nil || fail.Err.Code != tc.wantCode {
				t.Fatalf("failure %+v, want code %s", fail, tc.wantCode)
			}
			if tc.wantID != "" && fail.ID != tc.wantID {
				t.Fatalf("failure id %q, want %q", fail.ID, tc.wantID)
			}
			if fail.ID == "" && !fail.NoReply {
				t.Fatal("a failure with a reply must carry an id")
			}
			if fail.DeadLetter != tc.deadLetter || fail.NoReply != tc.noReply {
				t.Fatalf("deadLetter %v noReply %v", fail.DeadLetter, fail.NoReply)
			}
		})
	}
}

func TestBatchLaneForcesTheBatchClass(t *testing.T) {
	sub, fail := Decode("sy.batch.acme", "", "b1", []byte(`{"model":"m","prompt":"x","max_tokens":1,"priority":"critical"}`), 0)
	if fail != nil {
		t.Fatalf("failure %+v", fail.Err)
	}
	if !sub.BatchLane || sub.Tenant != "acme" || sub.Request.Priority != schemas.PriorityBatch {
		t.Fatalf("batch lane submission %+v", sub)
	}
	sub, _ = Decode("sy.submit.acme", "", "i1", []byte(`{"model":"m","prompt":"x","max_tokens":1,"priority":"critical"}`), 0)
	if sub.BatchLane || sub.Request.Priority != schemas.PriorityCritical {
		t.Fatalf("interactive lane submission %+v", sub)
	}
}

// TestAdmitCarriesTheLatencyObjective: a caller's TTFT/TPOT targets reach
// the Admitted envelope, where the worker and the simulator judge slo_met
// by them (internal/core/slo.TargetOf), and zero stays zero.
func TestAdmitCarriesTheLatencyObjective(t *testing.T) {
	now := time.Unix(1000, 0)
	tests := []struct {
		name       string
		ttft, tpot float64
	}{
		{"targets set", 1500, 75},
		{"deadline only", 0, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			sub := Submission{Tenant: "acme", ID: "r1", Request: schemas.Request{ID: "r1", Model: "m", Prompt: "hello there", MaxTokens: 4,
				TTFTTargetMs: tc.ttft, TPOTTargetMs: tc.tpot}}
			a := Admit(sub, schemas.PriorityInteractive, "m", now, now.Add(time.Second))
			if a.TTFTTargetMs != tc.ttft || a.TPOTTargetMs != tc.tpot {
				t.Fatalf("admitted targets %v/%v, want %v/%v", a.TTFTTargetMs, a.TPOTTargetMs, tc.ttft, tc.tpot)
			}
		})
	}
}

// A NATS client's body of the wrong JSON type is refused in JSON's terms:
// the field and the type it takes, no Go struct or type name.
func TestMalformedNamesNoGoTypes(t *testing.T) {
	_, fail := Decode("sy.submit.acme", "", "g1", []byte(`{"model":"m","prompt":"x","max_tokens":"16"}`), 0)
	if fail == nil || fail.Err.Code != schemas.CodeMalformed {
		t.Fatalf("failure %+v, want malformed", fail)
	}
	if msg := fail.Err.Message; !strings.Contains(msg, `"max_tokens" must be an integer`) || strings.Contains(msg, "Go ") || strings.Contains(msg, "schemas.") {
		t.Fatalf("message %q", msg)
	}
}

// TestInvalidIDAnsweredWhereTheClientListens: an id that is no request id
// (129 characters, say) but can stand as a subject token gets its
// invalid_id refusal under itself, so a client subscribed to
// sy.result.<tenant>.<its id> hears why; one that cannot (a '.') gets a
// generated id, and the message names what was sent.
func TestInvalidIDAnsweredWhereTheClientListens(t *testing.T) {
	long := strings.Repeat("a", 129)
	for _, tc := range []struct {
		name, header, body string
		wantID             string // "" means generated
	}{
		{"129-character header id", long, `{"model":"m","prompt":"p","max_tokens":1}`, long},
		{"129-character body id", "", `{"id":"` + long + `","model":"m","prompt":"p","max_tokens":1}`, long},
		{"header id with a dot", "a.b", `{"model":"m","prompt":"p","max_tokens":1}`, ""},
		{"id past any subject token", strings.Repeat("b", 300), `{"model":"m","prompt":"p","max_tokens":1}`, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, f := Decode("sy.submit.acme", "", tc.header, []byte(tc.body), 0)
			if f == nil || f.Err.Code != schemas.CodeInvalidID {
				t.Fatalf("failure %+v, want invalid_id", f)
			}
			if tc.wantID != "" && f.ID != tc.wantID {
				t.Fatalf("answered under %q, want the client's own id", f.ID)
			}
			if tc.wantID == "" && (f.ID == tc.header || !subjects.ValidToken(f.ID)) {
				t.Fatalf("answered under %q, want a generated id", f.ID)
			}
		})
	}
}
