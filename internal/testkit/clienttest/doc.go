// Package clienttest proves that clients other than the Go one can use
// Switchyard: its tests drive the real `nats` CLI (natscli, pinned and
// installed by .ci/install-tools.sh) and a Node.js script using the npm
// `nats` package (.ci/js/natsclient) against a whole in-process Switchyard,
// each publishing a JSON request on sy.submit.<tenant> and reading its
// result from sy.result.<tenant>.<id>, live and from the RESULTS stream.
// It has no code of its own; the tests are the point.
package clienttest
