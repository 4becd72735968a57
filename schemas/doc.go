// Package schemas owns Switchyard's versioned wire types — Request, Result,
// Heartbeat, KVEvent, Event and the internal envelopes that travel between
// services — and their two encodings: JSON (the default, so `nats pub` with a
// JSON body just works) and msgpack, chosen by the Content-Type header.
//
// Validation lives here too and returns named error codes, so that every
// rejection a client sees is specific and machine-readable.
package schemas

// Version is the wire version stamped on everything Switchyard publishes.
// Decoders accept messages without a version as version 1.
const Version = 1
