#!/usr/bin/env bash
# Installs Debian's Chromium for the report tests (internal/testkit/reporttest),
# which render the simulator's and replay's HTML reports headless and fail
# on a script error or a broken layout. Skipped when chromium is already
# on PATH. Needs root or passwordless sudo for apt-get.
set -euo pipefail

if command -v chromium >/dev/null 2>&1; then
	echo "chromium already installed: $(chromium --version 2>/dev/null || echo unknown version)"
	exit 0
fi
sudo=""
if [ "$(id -u)" != 0 ]; then
	if ! command -v sudo >/dev/null 2>&1; then
		echo "chromium is not installed and apt-get needs root (no sudo)" >&2
		exit 1
	fi
	sudo="sudo -n"
fi
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq
$sudo apt-get install -y -qq --no-install-recommends chromium fonts-dejavu-core >/dev/null
echo "installed $(chromium --version)"
