#!/usr/bin/env bash
# Install the Prometheus server (Debian package) used by the live PromQL integration
# test. Idempotent: does nothing when a `prometheus` binary is already on PATH.
set -euo pipefail
if command -v prometheus >/dev/null 2>&1; then
    echo "setup-prometheus: $(prometheus --version 2>&1 | head -1)"
    exit 0
fi
SUDO=""
if [ "$(id -u)" != 0 ]; then SUDO="sudo"; fi
$SUDO apt-get update
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y --no-install-recommends prometheus
# The package may start a system service; the tests run their own instance on a free port.
$SUDO systemctl disable --now prometheus >/dev/null 2>&1 || true
prometheus --version 2>&1 | head -1
