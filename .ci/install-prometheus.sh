#!/usr/bin/env bash
# Installs Debian's `prometheus` package, which the Prometheus-in-CI test
# (cmd/switchyard, TestPrometheusScrapesUpAndGateway) runs against a live
# `switchyard up` and gateway. CI runs as root; elsewhere sudo is used when
# present. Re-running is cheap: nothing happens when prometheus is on PATH.
set -euo pipefail

if command -v prometheus >/dev/null 2>&1; then
	echo "prometheus already installed: $(prometheus --version 2>&1 | head -n1)"
	exit 0
fi
. "$(dirname "$0")/apt.sh"
if ! apt_install prometheus; then
	echo "prometheus not installed; its test will skip" >&2
	exit 1
fi
# The package starts a system service on installs where an init runs; the
# test runs its own instance on a free port with its own config.
echo "installed: $(prometheus --version 2>&1 | head -n1)"
