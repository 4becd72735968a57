#!/usr/bin/env bash
# Installs the outside programs the tests drive, at pinned versions, into
# the repository so nothing global changes:
#   .tools/bin/nats                 natscli (github.com/nats-io/natscli), for
#                                   the client tests (internal/testkit/clienttest)
#   .tools/bin/ollama               Ollama (llama.cpp inside, CPU build), the
#                                   real engine of internal/testkit/enginetest
#   .ci/js/natsclient/node_modules  the npm package `nats` (exact version in
#                                   package.json, integrity in package-lock.json)
# Re-running is cheap: each step is skipped when its pinned version is present.
set -euo pipefail

NATSCLI_VERSION=v0.5.0
# Newer Ollama releases do not build from the module proxy (their module zip
# lacks a vendored header); v0.6.5 builds a working CPU binary with cgo.
OLLAMA_VERSION=v0.6.5

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"

bin="$root/.tools/bin"
mkdir -p "$bin"
stamp="$root/.tools/natscli.version"
if [[ -x "$bin/nats" && "$(cat "$stamp" 2>/dev/null)" == "$NATSCLI_VERSION" ]]; then
	echo "natscli $NATSCLI_VERSION already in $bin"
else
	echo "installing natscli $NATSCLI_VERSION into $bin"
	GOBIN="$bin" go install "github.com/nats-io/natscli/nats@$NATSCLI_VERSION"
	echo "$NATSCLI_VERSION" >"$stamp"
fi

stamp="$root/.tools/ollama.version"
if [[ -x "$bin/ollama" && "$(cat "$stamp" 2>/dev/null)" == "$OLLAMA_VERSION" ]]; then
	echo "ollama $OLLAMA_VERSION already in $bin"
else
	echo "installing ollama $OLLAMA_VERSION into $bin (compiles llama.cpp: minutes)"
	CGO_ENABLED=1 GOBIN="$bin" go install "github.com/ollama/ollama@$OLLAMA_VERSION"
	echo "$OLLAMA_VERSION" >"$stamp"
fi

if command -v npm >/dev/null 2>&1; then
	echo "installing the nats npm package into .ci/js/natsclient"
	# ci installs exactly what package-lock.json records.
	(cd "$root/.ci/js/natsclient" && npm ci --no-audit --no-fund --loglevel=error)
else
	echo "npm not found: the JavaScript client test will skip" >&2
fi

echo "done: export PATH=\"$bin:\$PATH\" or let the tests find .tools/bin/{nats,ollama}"
