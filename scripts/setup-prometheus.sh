#!/usr/bin/env bash
# Install the Prometheus server, promtool and Alertmanager (Debian packages) used by the live
# PromQL and alert-response integration tests. Idempotent: installs only what is missing.
set -euo pipefail
need=()
command -v prometheus >/dev/null 2>&1 || need+=(prometheus)
command -v prometheus-alertmanager >/dev/null 2>&1 || command -v alertmanager >/dev/null 2>&1 \
    || need+=(prometheus-alertmanager)
if [ "${#need[@]}" -gt 0 ]; then
    SUDO=""
    if [ "$(id -u)" != 0 ]; then SUDO="sudo"; fi
    # another apt run (a parallel setup) may hold the lock: wait for it
    ok=""
    for _ in $(seq 1 30); do
        if $SUDO apt-get update && DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y \
                --no-install-recommends "${need[@]}"; then
            ok=1
            break
        fi
        sleep 10
    done
    if [ -z "$ok" ]; then
        echo "setup-prometheus: could not install ${need[*]}; the tests that need them are skipped (they fail on CI)"
        exit 0
    fi
    # The packages may start system services; the tests run their own instances on free ports.
    $SUDO systemctl disable --now prometheus prometheus-alertmanager >/dev/null 2>&1 || true
fi
echo "setup-prometheus: $(prometheus --version 2>&1 | head -1)"
echo "setup-prometheus: $( (command -v prometheus-alertmanager || command -v alertmanager) )"
