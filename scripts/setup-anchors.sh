#!/usr/bin/env bash
# Create the virtualenv of the field's forecasting tools that bench/global_forecast.py compares the
# fleet model with (issue 43): Nixtla's statsforecast (AutoETS, MSTL: per-series statistical
# anchors) and neuralforecast (a global LSTM: the deep-learning anchor).  Bench-only: the service
# never imports them, and they pin pandas/numpy versions warmcast should not have to agree with.
# Built once per machine in a cache keyed by the pinned versions (WARMCAST_ANCHORS_CACHE=none:
# in the checkout).  Idempotent.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/cached-venv.sh
VENV="${WARMCAST_ANCHORS_VENV:-.venv-anchors}"
CACHE="${WARMCAST_ANCHORS_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/warmcast/venv-anchors-sf2.1.1-nf3.3.0-torch-2.13.0}"

has_anchors() { [ -x "$1/bin/python" ] && "$1/bin/python" -c "import statsforecast, neuralforecast" >/dev/null 2>&1; }

build() {  # build() DIR: a fresh venv with both tools in DIR
    local start; start=$(date +%s)
    rm -rf "$1" && mkdir -p "$(dirname "$1")" && python3 -m venv "$1"
    cpu_torch
    "$1/bin/pip" install -q statsforecast==2.1.1 neuralforecast==3.3.0 torch==2.13.0
    "$1/bin/python" -c "import importlib.metadata as m; print('setup-anchors: statsforecast', m.version('statsforecast'), 'neuralforecast', m.version('neuralforecast'))"
    echo "setup-anchors: built $1 in $(( $(date +%s) - start )) s"
}

cached_venv setup-anchors "statsforecast and neuralforecast" "$VENV" "$CACHE" has_anchors build
