// Package subjects owns Switchyard's subject grammar and its JetStream
// stream definitions: builders and parsers for every subject, and the
// stream configs that are provisioned idempotently at start.
//
//	sy.submit.<tenant>                            any client → admitter      SUBMIT
//	sy.batch.<tenant>                             bulk work → admitter's batch lane  SUBMIT
//	sy.admitted.<class>.<deadline-bucket>.<tenant> admitter → router         ADMITTED
//	sy.dispatch.<worker>                          router → one worker        DISPATCH
//	sy.final.<tenant>.<request-id>                any finisher → RESULTS (stored as sy.result.…)
//	sy.result.<tenant>.<request-id>               RESULTS → client (republished once stored)
//	sy.hb.<pool>.<worker>, sy.kv.<worker>         worker → router, control   HEARTBEATS
//	sy.event.<service>.<kind>                     every service              EVENTS
//	sy.ctl.>                                      controller, admitter → all CONTROL
//	sy.dlq.<service>                              undecodable input          DLQ
//	sy.tok.<tenant>.<request-id>                  worker → client (core NATS) TOKENS (memory, 10 min)
//	sy.journal.<service>.<instance>               a decision loop's ordered inputs JOURNAL
//	sy.rpc.<kind>.<target>                        core request/reply, never stored
package subjects

import (
	"fmt"
	"strings"
	"time"
)

// Prefix is the root token of every Switchyard subject.
const Prefix = "sy"

// Subject wildcards used by consumers and permissions.
const (
	SubmitAll = "sy.submit.*"
	// BatchSubmitAll is the batch lane: bulk submissions (batch files) are
	// admitted by their own consumer so ten thousand queued lines never sit
	// in front of an interactive request at admission.
	BatchSubmitAll = "sy.batch.*"
	AdmittedAll    = "sy.admitted.>"
	DispatchAll    = "sy.dispatch.*"
	ResultAll      = "sy.result.>"
	// FinalAll is where finishers publish a request's candidate final
	// result. Only RESULTS listens there: it stores the first one per id
	// under sy.result.<tenant>.<id> and republishes what it stored on that
	// subject, so a live subscriber sees one result per id, never a
	// duplicate that the ledger refused.
	FinalAll     = "sy.final.>"
	HeartbeatAll = "sy.hb.>"
	KVAll        = "sy.kv.*"
	EventAll     = "sy.event.>"
	ControlAll   = "sy.ctl.>"
	DLQAll       = "sy.dlq.>"
	TokensAll    = "sy.tok.>"
	JournalAll   = "sy.journal.>"
	ScheduleAll  = "sy.sched.>"
	RPCAll       = "sy.rpc.>"
)

// Journal is sy.journal.<service>.<instance>: the ordered inputs of one
// decision loop, recorded so replay can run them through the same core.
func Journal(service, instance string) string { return join(Prefix, "journal", service, instance) }

// ValidToken reports whether s can stand as one subject token: non-empty,
// no '.', '*', '>' or whitespace.
func ValidToken(s string) bool { return validToken(s, 128) }

// MaxAnswerTokenLen bounds an id that is too long to be a request id but
// can still carry its own refusal: a client that sent a 129-character id
// listens on sy.result.<tenant>.<that id>, and an invalid_id answered under
// a generated id would never reach it.
const MaxAnswerTokenLen = 255

// ValidAnswerToken reports whether s, though maybe too long for a request
// id, is a subject token a refusal can be published under.
func ValidAnswerToken(s string) bool { return validToken(s, MaxAnswerTokenLen) }

func validToken(s string, max int) bool {
	if s == "" || len(s) > max {
		return false
	}
	for i := 0; i < len(s); i++ {
		switch c := s[i]; c {
		case '.', '*', '>', ' ', '\t', '\r', '\n':
			return false
		default:
			if c < 0x21 || c > 0x7e {
				return false
			}
		}
	}
	return true
}

func join(tokens ...string) string { return strings.Join(tokens, ".") }

// Submit is sy.submit.<tenant>.
func Submit(tenant string) string { return join(Prefix, "submit", tenant) }

// BatchSubmit is sy.batch.<tenant>, the batch admission lane.
func BatchSubmit(tenant string) string { return join(Prefix, "batch", tenant) }

// Admitted is sy.admitted.<class>.<bucket>.<tenant>.
func Admitted(class, bucket, tenant string) string {
	return join(Prefix, "admitted", class, bucket, tenant)
}

// AdmittedClass is the filter for one priority class: sy.admitted.<class>.>.
func AdmittedClass(class string) string { return join(Prefix, "admitted", class, ">") }

// Schedule is sy.sched.<tenant>.<id>, where a deferred request's schedule
// waits: inside the ADMITTED stream (schedules fire only within their
// stream) but outside every router filter, and unique per request because
// a stream keeps one schedule per subject.
func Schedule(tenant, id string) string { return join(Prefix, "sched", tenant, id) }

// Dispatch is sy.dispatch.<worker>.
func Dispatch(worker string) string { return join(Prefix, "dispatch", worker) }

// Result is sy.result.<tenant>.<id>: the subject a final result is stored
// under in RESULTS and republished on for live subscribers. Nobody
// publishes here directly; finishers publish on Final.
func Result(tenant, id string) string { return join(Prefix, "result", tenant, id) }

// Final is sy.final.<tenant>.<id>, the subject a finisher publishes a
// final result on (through the ledger): RESULTS stores it as
// Result(tenant, id), only if that subject holds nothing yet, and only then
// republishes it there.
func Final(tenant, id string) string { return join(Prefix, "final", tenant, id) }

// Tokens is sy.tok.<tenant>.<id>, the core-NATS token stream of one request.
func Tokens(tenant, id string) string { return join(Prefix, "tok", tenant, id) }

// Handoff is where a prefill leg's KV handle goes (schemas.KVHandle):
// the router's handoff consumer turns it into the decode leg's dispatch.
func Handoff(tenant, id string) string { return join(Prefix, "handoff", tenant, id) }

// HandoffAll matches every handoff.
func HandoffAll() string { return join(Prefix, "handoff", ">") }

// KVPullRequest is the request/reply subject a decode worker asks a
// prefill worker for a request's KV on (simulated: the answer says
// whether the blocks are still held; the transfer time is waited).
func KVPullRequest(worker string) string { return RPC("kvpull", worker) }

// Heartbeat is sy.hb.<pool>.<worker>.
func Heartbeat(pool, worker string) string { return join(Prefix, "hb", pool, worker) }

// KV is sy.kv.<worker>.
func KV(worker string) string { return join(Prefix, "kv", worker) }

// RPC is sy.rpc.<kind>.<target>: core-NATS request/reply between services.
// It is deliberately outside every stream: a stream capturing a request
// subject answers the request itself with a publish ack, before the real
// responder can.
func RPC(kind, target string) string { return join(Prefix, "rpc", kind, target) }

// KVSnapshotRequest is the request subject on which a worker answers with a
// KV snapshot: sy.rpc.kvsnap.<worker>.
func KVSnapshotRequest(worker string) string { return RPC("kvsnap", worker) }

// PeerBookings is sy.rpc.book.<router>: the bookings a router made,
// published (core NATS, never stored) for its active-active peers and the
// controller to count until a heartbeat absorbs them. A lost message costs
// at most one heartbeat's worth of double booking, or of a dispatch the
// controller does not see, never a request.
func PeerBookings(router string) string { return RPC("book", router) }

// PeerBookingsAll matches every router's bookings.
const PeerBookingsAll = "sy.rpc.book.*"

// ParsePeerBookings returns the router of sy.rpc.book.<router>.
func ParsePeerBookings(subj string) (router string, err error) {
	p := strings.Split(subj, ".")
	if len(p) != 4 || p[0] != Prefix || p[1] != "rpc" || p[2] != "book" || !ValidToken(p[3]) {
		return "", fmt.Errorf("subject %q is not sy.rpc.book.<router>", subj)
	}
	return p[3], nil
}

// FairShare is sy.rpc.fair.<router>: an active-active router's fairness
// report (what it placed per class and tenant since it started, what it
// holds queued), published on core NATS every few hundred milliseconds for
// its peers' class weights and tenant shares to count. The totals are
// cumulative, so a lost report costs only delay.
func FairShare(router string) string { return RPC("fair", router) }

// FairShareAll matches every router's fairness reports.
const FairShareAll = "sy.rpc.fair.*"

// ParseFairShare returns the router of sy.rpc.fair.<router>.
func ParseFairShare(subj string) (router string, err error) {
	p := strings.Split(subj, ".")
	if len(p) != 4 || p[0] != Prefix || p[1] != "rpc" || p[2] != "fair" || !ValidToken(p[3]) {
		return "", fmt.Errorf("subject %q is not sy.rpc.fair.<router>", subj)
	}
	return p[3], nil
}

// Event is sy.event.<service>.<kind>.
func Event(service, kind string) string { return join(Prefix, "event", service, kind) }

// Cancel is sy.ctl.cancel.<tenant>: cancel a request or workflow step.
func Cancel(tenant string) string { return join(Prefix, "ctl", "cancel", tenant) }

// CancelAll matches every cancel.
const CancelAll = "sy.ctl.cancel.*"

// Control is sy.ctl.<kind>.<target>, used by the controller.
func Control(kind, target string) string { return join(Prefix, "ctl", kind, target) }

// DLQ is sy.dlq.<service>.
func DLQ(service string) string { return join(Prefix, "dlq", service) }

// ParseIntake returns the tenant of sy.submit.<tenant> or sy.batch.<tenant>,
// and whether it is the batch lane.
func ParseIntake(subj string) (tenant string, batch bool, err error) {
	t := strings.Split(subj, ".")
	if len(t) != 3 || t[0] != Prefix || (t[1] != "submit" && t[1] != "batch") || !ValidToken(t[2]) {
		return "", false, fmt.Errorf("subject %q is not sy.submit.<tenant> or sy.batch.<tenant>", subj)
	}
	return t[2], t[1] == "batch", nil
}

// ParseResult returns tenant and id of sy.result.<tenant>.<id>.
func ParseResult(subj string) (tenant, id string, err error) {
	t := strings.Split(subj, ".")
	if len(t) != 4 || t[0] != Prefix || t[1] != "result" {
		return "", "", fmt.Errorf("subject %q is not sy.result.<tenant>.<id>", subj)
	}
	return t[2], t[3], nil
}

// ParseDispatch returns the worker of sy.dispatch.<worker>.
func ParseDispatch(subj string) (string, error) {
	t := strings.Split(subj, ".")
	if len(t) != 3 || t[0] != Prefix || t[1] != "dispatch" {
		return "", fmt.Errorf("subject %q is not sy.dispatch.<worker>", subj)
	}
	return t[2], nil
}

// ParseHeartbeat returns pool and worker of sy.hb.<pool>.<worker>.
func ParseHeartbeat(subj string) (pool, worker string, err error) {
	t := strings.Split(subj, ".")
	if len(t) != 4 || t[0] != Prefix || t[1] != "hb" {
		return "", "", fmt.Errorf("subject %q is not sy.hb.<pool>.<worker>", subj)
	}
	return t[2], t[3], nil
}

// Deadline buckets partition admitted work by how much time it has left, so
// a consumer can look at the urgent lanes first and replay can slice by
// urgency. Bounds are upper limits on the remaining budget.
var deadlineBuckets = []struct {
	name  string
	upper time.Duration
}{
	{"d1s", time.Second},
	{"d10s", 10 * time.Second},
	{"d1m", time.Minute},
	{"d10m", 10 * time.Minute},
	{"d1h", time.Hour},
	{"dlong", 0},
}

// DeadlineBucket names the bucket for a remaining latency budget.
func DeadlineBucket(remaining time.Duration) string {
	for _, b := range deadlineBuckets {
		if b.upper == 0 || remaining <= b.upper {
			return b.name
		}
	}
	return "dlong"
}
