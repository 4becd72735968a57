package subjects

// Durable consumer names. They are part of the wire contract like the
// subjects: a consumer outlives the process that created it, so every
// service that creates, inspects or cleans one up must spell it the same
// way (the controller and the admitter read the routers' backlogs by name).
const (
	// AdmitterConsumer is the durable consumer all admitter replicas share
	// on sy.submit.*; JetStream spreads submissions across them.
	AdmitterConsumer = "admitter"
	// AdmitterBatchConsumer is the batch lane's durable consumer
	// (sy.batch.*).
	AdmitterBatchConsumer = "admitter-batch"
	// WorkerConsumerPrefix starts every worker's dispatch consumer name.
	WorkerConsumerPrefix = "worker-"
	// RouterConsumerPrefix starts every per-class router consumer name.
	RouterConsumerPrefix = "router-"
	// AdmitterResultsConsumerPrefix starts each admitter replica's own
	// consumer on RESULTS.
	AdmitterResultsConsumerPrefix = "admitter-results-"
	// RouterHandoffsConsumer is the durable consumer on HANDOFFS that
	// router replicas share (active-active peers as they share the class
	// consumers; the leased router alone otherwise): each KV handle goes to
	// one router, and back to another if that one dies before answering.
	RouterHandoffsConsumer = "router-handoffs"
)

// AdmitterResultsConsumer is admitter replica instance's consumer on
// RESULTS.
func AdmitterResultsConsumer(instance string) string { return AdmitterResultsConsumerPrefix + instance }

// RouterConsumer is the durable consumer per class on ADMITTED that router
// replicas share: router-<class>.
func RouterConsumer(class string) string { return RouterConsumerPrefix + class }

// WorkerConsumer is a worker's durable dispatch consumer, worker-<id>. It
// survives a restart, so a worker that comes back under the same id picks
// up what was dispatched to it.
func WorkerConsumer(id string) string { return WorkerConsumerPrefix + id }

// Message headers Switchyard sets on its own messages (the codec's
// Content-Type and the dedup Nats-Msg-Id are schemas.HeaderContentType and
// schemas.HeaderMsgID).
const (
	// HeaderEvents counts the events in one message on sy.event.>. A
	// message may carry several events of the same service and kind,
	// msgpack values back to back; without the header (one event, or a
	// JSON event) the message is a single event.
	HeaderEvents = "Sy-Events"
	// HeaderSchedule and HeaderScheduleTarget make a message a one-shot
	// JetStream schedule (nats-server 2.12+): "@at <RFC 3339>", and the
	// subject in the same stream the server republishes it on.
	HeaderSchedule       = "Nats-Schedule"
	HeaderScheduleTarget = "Nats-Schedule-Target"
	// HeaderDLQReason, HeaderDLQSubject and HeaderDLQAt say why, from
	// where and when a message was dead-lettered on sy.dlq.<service>.
	// HeaderReusedID marks a stored final result the admitter re-sent on the
	// result subject because its request id was submitted again after the
	// submission duplicate window: the request is not served twice, and
	// the id keeps its one result.
	HeaderReusedID   = "Sy-Reused-Id"
	HeaderDLQReason  = "Sy-Dlq-Reason"
	HeaderDLQSubject = "Sy-Dlq-Subject"
	HeaderDLQAt      = "Sy-Dlq-At"
)
