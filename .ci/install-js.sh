#!/usr/bin/env bash
# Installs the npm packages the JavaScript client tests drive, exactly as
# package-lock.json records them (npm ci), into the repository so nothing
# global changes:
#   .ci/js/gateway/node_modules  the official OpenAI client (npm `openai`),
#                                used by services/gateway/openai_js_test.go
# Re-running reinstalls from the lock file; it needs node and npm on PATH.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"

if ! command -v npm >/dev/null 2>&1; then
	echo "install-js: npm not found; install nodejs and npm (Debian: apt-get install -y nodejs npm)" >&2
	exit 1
fi

echo "install-js: npm ci in .ci/js/gateway (openai $(sed -n 's/.*"openai": "\(.*\)".*/\1/p' "$root/.ci/js/gateway/package.json"))"
(cd "$root/.ci/js/gateway" && npm ci --no-audit --no-fund --loglevel=error)
echo "install-js: done"
