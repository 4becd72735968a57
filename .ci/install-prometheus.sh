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
if ! command -v apt-get >/dev/null 2>&1; then
	echo "apt-get not found: cannot install prometheus; its test will skip" >&2
	exit 1
fi
sudo=""
if [ "$(id -u)" != 0 ]; then
	if command -v sudo >/dev/null 2>&1; then
		sudo="sudo"
	else
		echo "not root and no sudo: cannot install prometheus; its test will skip" >&2
		exit 1
	fi
fi
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq
# --no-install-recommends: the server binary only, not the node exporter
# and the other recommended daemons.
$sudo apt-get install -y -qq --no-install-recommends prometheus >/dev/null
# The package starts a system service on installs where an init runs; the
# test runs its own instance on a free port with its own config.
echo "installed: $(prometheus --version 2>&1 | head -n1)"
