#!/usr/bin/env bash
# Installs Debian's Chromium for the report tests (internal/testkit/reporttest),
# which render the simulator's and replay's HTML reports headless and fail
# on a script error or a broken layout. Skipped when chromium is already
# on PATH. Needs root or passwordless sudo for apt-get (.ci/apt.sh).
set -euo pipefail

if command -v chromium >/dev/null 2>&1; then
	echo "chromium already installed: $(chromium --version 2>/dev/null || echo unknown version)"
	exit 0
fi
. "$(dirname "$0")/apt.sh"
apt_install chromium fonts-dejavu-core
echo "installed $(chromium --version)"
