// Package vllmfleet holds the end-to-end test of Switchyard in front of a
// vLLM-shaped fleet: real admitter, router and openai-backend workers on an
// embedded JetStream server, each worker fronting an httptest server that
// answers with vLLM's recorded /metrics names and streaming completions
// and publishes vLLM's KV events (msgpack over ZMQ, vllmkvtest). These are
// recorded shapes from vLLM's documented formats, not a live vLLM.
package vllmfleet
