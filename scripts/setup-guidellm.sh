#!/usr/bin/env bash
# Create the virtualenv that runs GuideLLM (.venv-guidellm), calibration's second load engine
# (`warmcast calibrate --engine guidellm`).  Idempotent: does nothing when
# `.venv-guidellm/bin/python -c "import guidellm"` works.  GuideLLM has its own venv because it
# needs numpy>=2, datasets and sanic, none of which warmcast or vLLM should have to agree with.
# Like .venv-vllm, it is built once per machine in a cache keyed by the pinned versions and
# linked into each checkout (WARMCAST_GUIDELLM_CACHE=none builds in the checkout itself).
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/cached-venv.sh
VENV="${WARMCAST_GUIDELLM_VENV:-.venv-guidellm}"
CACHE="${WARMCAST_GUIDELLM_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/warmcast/venv-guidellm-0.8.1-torch-2.13.0}"

has_guidellm() { [ -x "$1/bin/python" ] && "$1/bin/python" -c "import guidellm.benchmark" >/dev/null 2>&1; }

build() {  # build() DIR: a fresh venv with GuideLLM in DIR
    local start; start=$(date +%s)
    rm -rf "$1" && mkdir -p "$(dirname "$1")" && python3 -m venv "$1"
    cpu_torch  # GuideLLM imports torch only for its data loader: the CPU build is enough
    "$1/bin/pip" install -q guidellm==0.8.1 torch==2.13.0
    "$1/bin/python" -c "import importlib.metadata as m; print('setup-guidellm: guidellm', m.version('guidellm'))"
    echo "setup-guidellm: built $1 in $(( $(date +%s) - start )) s"
}

cached_venv setup-guidellm guidellm "$VENV" "$CACHE" has_guidellm build
