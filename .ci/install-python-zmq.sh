#!/usr/bin/env bash
# Installs Debian's python3-zmq and python3-msgpack for the vLLM KV-event
# interop test (internal/adapter/backend/vllmkv), whose publisher speaks
# vLLM's wire format from Python the way vLLM's own publisher does.
# Skipped when the system python3 already imports both. Needs root or
# passwordless sudo for apt-get.
set -euo pipefail

if /usr/bin/python3 -c "import zmq, msgpack" >/dev/null 2>&1; then
	echo "python3 zmq and msgpack already installed"
	exit 0
fi
. "$(dirname "$0")/apt.sh"
apt_install python3 python3-zmq python3-msgpack
/usr/bin/python3 -c "import zmq, msgpack; print('installed python3-zmq', zmq.__version__)"
